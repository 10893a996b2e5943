"""A judged history for the dashboard tests: ``fill_history(db)`` stores and judges, as the runner does, H200
runs on main with a regression, drift, an incorrect and a crashed run, a crafted branch name, CPU-interpreter
runs and a job queue; the constants name those runs. ``add_pull_request_run(db)`` adds a pull request's head
judged against its merge-base on main."""

from __future__ import annotations

from datetime import timedelta

from ci.verdict.apply import judge_run
from problem.workload import CASES, SMOKE_CASES
from storage import queries
from storage.db import Database
from storage.ingest import ingest_result
from storage.jobs import claim_next, enqueue, finish
from tests.support.factories import BASE_TIME, default_median_us, make_result

H200 = "NVIDIA H200"
CPU = "cpu-interpreter"
N_GPU_RUNS = 12  # runs 0..11 on main; then a run on a crafted branch, then a crashed one (the newest GPU run)
SLOW_FROM = 6  # runs 6.. are 15% slower: a regression at run 6, confirmed by interleaved re-measurement
DRIFT_RUN = 8  # the kernel and the in-run baselines 10% slower together: machine drift (judged ambiguous)
INCORRECT_RUN = 9
CRAFTED_RUN = 12
CRASHED_RUN = 13
CRAFTED_BRANCH = "![x](http://127.0.0.1:9/x.png) <img src=x>"
CRASH_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "/work/kernel/__init__.py", line 3, in <module>\n'
    "    from kernel.attn import attn_output_proj_backward\n"
    "SyntaxError: invalid syntax"
)
N_CASES = len(CASES)


def commit_of(i: int) -> str:
    return f"{i:02d}aa{i:02d}bb{i:02d}cc"


def run_id_of(i: int) -> str:
    return f"gpu{i:03d}"


def fill_history(db: Database) -> dict:
    """Runs as the runner stores and judges them (ingest_result, then judge_run along the first-parent chain):

    - 12 H200 runs on main: a 15% step at run 6 (confirmed with a fake interleaved re-measurement: 4
      confirmation runs), run 8 with kernel and in-run baselines 10% slower together (drift), run 9 with an
      incorrect case;
    - run 12 on a crafted branch name (Markdown image and an HTML tag), run 13 crashed in every case with the
      same SyntaxError (the newest H200 run);
    - 2 CPU-interpreter runs, the newest of all;
    - a job queue: the crashed run's job failed with its log, a done job linked to run 11, one running, one
      queued.
    Returns {"steps": [...], "confirm_runs": [...]}."""
    chain = [commit_of(i) for i in range(CRASHED_RUN + 1)]
    level = {c: (1.15 if i >= SLOW_FROM else 1.0) for i, c in enumerate(chain)}
    confirm_runs: list[str] = []

    def confirm(parent: str, commit: str, cases: list[str]) -> list[tuple[str, str]]:
        out = []
        for k, label in enumerate(("A", "B", "B", "A")):
            c = parent if label == "A" else commit
            doc = make_result(
                run_id=f"confirm{len(confirm_runs):03d}",
                commit=c,
                cases=cases,
                scale=level[c],
                started_at=BASE_TIME + chain.index(commit) * timedelta(hours=1) + timedelta(minutes=5 + k),
            )
            ingest_result(db, doc, purpose="confirm")
            confirm_runs.append(doc["run_id"])
            out.append((label, doc["run_id"]))
        return out

    job_done = enqueue(db, "local", commit_of(11), branch="main")[0]
    assert claim_next(db, "w", "gpu0") is not None
    job_crash = enqueue(db, "local", commit_of(CRASHED_RUN), branch="main")[0]
    assert claim_next(db, "w", "gpu2") is not None
    for i in range(CRASHED_RUN + 1):
        kw: dict = {"branch": "main"}
        if i == DRIFT_RUN:
            kw.update(scale=1.15 * 1.10, control_scale=1.10)
        elif i == INCORRECT_RUN:
            kw.update(scale=level[chain[i]], status={"B1_S256": "incorrect"})
        elif i == CRASHED_RUN:
            kw.update(status="error")
        else:
            kw.update(scale=level[chain[i]])
        if i == CRAFTED_RUN:
            kw["branch"] = CRAFTED_BRANCH
        doc = make_result(run_id=run_id_of(i), commit=chain[i], started_at=BASE_TIME + i * timedelta(hours=1), **kw)
        if i == CRASHED_RUN:
            for c in doc["cases"]:
                c["error"] = CRASH_ERROR
        ingest_result(db, doc, job_id={11: job_done, CRASHED_RUN: job_crash}.get(i))
        # the drift run is judged on its screening alone (no re-measurement): drift makes it ambiguous
        judge_run(db, doc["run_id"], ancestry=chain[: i + 1][::-1], confirm=None if i == DRIFT_RUN else confirm)
    finish(db, job_done, status="done", outcome="passed", log="measured 16 cases\npassed", run_id=run_id_of(11))
    finish(
        db,
        job_crash,
        status="failed",
        outcome="crashed",
        log="building ...\n" + CRASH_ERROR,
        run_id=run_id_of(CRASHED_RUN),
    )
    for i in range(2):
        doc = make_result(
            run_id=f"cpu{i:03d}",
            commit=f"{i:02d}cpu",
            cases=SMOKE_CASES,
            gpu_model=None,
            hardware_label=CPU,
            protocol="pcpu",
            started_at=BASE_TIME + timedelta(days=2, hours=i),
            n_samples=5,
            noise=0.05,
            medians={c.name: 2e6 * (k + 1) for k, c in enumerate(SMOKE_CASES)},
        )
        ingest_result(db, doc)
        judge_run(db, doc["run_id"])
    enqueue(db, "local", "e" * 40, branch="main")
    enqueue(db, "local", "d" * 40, branch="main")
    claim_next(db, "w", "gpu1")
    return {"confirm_runs": confirm_runs, "steps": list(queries.changes(db)["step_id"])}


PR_HEAD = "prhead" + "7" * 34
PR_BASE = commit_of(11)  # main's commit the pull request's branch left from
PR_CASE = "B4_S128"  # 10 % slower in the pull request


def add_pull_request_run(db: Database) -> str:
    """The head of a pull request (branch ``feature``) off main's run 11, 10 % slower on PR_CASE, stored with its
    merge-base and judged against that commit's level, as ``solci run --base`` does (screen only). Its verdict."""
    scale = {c.name: 1.15 * (1.10 if c.name == PR_CASE else 1.0) for c in CASES}
    medians = {name: default_median_us(name) * f for name, f in scale.items()}
    doc = make_result(
        run_id="pr-run", commit=PR_HEAD, medians=medians, branch="feature", started_at=BASE_TIME + timedelta(hours=30)
    )
    ingest_result(db, doc, base=PR_BASE)
    ancestry = [PR_HEAD, *[commit_of(i) for i in range(11, -1, -1)]]
    return judge_run(db, "pr-run", ancestry=ancestry).verdict
