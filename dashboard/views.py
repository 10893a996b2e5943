"""The dashboard's page, section by section (streamlit). Reads go through cached loaders keyed by the database
file's state (``data.db_token``): a new run or job shows on the next rerun, nothing is read twice otherwise."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import charts, data
from dashboard.data import Selection
from kernel.workload import geomean
from storage import queries

ALL_BRANCHES = "(all)"
TABS = ("History", "Flags", "SOL and records", "Runs and jobs")

# ------------------------------------------------------------------------------------------------ loaders
# Every loader takes (path, token, ...): the token changes when the file does, which invalidates the cache.


@st.cache_data(show_spinner=False, max_entries=64)
def _runs(path: str, token: tuple) -> pd.DataFrame:
    return data.all_runs(data.open_db(path))


@st.cache_data(show_spinner=False, max_entries=64)
def _jobs(path: str, token: tuple) -> pd.DataFrame:
    return data.jobs_frame(data.open_db(path))


@st.cache_data(show_spinner=False, max_entries=64)
def _protocol_names(path: str, token: tuple) -> dict[str, str]:
    return queries.protocol_names(data.open_db(path))


@st.cache_data(show_spinner=False, max_entries=64)
def _selection(path: str, token: tuple, sel: Selection) -> dict[str, pd.DataFrame]:
    db = data.open_db(path)
    runs = data.selected_runs(db, sel)
    run_ids = list(runs["run_id"])
    hist = data.case_history(db, sel, run_ids)
    cases = hist.drop_duplicates("case").sort_values(["m", "case"])["case"].tolist() if not hist.empty else []
    steps = data.steps(db, sel, cases)
    steps = steps[steps["run_id"].isin(run_ids)]
    return {"runs": runs, "hist": hist, "flags": data.selected_flags(db, runs), "steps": steps}


@st.cache_data(show_spinner=False, max_entries=64)
def _sol(path: str, token: tuple, run_id: str) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    db = data.open_db(path)
    return data.sol_table(db, run_id), data.suite_gap(db, run_id), data.published_records(db)


@st.cache_data(show_spinner=False, max_entries=64)
def _run_detail(path: str, token: tuple, run_id: str) -> tuple[dict | None, pd.DataFrame, pd.DataFrame]:
    return data.run_detail(data.open_db(path), run_id)


# ------------------------------------------------------------------------------------------------ page
def render(path: Path) -> None:
    """The whole page for the history file at ``path``. StorageError propagates (the app shows it)."""
    key = str(path)
    token = data.db_token(path)
    runs = _runs(key, token)
    token = data.db_token(path)  # reading a missing file creates it
    jobs = _jobs(key, token)
    st.title("solci: attention output projection backward")
    st.sidebar.caption(f"history: `{path}`")
    if st.sidebar.button("Refresh"):
        st.rerun()
    if runs.empty:
        st.info(f"{data.EMPTY_MESSAGE}\n\nHistory file: `{path}`")
        _jobs_section(jobs)
        return
    names = _protocol_names(key, token)
    sel = _sidebar(runs, names)
    proto = data.protocol_label(sel.protocol, names)
    st.caption(f"**{sel.hardware}** · protocol {proto} · {key}")
    if data.is_cpu(sel.hardware):
        st.warning(
            f"**{sel.hardware}**: these timings come from Triton's interpreter on the CPU. They check that the "
            "pipeline works; they say nothing about GPU speed, and no SOL model or score applies."
        )
    d = _selection(key, token, sel)
    runs_sel = d["runs"]
    if runs_sel.empty:
        st.info(f"No runs of {sel.hardware} with protocol {proto} on this branch.")
        return
    labels = charts.run_labels(runs_sel)
    _headline(runs_sel, d["flags"], labels)
    history, flags, sol, runs_tab = st.tabs(TABS, key="view", bind="query-params")  # only the open one runs
    if history.open:
        with history:
            _history_section(d, sel, proto)
    if flags.open:
        with flags:
            _flags_section(d["flags"], d["steps"], sel)
    if sol.open:
        with sol:
            _sol_section(key, token, runs_sel.iloc[-1], labels, sel)
    if runs_tab.open:
        with runs_tab:
            _runs_section(runs_sel, labels, sel)
            _jobs_section(jobs)
            _run_detail_section(key, token, runs_sel, labels, d["flags"], jobs, sel)


def _sidebar(runs: pd.DataFrame, names: dict[str, str]) -> Selection:
    """Hardware, protocol, branch and how many runs; hardware/protocol/branch are kept in the URL."""
    sb = st.sidebar
    sb.header("Selection")
    hardware = sb.selectbox(
        "Hardware", data.hardware_options(runs), key="hardware", bind="query-params",
        help="One hardware label at a time: series never mix GPUs (or the CPU interpreter).",
    )  # fmt: skip
    protocol = sb.selectbox(
        "Protocol", data.protocol_options(runs, hardware), format_func=lambda h: data.protocol_label(h, names),
        key="protocol", bind="query-params",
        help="How the timings were taken; figures of different protocols are never compared.",
    )  # fmt: skip
    sub = runs[(runs["hardware"] == hardware) & (runs["protocol"] == protocol)]
    branches = sorted({b for b in sub["branch"].dropna().unique()})
    branch = sb.selectbox("Branch", [ALL_BRANCHES, *branches], key="branch", bind="query-params")
    limit = sb.number_input("Most recent runs", min_value=2, max_value=5000, value=200, step=50, key="limit")
    return Selection(hardware, protocol, None if branch == ALL_BRANCHES else branch, int(limit))


_US_COLUMNS = {
    c: st.column_config.NumberColumn(c, format="%.2f")
    for c in ("median_us", "t_sol_us", "eager_us", "cublas_us", "best_us")
}


def _rows(n: int, most: int = 24) -> int:
    """A table height showing ``n`` rows (up to ``most``) without scrolling."""
    return 35 * (min(n, most) + 1) + 3


def _pct(v: object) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v) * 100:.1f}%"  # type: ignore[arg-type]


def _headline(runs: pd.DataFrame, flags: pd.DataFrame, labels: dict[str, str]) -> None:
    last = runs.iloc[-1]
    prev = runs.iloc[:-1]
    prev = prev[prev["status"] == "pass"]
    prev_row = prev.iloc[-1] if not prev.empty else None
    st.markdown(
        f"Latest run: commit `{str(last['commit'])[:12]}` ({last['branch'] or 'no branch'}), "
        f"{last['started_at']:%Y-%m-%d %H:%M} UTC, on **{last['hardware']}**"
    )
    cols = st.columns(5)
    cols[0].metric("Status", f"{last['status']}", f"{last['n_pass']}/{last['n_cases']} cases pass",
                   delta_color="off", delta_arrow="off")  # fmt: skip
    g, pg = last["geomean_us"], (prev_row["geomean_us"] if prev_row is not None else None)
    delta = f"{g / pg - 1:+.1%} vs previous" if pd.notna(g) and pg is not None and pd.notna(pg) else None
    cols[1].metric(f"Suite geomean ({charts.US})", "-" if pd.isna(g) else f"{g:.2f}", delta, delta_color="inverse",
                   help=f"geometric mean of the per-case medians on {last['hardware']}")  # fmt: skip
    s, ps = last["score"], (prev_row["score"] if prev_row is not None else None)
    sdelta = f"{(s - ps) * 100:+.1f} pts" if pd.notna(s) and ps is not None and pd.notna(ps) else None
    cols[2].metric("SOL score", _pct(s), sdelta, help="mean SOL score over the cases (the leaderboard's % of SOL)")
    r = last["ratio_vs_cublas"]
    cols[3].metric("vs cuBLAS", "-" if pd.isna(r) else f"{r:.2f}×", help="kernel geomean / cuBLAS (2 GEMMs) geomean")
    mine = flags[flags["run_id"] == last["run_id"]] if not flags.empty else flags
    bad = int(mine["kind"].isin(["regression", "incorrect", "error"]).sum()) if not mine.empty else 0
    cols[4].metric("Flags on latest run", len(mine), f"{bad} bad" if bad else None, delta_color="inverse")


def _history_section(d: dict[str, pd.DataFrame], sel: Selection, proto: str) -> None:
    runs, hist, flags, steps = d["runs"], d["hist"], d["flags"], d["steps"]
    t_sol = None
    if not hist.empty:  # the geomean T_SOL of the latest run's cases (None without a SOL model)
        t_sol = geomean(list(hist[hist["run_id"] == runs.iloc[-1]["run_id"]]["t_sol_us"].dropna()))
    st.plotly_chart(charts.suite_history_figure(runs, hardware=sel.hardware, protocol=proto, flags=flags,
                                                steps=steps, t_sol_us=t_sol), key="suite")  # fmt: skip
    if hist.empty:
        return
    cases = hist.drop_duplicates("case").sort_values(["m", "case"])["case"].tolist()
    case = st.selectbox("Case", cases, index=len(cases) - 1, key=f"case-{sel.hardware}")
    st.plotly_chart(charts.case_history_figure(hist, case=case, hardware=sel.hardware, protocol=proto,
                                               flags=flags, steps=steps), key="case")  # fmt: skip
    with st.expander("All cases", expanded=True):
        st.plotly_chart(charts.case_grid_figure(hist, hardware=sel.hardware, protocol=proto, flags=flags),
                        key="grid")  # fmt: skip


def _flags_section(flags: pd.DataFrame, steps: pd.DataFrame, sel: Selection) -> None:
    st.subheader(f"Flags — {sel.hardware}")
    st.caption(
        "Judged: each run's raw samples against the pooled samples of the previous passing runs "
        "(Mann–Whitney U and a minimum effect). Change points: steps in each series (PELT). Newest first."
    )
    table = data.flag_table(flags, steps)
    if table.empty:
        st.success("No regressions, improvements, records or failures flagged in the selected runs.")
        return
    kinds = sorted(table["kind"].unique())
    chosen = st.multiselect("Kinds", kinds, default=kinds, key="flag-kinds")
    table = table[table["kind"].isin(chosen)].assign(commit=lambda t: t["commit"].astype(str).str[:10])
    st.dataframe(
        table, hide_index=True, key="flags-table",
        column_config={
            "started_at": st.column_config.DatetimeColumn("run time (UTC)", format="YYYY-MM-DD HH:mm"),
            "change": st.column_config.NumberColumn("change", format="percent"),
            "p_value": st.column_config.NumberColumn("p", format="%.2g"),
            "message": st.column_config.TextColumn("message", width="large"),
        },
    )  # fmt: skip


def _sol_section(key: str, token: tuple, last: pd.Series, labels: dict[str, str], sel: Selection) -> None:
    run_label = f"run {labels[last['run_id']]} (latest)"
    table, suite, published = _sol(key, token, last["run_id"])
    st.subheader(f"Distance to SOL — {sel.hardware}, {run_label}")
    has_score = not table.empty and table["score"].notna().any()
    if not has_score:
        st.info(f"No SOL model for **{sel.hardware}** (no peak rates known for it), so no T_SOL and no score; "
                "the project's best on this hardware is still shown below.")  # fmt: skip
    else:
        c1, c2 = st.columns(2)
        c1.plotly_chart(charts.sol_scores_figure(table.assign(hardware=sel.hardware), hardware=sel.hardware,
                                                 run_label=run_label), key="sol-scores")  # fmt: skip
        c2.plotly_chart(charts.sol_latency_figure(table, hardware=sel.hardware, run_label=run_label),
                        key="sol-latency")  # fmt: skip
    st.markdown(f"**Per case** ({charts.US}, {sel.hardware}); *best* = the project's best passing figure on this "
                "hardware and protocol, *gap* = median / best − 1")  # fmt: skip
    st.dataframe(
        table.assign(best_commit=table["best_commit"].astype(str).str[:10]), hide_index=True, key="sol-table",
        height=_rows(len(table)),
        column_config={
            "score": st.column_config.NumberColumn("SOL score", format="percent"),
            "gap": st.column_config.NumberColumn("gap to best", format="percent"),
            "x_sol": st.column_config.NumberColumn("median / T_SOL", format="%.2f×"),
            **_US_COLUMNS,
        },
    )  # fmt: skip
    st.subheader("Best-known records")
    cols = st.columns(3)
    best = suite.get("best_us")
    cols[0].metric(f"Project best suite geomean ({charts.US}, {sel.hardware})",
                   "-" if best is None or pd.isna(best) else f"{best:.2f}",
                   help=f"commit {suite.get('best_commit') or '-'}, same hardware and protocol")  # fmt: skip
    gap = suite.get("gap")
    cols[1].metric("This run vs project best", "-" if gap is None or pd.isna(gap) else f"{gap:+.1%}",
                   delta_color="off")  # fmt: skip
    sg = suite.get("score_gap")
    if has_score and sg is not None and pd.notna(sg):
        behind = f"{abs(sg) * 100:.1f} pts {'behind' if sg > 0 else 'ahead of'}"
        cols[2].metric(f"SOL score vs B200 #1 ({suite.get('record_implementation')})", behind,
                       help="the record's % of SOL minus this run's; the only comparison made across GPUs")  # fmt: skip
    if has_score:
        st.plotly_chart(charts.records_figure(published, hardware=sel.hardware, project_score=last["score"],
                                              run_label=labels[last["run_id"]]), key="records")  # fmt: skip
        st.caption(
            f"This run's score uses its own eager PyTorch time as T_b and the datasheet peaks of {sel.hardware} "
            "for T_SOL; the leaderboard's uses the benchmark's baseline on B200. Latencies are not compared."
        )
    else:
        st.caption("The B200 leaderboard is compared through the SOL score only, which this hardware lacks.")


def _runs_section(runs: pd.DataFrame, labels: dict[str, str], sel: Selection) -> None:
    st.subheader(f"Runs — {sel.hardware}")
    view = runs.iloc[::-1].assign(commit=lambda t: t["run_id"].map(labels))
    cols = ["commit", "branch", "started_at", "status", "n_pass", "n_cases", "geomean_us", "score",
            "ratio_vs_cublas", "ratio_vs_eager", "wall_s", "job_id", "run_id"]  # fmt: skip
    st.dataframe(
        view[cols], hide_index=True, key="runs-table",
        column_config={
            "started_at": st.column_config.DatetimeColumn("time (UTC)", format="YYYY-MM-DD HH:mm"),
            "geomean_us": st.column_config.NumberColumn(f"suite geomean ({charts.US})", format="%.2f"),
            "score": st.column_config.NumberColumn("SOL score", format="percent"),
            "ratio_vs_cublas": st.column_config.NumberColumn("vs cuBLAS", format="%.2f×"),
            "ratio_vs_eager": st.column_config.NumberColumn("vs eager", format="%.2f×"),
            "wall_s": st.column_config.NumberColumn("wall (s)", format="%.0f"),
        },
    )  # fmt: skip


def _jobs_section(jobs: pd.DataFrame) -> None:
    st.subheader("Job queue")
    if jobs.empty:
        st.caption("No jobs: `solci run`, `solci watch`, git hooks and `solci up` queue them.")
        return
    counts = jobs["status"].value_counts()
    cols = st.columns(4)
    for col, status in zip(cols, ("queued", "running", "done", "failed"), strict=True):
        col.metric(status, int(counts.get(status, 0)))
    view = jobs.drop(columns=["log"]).assign(
        commit=lambda t: t["commit"].str[:10], run_id=lambda t: t["run_id"].str[:8]
    )
    st.dataframe(view, hide_index=True, key="jobs-table",
                 column_config={c: st.column_config.DatetimeColumn(c, format="YYYY-MM-DD HH:mm:ss")
                                for c in ("enqueued_at", "started_at", "finished_at")})  # fmt: skip


def _run_detail_section(
    key: str, token: tuple, runs: pd.DataFrame, labels: dict[str, str], flags: pd.DataFrame, jobs: pd.DataFrame,
    sel: Selection,
) -> None:  # fmt: skip
    st.subheader(f"One run — {sel.hardware}")
    ids = list(runs["run_id"].iloc[::-1])
    run_id = st.selectbox("Run", ids, format_func=lambda r: f"{labels[r]} · {r[:8]}", key="run")
    info, cases, samples = _run_detail(key, token, run_id)
    if info is None:
        st.warning(f"run {run_id} is no longer stored")
        return
    st.caption(f"commit `{info['commit']}` ({info['branch'] or '-'}), started {info['started_at']:%Y-%m-%d %H:%M} "
               f"UTC, {info['mode']}, host {info['hostname']}, status **{info['status']}**")  # fmt: skip
    shown = ["case", "status", "median_us", "eager_us", "cublas_us", "t_sol_us", "score", "error", "config"]
    st.dataframe(
        cases[[c for c in shown if c in cases.columns]],
        hide_index=True,
        key="run-cases",
        height=_rows(len(cases)),
        column_config={"score": st.column_config.NumberColumn("SOL score", format="percent"), **_US_COLUMNS},
    )
    relative = st.toggle("Samples relative to each case's median", value=True, key="samples-relative")
    fig = charts.samples_figure(samples, hardware=sel.hardware, run_label=f"run {labels[run_id]}", relative=relative)
    st.plotly_chart(fig, key="samples")
    mine = flags[flags["run_id"] == run_id] if not flags.empty else flags
    if not mine.empty:
        st.markdown("**Flags of this run**")
        st.dataframe(mine[["case", "kind", "magnitude", "p_value", "message"]], hide_index=True, key="run-flags")
    job = jobs[jobs["run_id"] == run_id] if not jobs.empty else jobs
    if not job.empty:
        with st.expander(f"Log of job {int(job.iloc[0]['id'])}"):
            st.code(job.iloc[0]["log"] or "(no log)", language=None)
