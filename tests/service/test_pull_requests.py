"""Issue 20, item 3: a pull request's commits are judged against the level of their merge-base on main, in a
series of their own that never moves main's levels, steps or records; the confirmation pairs the PR head with
the merge-base; ``solci report --base`` says it as a reviewer wants it.

The scenario: a bare repository (the git server) whose main line is c0-c3, then a ``feature`` branch from c3
(p1 neutral, p2 makes B4_S128 10 % slower), while main goes on (c4 makes B1_S256 10 % slower, c5 neutral).
Every job runs through the job runner with the fake executor (tests/support/fakes.py)."""

from __future__ import annotations

import subprocess

import pytest

from ci.cli.main import main
from ci.service.runner import JobRunner, JobRunnerConfig
from ci.service.triggers import enqueue_commits, pull_request_bases
from ci.verdict.apply import judge_run
from storage import queries
from storage.db import Database, StorageError, open_database
from storage.jobs import enqueue
from tests.support.fakes import FakeExecutor
from tests.support.repo_factory import git, small_repo

CASES = ("B1_S256", "B4_S128", "B8_S256")


def _snapshot(db: Database) -> dict[str, list]:
    """What main's judging keeps: records, record events, current levels, and `solci flags`' steps."""
    with db.read() as conn:
        out = {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
            for table in ("records", "record_events", "levels")
        }
    out["main_steps"] = sorted(queries.changes(db)["step_id"])
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("pr")
    work = small_repo(root / "work", n_commits=1)
    c = [work.head()]
    for i in range(1, 4):
        c.append(work.commit_file("notes.txt", f"main {i}\n", f"main {i}"))
    git(work.path, "checkout", "-q", "-b", "feature")
    p1 = work.commit_file("kernel.txt", "p1\n", "p1: neutral")
    p2 = work.commit_file("kernel.txt", "p2\n", "p2: B4_S128 slower")
    git(work.path, "checkout", "-q", "main")
    for i in range(4, 6):
        c.append(work.commit_file("notes.txt", f"main {i}\n", f"main {i}"))
    bare = root / "server.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work.path), str(bare)], check=True)
    git(bare, "fetch", "-q", str(work.path), "feature:feature")

    db = open_database(root / "history.duckdb", lock_timeout=20)
    plan = dict.fromkeys(c, "pass") | {c[4]: "slow:B1_S256", c[5]: "slow:B1_S256", p1: "pass", p2: "slow:B4_S128"}
    fake = FakeExecutor(plan, cases=CASES)
    runner = JobRunner(db, JobRunnerConfig(worker="w"), executor=fake)
    for sha in c:
        enqueue(db, str(bare), sha, branch="main")
    main_reports = runner.run(once=True)
    before = _snapshot(db)
    calls_before = len(fake.calls)

    bases = pull_request_bases(bare, [p1, p2], "main")
    queued = enqueue_commits(db, str(bare), [p1, p2], branch="feature", trigger="pull_request", bases=bases)
    pr_reports = runner.run(once=True)
    return {
        "db": db,
        "bare": bare,
        "c": c,
        "p1": p1,
        "p2": p2,
        "bases": bases,
        "queued": queued,
        "main_reports": main_reports,
        "pr_reports": pr_reports,
        "before": before,
        "pr_calls": fake.calls[calls_before:],
        "runner": runner,
        "fake": fake,
    }


def test_the_merge_base_is_where_the_branch_left_main(world: dict) -> None:
    c = world["c"]
    assert world["bases"] == {world["p1"]: c[3], world["p2"]: c[3]}
    # the merge-base was measured on main already: queued once more, nothing created
    base_rows = [q for q in world["queued"] if q.base_of]
    assert [q.commit for q in base_rows] == [c[3], c[3]] and not any(q.created for q in base_rows)
    assert [r.outcome for r in world["main_reports"]] == ["passed"] * 4 + ["regressed", "passed"]


def test_a_regressed_pr_head_is_judged_against_the_merge_base_and_confirmed_against_it(world: dict) -> None:
    db, c, p1, p2 = world["db"], world["c"], world["p1"], world["p2"]
    assert [(r.commit, r.outcome) for r in world["pr_reports"]] == [(p1, "passed"), (p2, "regressed")]
    run = queries.commit_run(db, p2, base=c[3])
    v = queries.verdict(db, run["run_id"])
    assert v["verdict"] == "regressed" and v["baseline_commit"] == c[3], v  # not p1, not main's head c5
    step = queries.run_sql(db, f"SELECT * FROM steps WHERE step_id = '{v['step_id']}'").iloc[0]
    assert step["commit"] == p2 and step["parent_commit"] == c[3] and step["status"] == "open"
    assert set(queries.step_cases(db, v["step_id"])["case"]) == {"B4_S128"}  # main's B1_S256 step is not the PR's
    # the confirmation re-measured the PR head beside the merge-base, interleaved
    assert world["pr_calls"][:2] == [p1, p2] and world["pr_calls"][2:6] == [c[3], p2, p2, c[3]]


