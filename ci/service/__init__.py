"""The service: the job runner (``runner``), what queues commits (``triggers``, ``hooks``), where a commit is
measured (``executors``), several hosts (``fleet``) and the git plumbing (``gitutil``).
"""
