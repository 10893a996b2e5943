"""Lake benchmark: the figures of issue 12, on this machine, against a real PostgreSQL started here.

1. a history of ``--runs`` runs (``scripts/bench_dashboard.build_history``: the dashboard benchmark's synthetic
   history, judged where the runner judges) is written to a file, then moved into a lake with ``solci migrate``
   (timed, verified);
2. **append of one run** to the lake at that size: ``storage.ingest.ingest_result`` of a 16-case result (the
   runner's ingest: one transaction under the fleet's write lock), median of ``--appends``; the file's figure
   beside it;
3. **``solci history``** on the lake (a fresh process, as a user types it) and ``storage.queries.history`` in
   process;
4. **the dashboard's first render** on the lake: ``solci dashboard`` served, headless Chromium through
   Playwright (``bench_dashboard.measure``); without a browser, the ``storage.queries`` calls of the first
   render instead (said so);
5. **throughput with ``--writers`` concurrent writers**: as many processes each ingest ``--per-writer`` 16-case
   runs at once; runs per second and each append's latency;
6. ``solci compact`` afterwards (files before and after).

    python scripts/bench_lake.py [--runs 10000] [--writers 8] [--per-writer 10] [--appends 10]

Needs PostgreSQL (scripts/setup_postgres.sh); the cluster lives in a temporary folder and is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "scripts"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

WRITER = textwrap.dedent("""
    import json, sys, time
    from tests.support.factories import make_result
    from storage.db import open_database
    from storage.ingest import ingest_result
    db = open_database(sys.argv[1], data_path=sys.argv[2], lock_timeout=600)
    k, n = sys.argv[3], int(sys.argv[4])
    docs = [make_result(run_id=f"bench-w{k}-{i}", commit=f"{int(k):02d}{i:038d}", n_samples=50) for i in range(n)]
    with db.read() as conn:  # connect before the start line
        conn.execute("SELECT 1").fetchall()
    print("ready", flush=True)
    sys.stdin.readline()
    lat = []
    for doc in docs:
        t = time.perf_counter()
        assert ingest_result(db, doc)
        lat.append(time.perf_counter() - t)
    print(json.dumps(lat), flush=True)