def test_a_pr_series_never_moves_main_s_levels_steps_or_records(world: dict) -> None:
    db, c = world["db"], world["c"]
    before = world["before"]
    assert before["levels"] and before["main_steps"] and any(r[0] == "project" for r in before["records"])
    assert _snapshot(db) == before
    n = queries.run_sql(db, "SELECT count(*) AS n FROM runs WHERE base IS NOT NULL AND purpose = 'measure'")["n"][0]
    assert n == 2
    assert sorted(queries.changes(db)["commit"]) == [c[4]]  # `solci flags`: main's steps only


def test_merged_the_change_is_judged_on_main_against_main_s_own_level(world: dict) -> None:
    """The PR merged (a merge commit on main): main judges it along its own line, against c4-c5, and opens its
    own step; the PR's runs and step never stood in for it."""
    db, bare, c = world["db"], world["bare"], world["c"]
    work = bare.parent / "work"
    git(work, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    merged = git(work, "rev-parse", "HEAD")
    git(bare, "fetch", "-q", str(work), "main:main")
    world["fake"].plan[merged] = "slow:B1_S256,B4_S128"  # c4's slowdown stays, the PR's arrives
    enqueue(db, str(bare), merged, branch="main")
    (done,) = world["runner"].run(once=True)
    assert done.commit == merged and done.outcome == "regressed"
    v = queries.verdict(db, queries.commit_run(db, merged)["run_id"])
    assert v["baseline_commit"] == c[5] and v["level_commits"] == 2
    assert set(queries.step_cases(db, v["step_id"])["case"]) == {"B4_S128"}
    assert sorted(queries.changes(db)["commit"]) == sorted([c[4], merged])


def test_the_report_against_the_base_names_the_moved_case_with_its_interval(world: dict, capsys) -> None:
    db, bare, c, p2 = world["db"], world["bare"], world["c"], world["p2"]
    code = main(["report", p2, "--base", "main", "--repo", str(bare), "--db", str(db.path)])
    out = capsys.readouterr().out
    assert code == 3, out  # regressed with its step open: the PR check fails
    assert "> against main: each commit is judged against the level of its merge-base with main" in out
    assert f"### `{p2[:12]}`: **regressed**" in out and "- cases moved: 1 of 3" in out
    rows = [line for line in out.splitlines() if line.startswith("| B")]
    assert len(rows) == 1 and rows[0].startswith("| B4\\_S128 |"), rows
    cells = [x.strip() for x in rows[0].strip("|").split(" | ")]
    assert float(cells[2]) / float(cells[1]) == pytest.approx(1.1, rel=0.01)
    assert cells[3] == "+10.0%" and cells[4].startswith("[+")
    assert f"judged against: the level of the merge-base {c[3][:12]}, ending at {c[3][:12]}" in out
    assert f"/?commit={p2}&base={c[3]})" in out  # the dashboard's panel of this run, not main's run of p2


def test_the_report_of_a_neutral_pr_commit_and_of_a_main_commit_pass(world: dict, capsys) -> None:
    db, bare, c = world["db"], world["bare"], world["c"]
    code = main(
        ["report", f"{c[3]}..feature", "--base", "main", "--format", "text", "--repo", str(bare), "--db", str(db.path)]
    )
    out = capsys.readouterr().out
    heads = [line.split()[:2] for line in out.splitlines() if line and not line.startswith((" ", "solci", "note"))]
    assert heads == [[world["p1"][:12], "PASS"], [world["p2"][:12], "REGRESSED"]] and code == 3
    code = main(["report", c[5], "--base", "main", "--format", "text", "--repo", str(bare), "--db", str(db.path)])
    out = capsys.readouterr().out
    assert code == 0 and f"{c[5][:12]}  PASS" in out and "merge-base" not in out.split("note:")[-1].split("\n", 1)[1]


def test_a_pr_job_and_a_main_job_of_one_commit_are_distinct(world: dict) -> None:
    db, bare, p2, c = world["db"], str(world["bare"]), world["p2"], world["c"]
    again, created = enqueue(db, bare, p2, branch="feature", base=c[3])
    assert not created and again == world["queued"][-1].job_id
    _, created = enqueue(db, bare, p2, branch="feature")
    assert created  # measured on main's line once merged by fast-forward: a job of its own


def test_a_base_the_repository_does_not_know_is_one_line_exit_2(world: dict, capsys) -> None:
    db, bare, p2 = world["db"], world["bare"], world["p2"]
    code = main(["report", p2, "--base", "no-such-branch", "--repo", str(bare), "--db", str(db.path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "no-such-branch" in err, err


def test_judging_a_pr_run_along_its_own_line_is_refused(world: dict) -> None:
    db, p1, p2, c = world["db"], world["p1"], world["p2"], world["c"]
    run = queries.commit_run(db, p2, base=c[3])["run_id"]
    with pytest.raises(StorageError, match="merge-base"):
        judge_run(db, run, ancestry=[p2, p1, c[3], c[2]])


def test_pull_requests_runs_and_steps_are_listed_apart_from_main_s(world: dict, capsys) -> None:
    """What the dashboard's pull-request table and `solci flags --pull-requests` read: each PR run with its
    merge-base and verdict, newest first; the PR's step with the merge-base it was judged against."""
    db, c, p1, p2 = world["db"], world["c"], world["p1"], world["p2"]
    prs = queries.pull_request_runs(db)
    assert list(prs["commit"]) == [p2, p1] and set(prs["base"]) == {c[3]} and set(prs["branch"]) == {"feature"}
    assert list(prs["verdict"]) == ["regressed", "pass"] and prs["worst_case"].iloc[0] == "B4_S128"
    assert queries.pull_request_runs(db, hardware="no-such-gpu").empty
    steps = queries.changes(db, pull_requests=True)
    assert list(steps["commit"]) == [p2] and list(steps["base"]) == [c[3]]
    code = main(["flags", "--pull-requests", "--cases", "--db", str(db.path)])
    out = capsys.readouterr().out
    assert code == 0 and f"{p2[:12]}  open  slower" in out and f"against merge-base {c[3][:12]}" in out, out
    assert "B4_S128" in out and "B1_S256" not in out  # main's step (c4) is not a pull request's
    code = main(["flags", "--db", str(db.path)])
    out = capsys.readouterr().out
    assert code == 0 and p2[:12] not in out and c[4][:12] in out
    code = main(["flags", "--pull-requests", "--status", "fixed", "--db", str(db.path)])
    assert code == 0 and "(no changes detected in pull requests for --status fixed)" in capsys.readouterr().out


def test_watching_a_feature_branch_with_a_base_judges_it_against_its_merge_base(tmp_path, capsys) -> None:
    """`solci watch --branch feature --base main`: the branch's commits are a pull request's series (each judged
    against its merge-base, queued first), never main's runs; without --base a watched branch is judged along its
    own line, as main is. An unknown base is one line, exit 2, before anything is queued."""
    work = small_repo(tmp_path / "work", n_commits=1)
    c = [work.head(), work.commit_file("notes.txt", "main 1\n", "main 1")]
    git(work.path, "checkout", "-q", "-b", "feature")
    p1 = work.commit_file("kernel.txt", "p1\n", "p1: neutral")
    p2 = work.commit_file("kernel.txt", "p2\n", "p2: B4_S128 slower")
    git(work.path, "checkout", "-q", "main")
    c.append(work.commit_file("notes.txt", "main 2\n", "main 2"))  # main goes on
    db_path = tmp_path / "watched.duckdb"
    args = ["watch", str(work.path), "--branch", "feature", "--base", "main", "--once", "--queue-only"]
    code = main([*args, "--backfill", "2", "--db", str(db_path)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"queued {c[1][:12]} (the merge-base of {p1[:12]} with main, main's line)" in err
    assert f"queued {p2[:12]} (feature, judged against its merge-base {c[1][:12]})" in err
    db = open_database(db_path, lock_timeout=20)
    with db.read() as conn:
        jobs = conn.execute('SELECT "commit", base FROM jobs ORDER BY id').fetchall()
    assert jobs == [(c[1], None), (p1, c[1]), (p2, c[1])]
    code = main(["enqueue", str(work.path), p2, "--base", "main", "--db", str(db_path)])  # the same words
    out = capsys.readouterr().out
    assert code == 0 and f"solci: {c[1][:12]} (the merge-base of {p2[:12]} with main, main's line) already" in out
    assert f"solci: {p2[:12]} (feature, judged against its merge-base {c[1][:12]}) already queued" in out, out
    fake = FakeExecutor(dict.fromkeys(c, "pass") | {p1: "pass", p2: "slow:B4_S128"}, cases=CASES)
    done = JobRunner(db, JobRunnerConfig(worker="w"), executor=fake).run(once=True)
    assert [(r.commit, r.outcome) for r in done] == [(c[1], "passed"), (p1, "passed"), (p2, "regressed")]
    prs = queries.pull_request_runs(db)
    assert list(prs["commit"]) == [p2, p1] and set(prs["base"]) == {c[1]}
    assert queries.changes(db).empty and list(queries.changes(db, pull_requests=True)["commit"]) == [p2]
    code = main([*args[:5], "nope", *args[6:], "--db", str(tmp_path / "other.duckdb")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "nope" in err, err
    assert not (tmp_path / "other.duckdb").exists()
