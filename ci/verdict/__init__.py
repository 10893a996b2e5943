"""The verdict: the pure rules a run is judged by (``rules``), the confirmation loop that re-measures a commit
against its parent (``confirm``: the order of the runs, when to stop, what a failed run means), and their
application to stored runs (``apply``).
"""
