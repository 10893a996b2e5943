"""The service: the job runner (``runner``), what queues commits (``triggers``, ``hooks``), where a commit is
measured (``executors``), several hosts (``fleet``), the git plumbing (``gitutil``), notifications (``notify``)
and a pull request's report as one comment (``pr_comment``).
"""