""")


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _env(spec: str, data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(SOLCI_DB=spec, SOLCI_DATA_PATH=str(data), PYTHONPATH=str(ROOT))
    return env


def bench_append(db, n: int, prefix: str) -> list[float]:
    from storage.ingest import ingest_result
    from tests.support.factories import make_result

    out = []
    for i in range(n):
        doc = make_result(run_id=f"{prefix}-{i}", commit=f"{i:040x}", n_samples=50)
        t = time.perf_counter()
        assert ingest_result(db, doc)
        out.append(time.perf_counter() - t)
    return out


def bench_writers(spec: str, data: Path, writers: int, per_writer: int) -> tuple[float, list[float]]:
    import json

    env = _env(spec, data)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, spec, str(data), str(k), str(per_writer)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(writers)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    t = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    lat: list[float] = []
    for p in procs:
        lat += json.loads(p.stdout.readline())
        p.wait(timeout=600)
    return time.perf_counter() - t, lat


def first_render_queries(db) -> float:
    """What the dashboard reads for its first page, without a browser (dashboard.data on storage.queries)."""
    from dashboard import data

    t = time.perf_counter()
    summ = data.summary(db)
    sel = data.default_selection(summ)
    if sel is not None:
        win = data.window(db, sel)
        data.changes(db, sel)
        ids = list(win["run_id"]) if "run_id" in win else []
        data.chart_cases(db, ids)
        data.chart_marks(db, ids)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--per-writer", type=int, default=10)
    ap.add_argument("--appends", type=int, default=10)
    ap.add_argument("--no-browser", action="store_true", help="time the first render's queries, not a browser")
    args = ap.parse_args(argv)

    from bench_dashboard import build_history, find_chromium, free_port, measure, serve, stop

    from storage.db import open_database
    from storage.lake import compact
    from storage.lake_migrate import migrate
    from tests.support.postgres import PgCluster, find_pg_bin

    bin_dir = find_pg_bin()
    if bin_dir is None:
        print("bench_lake: PostgreSQL is not installed (scripts/setup_postgres.sh)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="solci-bench-lake-"))
    pg = PgCluster(bin_dir)
    pg.start()
    rows: list[tuple[str, str]] = []
    try:
        name = pg.create_database("bench")
        spec, data = f"ducklake:postgres:{pg.conninfo(name)}", tmp / "lake-data"
        os.environ["SOLCI_DATA_PATH"] = str(data)
        file_path = tmp / "history.duckdb"
        t = time.perf_counter()
        info = build_history(file_path, args.runs, echo=lambda m: print(m, file=sys.stderr))
        print(
            f"history file: {info['runs']} runs, {info['samples']} sample rows, {info['size_mb']:.0f} MB "
            f"in {time.perf_counter() - t:.0f} s",
            file=sys.stderr,
        )
        src = open_database(file_path, lock_timeout=60)
        lake = open_database(spec, data_path=data, lock_timeout=600)
        t = time.perf_counter()
        report = migrate(src, lake)
        rows.append(
            (
                f"solci migrate of {args.runs:,} runs into the lake (verified: {report.ok})",
                f"{time.perf_counter() - t:.1f} s",
            )
        )

        lat = bench_append(lake, args.appends, "bench-append")
        rows.append(
            (
                f"append of one 16-case run to the lake at {args.runs:,} runs (median of {args.appends})",
                f"{_median(lat) * 1000:.0f} ms (max {max(lat) * 1000:.0f} ms)",
            )
        )
        flat = bench_append(src, args.appends, "bench-append-file")
        rows.append(("  the same into the history file", f"{_median(flat) * 1000:.0f} ms"))

        env = _env(spec, data)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "ci.cli", "history"], env=env, capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            assert res.returncode == 0, res.stderr
        rows.append(
            (f"solci history on the lake ({args.runs:,} runs; a new process, median of 3)", f"{_median(times):.2f} s")
        )
        from storage import queries

        reader = open_database(spec, create=False)
        queries.history(reader, limit=20)
        t = time.perf_counter()
        for _ in range(5):
            queries.history(reader, limit=20)
        rows.append(
            ("  storage.queries.history(limit=20) in process", f"{(time.perf_counter() - t) / 5 * 1000:.0f} ms")
        )

        chromium = None if args.no_browser else find_chromium()
        try:
            import playwright  # noqa: F401
        except ImportError:
            chromium = None
        if chromium:
            port = free_port()
            proc = serve(spec, port, tmp / "dashboard.log")
            try:
                res = measure(f"http://127.0.0.1:{port}/", chromium, rounds=1)
            finally:
                stop(proc)
            for kind, ts in res["first"].items():
                rows.append((f"dashboard first render on the lake: {kind}", f"{_median(ts):.2f} s"))
        else:
            cold = open_database(spec, create=False)
            rows.append(
                (
                    "dashboard first render's queries on the lake (no browser here: storage.queries only)",
                    f"{first_render_queries(cold):.2f} s",
                )
            )

        wall, lat = bench_writers(spec, data, args.writers, args.per_writer)
        n = args.writers * args.per_writer
        rows.append(
            (f"{args.writers} concurrent writers, {n} runs of 16 cases in all", f"{n / wall:.1f} runs/s ({wall:.1f} s)")
        )
        rows.append(
            (
                f"  one append while {args.writers} write (median, max)",
                f"{_median(lat) * 1000:.0f} ms, {max(lat) * 1000:.0f} ms",
            )
        )
        with lake.read() as conn:
            before = conn.execute("SELECT count(*) FROM ducklake_list_files('lake', 'samples')").fetchone()[0]
        t = time.perf_counter()
        result = compact(lake)
        with lake.read() as conn:
            after = conn.execute("SELECT count(*) FROM ducklake_list_files('lake', 'samples')").fetchone()[0]
        rows.append(
            (f"solci compact ({result})", f"{time.perf_counter() - t:.1f} s; samples files {before} -> {after}")
        )
    finally:
        pg.destroy()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print()
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
