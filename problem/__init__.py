"""The problem and its harness-owned truth: the cases, tolerances, SOL model and records (``workload``), the
float32 reference and the input maker (``reference``), and the correctness rule (``correctness``).

A measured commit supplies only ``kernel/``; nothing here is ever taken from a commit's tree.
"""
