"""Storage benchmark of the file backend: a history of 10,000 runs x 16 cases with raw samples (50 per impl, 3 impls).

Builds the history file in a temporary directory (bulk SQL), then times what the CI does every run: appending
one run through ``ingest_result`` (target < 100 ms), ``history()`` with a typical filter and without (target
< 1 s), and judging the newest run (``ci.verdict.apply.judge_run``: reads its series, stores its verdict). Each
figure is the median of several repetitions (max shown too). ``scripts/bench_lake.py`` measures the lake
backend (it needs PostgreSQL); this one needs nothing but the file.

    python scripts/bench_storage.py [--runs 10000] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ci.verdict.apply import judge_run  # noqa: E402
from problem.workload import CASES  # noqa: E402
from storage import queries  # noqa: E402
from storage.db import Database, open_database  # noqa: E402
from storage.ingest import ingest_result  # noqa: E402
from tests.support.factories import make_result  # noqa: E402


def build(db: Database, n_runs: int, n_samples: int = 50) -> float:
    """Fill ``db`` with n_runs runs of the 16 cases (bulk SQL); return seconds taken."""
    t0 = time.perf_counter()
    seed_doc = make_result(run_id="seed", commit="seed", started_at="2025-01-01T00:00:00+00:00")
    ingest_result(db, seed_doc)  # hardware, protocol rows and the schema
    fingerprint = seed_doc["hardware"]["fingerprint"]
    cases_sql = ", ".join(
        f"('{c['case']}', {c['batch_size']}, {c['seq_len']}, {c['m']}, {c['median_us']}, {c['t_sol_us']})"
        for c in seed_doc["cases"]
    )
    with db.transaction() as conn:
        conn.execute(
            f"CREATE TEMP TABLE bench_cases(name VARCHAR, b INT, s INT, m INT, med DOUBLE, tsol DOUBLE);"
            f"INSERT INTO bench_cases VALUES {cases_sql}"
        )
        conn.execute(
            """INSERT INTO runs (run_id, seq, "commit", branch, repo, started_at, finished_at, wall_s, mode,
                   hardware_fingerprint, hardware_label, gpu_model, hostname, protocol, status, n_cases, n_pass,
                   geomean_us, geomean_eager_us, geomean_cublas_us, score, ratio_vs_cublas, ratio_vs_eager,
                   job_id, ingested_at)
               SELECT printf('bench%06d', i), nextval('runs_seq'), printf('%040x', i), 'main', 'bench',
                      TIMESTAMP '2025-06-01' + i * INTERVAL 10 MINUTE,
                      TIMESTAMP '2025-06-01' + i * INTERVAL 10 MINUTE + INTERVAL 1 MINUTE, 60.0, 'gpu', ?,
                      'NVIDIA H200', 'H200', 'bench', 'p1', 'pass', 16, 16, 63.0 * (1 + 0.02 * random()),
                      79.0, 57.0, 0.62, 1.1, 0.8, NULL, now()::TIMESTAMP
               FROM range(?) t(i)""",
            [fingerprint, n_runs],
        )
        conn.execute(
            """INSERT INTO results
               SELECT r.run_id, c.name, c.b, c.s, c.m, 'pass', NULL, c.med * (1 + 0.02 * random()), c.med * 1.25,
                      c.med * 0.9, c.tsol, 0.62, '{"block_m": 128}', NULL, NULL, 0.5
               FROM runs r CROSS JOIN bench_cases c WHERE r.run_id LIKE 'bench%'"""
        )
        conn.execute(
            """INSERT INTO samples
               SELECT x.run_id, x.case_name, i.impl, 'p1', ?, x.median_us, x.median_us, x.median_us * 0.98,
                      x.median_us * 1.03, x.median_us * 0.01, x.median_us * 0.01,
                      list_transform(range(?), lambda k: x.median_us * i.f * (0.99 + 0.02 * random()))
               FROM results x CROSS JOIN (VALUES ('kernel', 1.0), ('eager', 1.25), ('cublas', 0.9)) i(impl, f)
               WHERE x.run_id LIKE 'bench%'""",
            [n_samples, n_samples],
        )
    with db.write() as conn:
        conn.execute("CHECKPOINT")
    return time.perf_counter() - t0


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    out = None
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), max(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path, default=None, help="build the database in this directory and keep it")
    args = ap.parse_args(argv)

    tmp = None
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        path = args.keep / "bench.duckdb"
    else:
        tmp = tempfile.TemporaryDirectory(prefix="solci-bench-")
        path = Path(tmp.name) / "bench.duckdb"
    db = open_database(path)
    build_s = build(db, args.runs)
    size_mb = path.stat().st_size / 1e6
    with db.read() as conn:
        n_runs, n_results, n_sample_rows, n_values = conn.execute(
            """SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM results),
                      (SELECT count(*) FROM samples), (SELECT sum(len(samples_us)) FROM samples)"""
        ).fetchone()
    print(f"database: {path} ({size_mb:.0f} MB), built in {build_s:.1f} s")
    print(f"  {n_runs} runs, {n_results} case results, {n_sample_rows} sample rows, {n_values} samples")

    counter = iter(range(10**6))

    def append() -> bool:
        i = next(counter)
        doc = make_result(run_id=f"new{i}", commit=f"new{i}", started_at=f"2026-12-01T00:{i:02d}:00+00:00")
        t = time.perf_counter()
        ok = ingest_result(db, doc)
        append.last = time.perf_counter() - t  # type: ignore[attr-defined]
        return ok

    ingest_times = []
    for _ in range(args.repeat):
        append()
        ingest_times.append(append.last)  # type: ignore[attr-defined]
    dup = make_result(run_id="new0", commit="new0")
    rows = [
        (
            "ingest_result (append 1 run, 16 cases, 2400 samples)",
            statistics.median(ingest_times),
            max(ingest_times),
            0.100,
            "1 run",
        )
    ]
    med, mx, _ = timed(lambda: ingest_result(db, dup), args.repeat)
    rows.append(("ingest_result (same run_id again: no-op)", med, mx, 0.100, "0 rows"))
    cases = CASES[4].name
    for label, fn in [
        ("history() (all runs x cases)", lambda: queries.history(db)),
        (
            f"history(case={cases}, hardware, protocol)",
            lambda: queries.history(db, case=cases, hardware="NVIDIA H200", protocol="p1"),
        ),
        ("history(hardware=H200, limit=200)", lambda: queries.history(db, hardware="H200", limit=200)),
        ("runs() (one row per run)", lambda: queries.runs(db)),
    ]:
        med, mx, df = timed(fn, args.repeat)
        rows.append((label, med, mx, 1.0, f"{len(df)} rows"))
    newest = f"new{args.repeat - 1}"
    med, mx, judged = timed(lambda: judge_run(db, newest), args.repeat)
    rows.append(("judge_run (the newest run against its series)", med, mx, None, f"verdict {judged.verdict}"))

    print()
    print(f"{'operation':<58} {'median':>10} {'max':>10} {'target':>8}  result")
    ok = True
    for label, med, mx, target, note in rows:
        verdict = ""
        if target is not None:
            verdict = "ok" if med < target else "SLOW"
            ok &= med < target
        tgt = f"<{target * 1000:.0f} ms" if target is not None else "-"
        print(f"{label:<58} {med * 1000:>7.1f} ms {mx * 1000:>7.1f} ms {tgt:>8}  {note} {verdict}")
    if tmp is not None:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
