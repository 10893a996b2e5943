"""The code that measures: the suite (``measure``), the sandboxed case process that calls a kernel
(``case_process``), the timers (``timing``), the hardware fingerprint (``hardware``), the sandbox
(``sandbox``) and the developer's side-by-side table (``bench``).
"""
