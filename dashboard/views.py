"""The dashboard's page, section by section (streamlit).

Reads go through cached loaders keyed by the database file's state (``data.db_token``): a new run or job shows
on the next rerun, nothing is read twice otherwise. Only the open tab runs (``st.tabs(bind="query-params")``)
and every read is bounded by the sidebar's window, so the page costs the same at 10 runs and at 10,000.

Stored strings (commit, branch, host, messages, errors) are data: they go into dataframes and ``st.text``, or
through ``fmt.md`` into Markdown, never into Markdown or HTML as they are. (Errors and logs use ``st.text``, not
``st.code``, which makes the browser load a 1.5 MB syntax highlighter.)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import charts, data, fmt, preload
from dashboard.data import Selection

ALL_BRANCHES = "(all)"
TABS = ("Overview", "Changes", "History", "SOL and records", "Runs and jobs")
PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}
PLOTLY = {"config": PLOTLY_CONFIG, "theme": None}  # the charts' own template (dashboard.charts.TEMPLATE): less to merge
WINDOW_CHOICES = (50, 100, 200, 500, 1000, 2000, 5000)

# ------------------------------------------------------------------------------------------------ loaders
# Every loader takes (path, token, ...): the token changes when the file does, which invalidates the cache.


@st.cache_data(show_spinner=False, max_entries=16)
def _summary(path: str, token: tuple) -> pd.DataFrame:
    return data.summary(data.open_db(path))


@st.cache_data(show_spinner=False, max_entries=32)
def _window(path: str, token: tuple, sel: Selection) -> pd.DataFrame:
    return data.window(data.open_db(path), sel)


@st.cache_data(show_spinner=False, max_entries=32)
def _window_cases(path: str, token: tuple, run_ids: tuple[str, ...]) -> pd.DataFrame:
    return data.chart_cases(data.open_db(path), list(run_ids))


@st.cache_data(show_spinner=False, max_entries=32)
def _series(path: str, token: tuple, sel: Selection) -> pd.DataFrame:
    """The window with each run's set of cases (data.with_case_sets): suite figures compare runs of one set."""
    win = _window(path, token, sel)
    return data.with_case_sets(win, _window_cases(path, token, tuple(win["run_id"])))


@st.cache_data(show_spinner=False, max_entries=32)
def _changes(path: str, token: tuple, sel: Selection) -> pd.DataFrame:
    return data.changes(data.open_db(path), sel)


@st.cache_data(show_spinner=False, max_entries=64)
def _pull_requests(path: str, token: tuple, hardware: str) -> pd.DataFrame:
    return data.pull_requests(data.open_db(path), hardware)


@st.cache_data(show_spinner=False, max_entries=16)
def _pull_request_report(path: str, token: tuple, commit: str, base: str) -> dict | None:
    return data.pull_request_report(data.open_db(path), commit, base)


@st.cache_data(show_spinner=False, max_entries=64)
def _step_cases(path: str, token: tuple, step_id: str) -> pd.DataFrame:
    return data.step_cases(data.open_db(path), step_id)


@st.cache_data(show_spinner=False, max_entries=16)
def _charts(path: str, token: tuple, sel: Selection, run_ids: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    db = data.open_db(path)
    changes = data.changes(db, sel)
    return {
        "hist": _window_cases(path, token, run_ids),
        "marks": data.chart_marks(db, list(run_ids)),
        "steps": data.chart_steps(changes, db, sel, list(run_ids)),
    }


# Figures are built once per database state and selection and shared (never mutated after they are built).
@st.cache_resource(show_spinner=False, max_entries=16)
def _history_figures(path: str, token: tuple, sel: Selection, proto: str) -> dict:
    win = _series(path, token, sel)
    d = _charts(path, token, sel, tuple(win["run_id"]))
    hist, marks, steps = d["hist"], d["marks"], d["steps"]
    suite = charts.suite_history_figure(
        win,
        hardware=sel.hardware,
        protocol=proto,
        flags=marks,
        steps=steps,
        t_sol_us=data.suite_t_sol(win, hist),
        main_set=data.main_case_set(win),
    )
    grid = charts.case_grid_figure(hist, hardware=sel.hardware, protocol=proto, flags=marks, steps=steps)
    cases = hist.drop_duplicates("case").sort_values(["m", "case"])["case"].tolist() if not hist.empty else []
    return {"suite": suite, "grid": grid, "cases": cases, "n": len(win)}


@st.cache_resource(show_spinner=False, max_entries=32)
def _case_figure(path: str, token: tuple, sel: Selection, proto: str, case: str):
    win = _window(path, token, sel)
    d = _charts(path, token, sel, tuple(win["run_id"]))
    return charts.case_history_figure(
        d["hist"], case=case, hardware=sel.hardware, protocol=proto, flags=d["marks"], steps=d["steps"]
    )


@st.cache_data(show_spinner=False, max_entries=64)
def _findings(path: str, token: tuple, run_id: str) -> pd.DataFrame:
    return data.run_findings(data.open_db(path), run_id)


@st.cache_data(show_spinner=False, max_entries=32)
def _sol(
    path: str, token: tuple, sel: Selection, run_id: str, quarantined: bool
) -> tuple[pd.DataFrame, dict, pd.DataFrame, dict | None]:
    return data.sol_view(data.open_db(path), sel, run_id, quarantined=quarantined)


@st.cache_data(show_spinner=False, max_entries=32)
def _run_detail(path: str, token: tuple, run_id: str) -> tuple[dict | None, pd.DataFrame, pd.DataFrame]:
    return data.run_detail(data.open_db(path), run_id)


@st.cache_data(show_spinner=False, max_entries=16)
def _jobs(path: str, token: tuple) -> tuple[pd.DataFrame, dict[str, int]]:
    return data.jobs(data.open_db(path))


@st.cache_data(show_spinner=False, max_entries=16)
def _job_log(path: str, token: tuple, job_id: int) -> str | None:
    return data.job_log(data.open_db(path), job_id)


# ------------------------------------------------------------------------------------------------ page
def render(path: Path) -> None:
    """The whole page for the history file at ``path``. StorageError propagates (the app shows it)."""
    key = str(path)
    token = data.db_token(path)
    summary = _summary(key, token)
    st.title("solci: attention output projection backward")
    st.sidebar.caption("History")
    st.sidebar.text(data.open_db(key).describe())  # a lake's spec without its password
    if st.sidebar.button("Refresh", help="read the history again (new runs show on the next refresh)"):
        st.rerun()
    if summary.empty:
        st.info(data.EMPTY_MESSAGE)
        _jobs_section(key, token)
        return
    names = data.protocol_names(summary)
    opened = _open_on_commit(key)
    sel = _sidebar(summary, names)
    if opened is not None and opened.get("base"):
        _pull_request_panel(key, token, opened)
    win = _series(key, token, sel)
    proto = data.protocol_label(sel.protocol, names)
    if win.empty:
        where = f"on branch {fmt.md(sel.branch)}" if sel.branch else "on any branch"
        st.info(f"No runs of {fmt.md(sel.hardware)} with protocol {fmt.md(proto)} {where}.")
        return
    run_id = _run_selector(win)
    run = win[win["run_id"] == run_id].iloc[0]
    _headline(key, token, sel, win, run, proto)
    overview, changes, history, sol, runs_tab = st.tabs(TABS, key="view", bind="query-params")
    if overview.open:  # only the open tab runs
        with overview, st.container(key="tab-overview"):
            _overview_section(key, token, win, sel)
    if changes.open:
        with changes, st.container(key="tab-changes"):
            _changes_section(key, token, sel)
    if history.open:
        with history, st.container(key="tab-history"):
            _history_section(key, token, win, sel, proto)
    if sol.open:
        with sol, st.container(key="tab-sol"):
            _sol_section(key, token, sel, run)
    if runs_tab.open:
        with runs_tab, st.container(key="tab-runs"):
            _runs_section(win, sel)
            _jobs_section(key, token)
            _run_detail_section(key, token, run, sel)
    preload.mount()  # the charting library, fetched once the browser is idle


def _open_on_commit(key: str) -> dict | None:
    """``?commit=SHA`` (the link of ``solci report``; ``&base=SHA``: its run judged against that merge-base):
    select that commit's newest run (its hardware, protocol, all branches), once per link; the sidebar then works
    as usual. A pull request's run is no point of main's series: the page selects its merge-base's run, and the
    run found is returned for its panel. A commit never measured is said."""
    wanted, base = st.query_params.get("commit"), st.query_params.get("base")
    if not wanted:
        return None
    if st.session_state.get("opened-commit") == (wanted, base):
        return st.session_state.get("opened-run")
    st.session_state["opened-commit"] = (wanted, base)
    db = data.open_db(key)
    found = st.session_state["opened-run"] = data.commit_run(db, str(wanted), str(base) if base else None)
    if found is None:
        against = f" against the merge-base {fmt.code(fmt.short(base, 12))}" if base else ""
        st.warning(
            f"Commit {fmt.code(fmt.short(wanted, 12))} (from the link) was never measured{against} in this history."
        )
        return None
    st.session_state["hardware"] = found["hardware"]
    st.session_state["protocol"] = found["protocol"]
    st.session_state["branch"] = ALL_BRANCHES
    shown = data.commit_run(db, found["base"]) if found.get("base") else found
    if shown is not None and shown["hardware"] == found["hardware"] and shown["protocol"] == found["protocol"]:
        st.session_state["run"] = shown["run_id"]
    return found


def _pull_request_panel(key: str, token: tuple, found: dict) -> None:
    """A pull request's run (from the link): its verdict against its merge-base's level and the cases it moved,
    as `solci report --base` says it; the page below shows main's line, on the merge-base's run."""
    rows = _pull_request_report(key, token, found["commit"], found["base"])
    if rows is None:
        return
    run = rows["run"]
    verdict = fmt.DASH if fmt.missing(run.get("verdict")) else str(run["verdict"])
    st.info(
        f"**Pull request run** of {fmt.code(fmt.short(run['commit'], 12))} on {fmt.code(run['branch'] or 'no branch')}"
        f", judged against the level of its merge-base {fmt.code(fmt.short(run['base'], 12))} on main: "
        f"**{fmt.md(verdict)}**. Its runs are no points of main's series; below, main's line on the merge-base."
    )
    if not fmt.missing(run.get("message")):
        st.text(str(run["message"]))
    moved = rows["moved"]
    if moved.empty:
        return
    _cases_moved_table(moved, "pr-moved", ("merge-base level", "pull request"))


def _sidebar(summary: pd.DataFrame, names: dict[str, str]) -> Selection:
    """Hardware, protocol, branch and the window (how many of the newest runs); all kept in the URL."""
    sb = st.sidebar
    sb.header("Selection")
    hardware = sb.selectbox(
        "Hardware",
        data.hardware_options(summary),
        key="hardware",
        bind="query-params",
        help="One hardware label at a time: series never mix GPUs (or the CPU interpreter). Opens on the "
        "hardware of the newest passing GPU run.",
    )
    protocol = sb.selectbox(
        "Protocol",
        data.protocol_options(summary, hardware),
        format_func=lambda h: data.protocol_label(h, names),
        key="protocol",
        bind="query-params",
        help="How the timings were taken; figures of different protocols are never compared.",
    )
    others = data.other_protocols_text(summary, hardware, protocol)
    if others:  # a run of other options (--iters 2) is never hidden without a word
        sb.info(others)
    branches = data.branch_options(summary, hardware, protocol)
    branch = sb.selectbox("Branch", [ALL_BRANCHES, *branches], key="branch", bind="query-params")
    limit = sb.selectbox(
        "Newest runs shown",
        WINDOW_CHOICES,
        index=WINDOW_CHOICES.index(data.DEFAULT_WINDOW),
        key="window",
        bind="query-params",
        help="How many of the selection's newest runs the tables and charts read.",
    )
    return Selection(hardware, protocol, None if branch == ALL_BRANCHES else branch, int(limit))


def _run_selector(win: pd.DataFrame) -> str:
    """The run the headline, the SOL view and the run details show: the newest passing run unless picked."""
    ids = list(win["run_id"].iloc[::-1])
    if "run" in st.session_state and st.session_state["run"] not in ids:  # e.g. ?commit= of a run older than the window
        st.sidebar.caption("The run asked for is outside the window: pick more of the newest runs to see it.")
        del st.session_state["run"]
    default = data.default_run(win)
    labels = data.run_choice_labels(win)
    return st.sidebar.selectbox(
        "Run shown",
        ids,
        index=ids.index(default) if default in ids else 0,
        format_func=labels.__getitem__,
        key="run",
        bind="query-params",
        help="The headline figures, the SOL view and the run details are of this run; by default the newest "
        "passing run of the selection.",
    )


def _headline(key: str, token: tuple, sel: Selection, win: pd.DataFrame, run: pd.Series, proto: str) -> None:
    cpu = data.is_cpu(sel.hardware)
    passing = bool(run["passing"])
    newest = win.iloc[-1]
    which = "the newest passing run" if run["run_id"] == data.default_run(win) and passing else "picked in the sidebar"
    st.markdown(
        f"**{fmt.md(sel.hardware)}** · protocol {fmt.md(proto)} · run {fmt.code(fmt.short(run['commit'], 12))} on "
        f"{fmt.code(run['branch'] or 'no branch')}, {run['started_at']:%Y-%m-%d %H:%M} UTC ({which})"
    )
    if cpu:
        st.warning(
            f"**{fmt.md(sel.hardware)}**: these timings come from Triton's interpreter on the CPU. They check that "
            "the pipeline works; they say nothing about GPU speed, and no SOL model or score applies."
        )
    subset = data.subset_text(run)
    same = data.same_cases(win, run)  # suite figures compare only runs of the same cases
    prev = same[(same["started_at"] < run["started_at"]) & same["passing"]]
    prev_row = prev.iloc[-1] if not prev.empty else None
    of_cases = f"; this run measured {subset}, so it is compared only with runs of the same cases" if subset else ""
    cols = st.columns(5)
    verdict = run["verdict"] if not fmt.missing(run["verdict"]) else "not judged"
    cols[0].metric(
        "Verdict",
        str(verdict),
        f"{int(run['n_pass'])}/{int(run['n_cases'])} cases pass",
        delta_color="off",
        delta_arrow="off",
    )
    g = run["geomean_us"] if passing else None
    judged = run["suite_change"] if passing and not cpu else None
    if not fmt.missing(judged):  # what judging stored: against the level since the last step
        delta = f"{float(judged):+.1%}"
        basis = "the change is the judged one, against the level since the last step (its interval: Overview)"
    else:  # not judged (yet): against the previous passing run, said so
        pg = prev_row["geomean_us"] if prev_row is not None and not cpu else None
        delta = f"{g / pg - 1:+.1%}" if not fmt.missing(g) and not fmt.missing(pg) else None
        basis = "not judged: the change is against the previous passing run of the same cases"
    cols[1].metric(
        f"Suite geomean ({charts.US})",
        fmt.us(g),
        delta or subset or ("not a speed figure" if cpu else "lower is better"),
        delta_color="inverse" if delta else "off",
        delta_arrow="auto" if delta else "off",
        delta_description="lower is better" if delta else None,
        help=f"geometric mean of the per-case medians on {fmt.md(sel.hardware)}; {basis}; a failed run has "
        f"none{of_cases}",
    )
    s = run["score"] if passing and not cpu else None
    ps = prev_row["score"] if prev_row is not None and not cpu else None
    sdelta = f"{(s - ps) * 100:+.1f} pts" if not fmt.missing(s) and not fmt.missing(ps) else None
    cols[2].metric(
        "SOL score",
        fmt.pct(s),
        sdelta or subset or "higher is better",
        delta_color="normal" if sdelta else "off",
        delta_arrow="auto" if sdelta else "off",
        delta_description="higher is better" if sdelta else None,
        help="mean SOL score over the cases (the leaderboard's % of SOL), the change against the previous passing "
        f"run of the same cases; none (–) for a failed run or the CPU interpreter, never 0 %{of_cases}",
    )
    baseline = data.matmul_baseline(sel.hardware)
    cols[3].metric(
        f"Kernel ÷ {baseline.split(' (')[0]} time",
        fmt.ratio(data.suite_ratio(run)),
        "lower is better",
        delta_color="off",
        delta_arrow="off",
        help=f"suite geomean of the kernel / geomean of the two {baseline} GEMMs timed in the same run"
        + (
            ": both under the CPU interpreter, a functional check, never a speed figure"
            if cpu
            else ": below 1.00× the fused kernel beats cuBLAS"
        )
        + "; none for a failed run",
    )
    n_open = int(_changes(key, token, sel)["status"].eq("open").sum())
    cols[4].metric("Open regressions", n_open, help="stored steps of this selection with status open")
    if not passing:
        st.error(
            f"This run did not pass: {fmt.md(data.failure_text(run) or run['status'])}. It has no suite "
            "figure and no SOL score (–); its cases and log are under Runs and jobs."
        )
    elif newest["run_id"] != run["run_id"] and not bool(newest["passing"]):
        st.warning(
            f"The newest run, {fmt.code(fmt.short(newest['commit'], 12))} ({newest['started_at']:%Y-%m-%d %H:%M}), "
            f"did not pass: {fmt.md(data.failure_text(newest) or newest['status'])}. The figures above are of the "
            "newest passing run; pick another run in the sidebar."
        )
    if subset:
        st.info(
            f"Run {fmt.code(fmt.short(run['commit'], 12))} measured {subset} (`solci run --cases`): its suite "
            f"geomean and SOL score are means over those cases only. They are compared only with runs of the same "
            f"cases, never with the {data.N_FULL}-case series, its records or the B200 leaderboard."
        )
    note = data.drift_text(run)
    if note:
        st.info(f"Run {fmt.code(fmt.short(run['commit'], 12))}: {fmt.md(note)}.")
    if run.get("step_status") == "acknowledged" and not fmt.missing(run.get("step_ack_reason")):
        st.info(
            f"The step at {fmt.code(fmt.short(run['commit'], 12))} is acknowledged: {fmt.md(run['step_ack_reason'])}"
        )


# ------------------------------------------------------------------------------------------------ overview
_TIME = st.column_config.DatetimeColumn("time (UTC)", format="YYYY-MM-DD HH:mm")


def _overview_section(key: str, token: tuple, win: pd.DataFrame, sel: Selection) -> None:
    st.subheader(f"Per run, newest first — {fmt.md(sel.hardware)}")
    st.caption(
        f"The newest {len(win)} runs of the selection, one row each (confirmation re-measurements are behind "
        "their step). *moved*: cases whose change passed screening, or the step's confirmed cases, out of the "
        "run's cases; *suite change*: against the level since the last step, with its interval; *note*: the "
        "first error line of a failed run, machine drift. Select a row for its cases and log."
    )
    table = data.overview_table(win)
    picked = _pick_row(table, "overview-table", "run_id", {"note": st.column_config.TextColumn("note", width="large")})
    run_id = picked or data.attention_run(win)
    if run_id is None:
        return
    row = win[win["run_id"] == run_id].iloc[0]
    how = "selected" if picked else "the newest run with a finding; select a row for another"
    st.markdown(f"**Run {fmt.code(fmt.short(row['commit'], 12))}** ({how})")
    _findings_section(key, token, row, sel)


def _pick_row(table: pd.DataFrame, key: str, id_column: str, columns: dict) -> str | None:
    """A table of up to 14 visible rows (``id_column`` hidden) where one row can be selected: its id, or None."""
    event = st.dataframe(
        table,
        hide_index=True,
        placeholder=fmt.DASH,
        key=key,
        on_select="rerun",
        selection_mode="single-row",
        column_order=[c for c in table.columns if c != id_column],
        height=_rows(len(table), 14),
        column_config={"time": _TIME, **columns},
    )
    return _picked(event, table, id_column)


def _picked(event: object, table: pd.DataFrame, column: str) -> str | None:
    try:
        rows = event.selection.rows  # type: ignore[attr-defined]
    except AttributeError:
        return None
    if rows and 0 <= rows[0] < len(table):
        return str(table.iloc[rows[0]][column])
    return None


def _findings_section(key: str, token: tuple, row: pd.Series, sel: Selection) -> None:
    """One run's verdict, drift, per-case judgement, its step and its log."""
    verdict = row["verdict"] if not fmt.missing(row["verdict"]) else "not judged"
    message = data.failure_text(row) or (row["message"] if not fmt.missing(row["message"]) else "(no message stored)")
    st.text(f"verdict {verdict}: {message}")
    note = data.drift_text(row)
    if note:
        st.info(fmt.md(note[0].upper() + note[1:]) + ".")
    if not fmt.missing(row["step_id"]):
        st.text(f"step {row['step_id']} ({row['step_status']}): listed under Changes")
    cases = _findings(key, token, row["run_id"])
    failed = cases[(cases["status"] != "pass") & (cases["case"] != data.SUITE)]
    if not failed.empty:
        lines = failed["error_line"].fillna(failed["status"]).astype(str)
        statuses = ", ".join(sorted(set(failed["status"])))
        same = "the same error" if lines.nunique() == 1 else f"{lines.nunique()} different errors; the first"
        st.text(f"{len(failed)} of {int(row['n_cases'])} cases failed ({statuses}) with {same}:")
        first = failed["error"].dropna()
        st.text(str(first.iloc[0])[-8000:] if not first.empty else lines.iloc[0])
    view = cases.assign(
        change=cases["change"].map(fmt.signed_pct),
        threshold=cases["threshold"].map(fmt.signed_pct),
        p_value=cases["p_value"].map(fmt.p_value),
        q_value=cases["q_value"].map(fmt.p_value),
        control_change=cases["control_change"].map(fmt.signed_pct),
        confirmed=[
            fmt.interval(c, lo, hi) if not fmt.missing(c) else fmt.DASH
            for c, lo, hi in zip(cases["confirmed_change"], cases["confirmed_lo"], cases["confirmed_hi"], strict=True)
        ],
        case=cases["case"].map(charts.case_title),
    )
    shown = [
        "case",
        "status",
        "median_us",
        "change",
        "threshold",
        "z",
        "p_value",
        "q_value",
        "moved",
        "control_change",
        "confirmed",
        "error_line",
    ]
    with st.expander(f"Cases of this run ({len(cases)})", expanded=not failed.empty or not fmt.missing(row["step_id"])):
        st.dataframe(
            view[shown],
            hide_index=True,
            placeholder=fmt.DASH,
            key=f"findings-{row['run_id']}",
            height=_rows(len(view)),
            column_config={
                "median_us": st.column_config.NumberColumn(f"median ({charts.US})", format="%.2f"),
                "z": st.column_config.NumberColumn("z", format="%.1f"),
                "change": st.column_config.TextColumn("change vs level"),
                "control_change": st.column_config.TextColumn("eager & cuBLAS, shared change"),
                "confirmed": st.column_config.TextColumn("confirmed [interval]"),
                "error_line": st.column_config.TextColumn("error", width="large"),
            },
        )
    _log_expander(key, token, row)


def _log_expander(key: str, token: tuple, row: pd.Series) -> None:
    if fmt.missing(row["job_id"]):
        return
    job_id = int(row["job_id"])
    with st.expander(f"Log of job {job_id}"):
        log = _job_log(key, token, job_id)
        st.text((log or "(no log)")[-20000:])


# ------------------------------------------------------------------------------------------------ changes
def _changes_section(key: str, token: tuple, sel: Selection) -> None:
    st.subheader(f"Changes of level — {fmt.md(sel.hardware)}")
    st.caption(
        "Each stored step once, newest first: the culprit commit, its status (open, fixed, acknowledged, "
        "improvement, ambiguous, not reproduced), the cases it moved, the suite change with its interval, how it "
        "was detected (confirmed at its own run, screening only, or late), what fixed it. Select a row for its "
        "cases. `solci flags` lists the same."
    )
    ch = _changes(key, token, sel)
    if ch.empty:
        st.success("No change of level stored for this selection: every judged run stayed within noise.")
    else:
        _steps_view(key, token, ch)
    _pull_requests_section(key, token, sel)


def _steps_view(key: str, token: tuple, ch: pd.DataFrame) -> None:
    statuses = [s for s in data.STEP_STATUSES if s in set(ch["status"])]
    chosen = st.multiselect("Status", statuses, default=statuses, key="change-status")
    ch = ch[ch["status"].isin(chosen)].reset_index(drop=True)
    table = data.changes_table(ch)
    picked = _pick_row(
        table, "changes-table", "step_id", {"ack reason": st.column_config.TextColumn("ack reason", width="medium")}
    )
    if ch.empty:
        return
    open_ = ch[ch["status"] == "open"]
    step_id = picked or str((open_ if not open_.empty else ch)["step_id"].iloc[0])
    step = ch[ch["step_id"] == step_id].iloc[0]
    how = "selected" if picked else ("the newest open step" if not open_.empty else "the newest step")
    st.markdown(f"**Step at {fmt.code(fmt.short(step['commit'], 12))}** ({how}): {fmt.md(step['status'])}")
    st.text(str(step["message"]) if not fmt.missing(step["message"]) else "")
    if not fmt.missing(step["ack_reason"]):
        st.text(f"acknowledged: {step['ack_reason']}")
    if not fmt.missing(step["fixed_by_commit"]):
        st.text(f"fixed by the step at {fmt.short(step['fixed_by_commit'], 12)}")
    _cases_moved_table(_step_cases(key, token, step_id), f"step-cases-{step_id}", ("level before", "level after"))


def _cases_moved_table(cases: pd.DataFrame, key: str, titles: tuple[str, str]) -> None:
    """The cases a step (or a pull request's run) moved: case, change with its interval, and the figures before
    and after under ``titles``."""
    view = cases.assign(
        case=cases["case"].map(charts.case_title),
        change=[fmt.interval(c, lo, hi) for c, lo, hi in zip(cases["change"], cases["lo"], cases["hi"], strict=True)],
    )[["case", "change", "before_us", "after_us"]]
    st.dataframe(
        view,
        hide_index=True,
        placeholder=fmt.DASH,
        key=key,
        height=_rows(len(view)),
        column_config={
            "change": st.column_config.TextColumn("change [interval]"),
            "before_us": st.column_config.NumberColumn(f"{titles[0]} ({charts.US})", format="%.2f"),
            "after_us": st.column_config.NumberColumn(f"{titles[1]} ({charts.US})", format="%.2f"),
        },
    )


def _pull_requests_section(key: str, token: tuple, sel: Selection) -> None:
    """Pull requests' runs of the selection's hardware, each judged against its merge-base (never a step of main's
    line); a row's link opens its panel."""
    prs = _pull_requests(key, token, sel.hardware)
    if prs.empty:
        return
    st.subheader(f"Pull requests — {fmt.md(sel.hardware)}")
    st.caption(
        "Each pull request's run, newest first, judged against the level of its merge-base on main; its steps "
        "never move main's levels or records. `solci flags --pull-requests` lists their steps, "
        "`solci report SHA --base main` says it as the pull request's comment does."
    )
    table = data.pull_requests_table(prs)
    st.dataframe(
        table,
        hide_index=True,
        placeholder=fmt.DASH,
        key="pull-requests-table",
        height=_rows(len(table)),
        column_config={"open": st.column_config.LinkColumn("open", display_text="open")},
    )


# ------------------------------------------------------------------------------------------------ history
def _history_section(key: str, token: tuple, win: pd.DataFrame, sel: Selection, proto: str) -> None:
    figs = _history_figures(key, token, sel, proto)
    st.caption(
        f"The newest {figs['n']} runs of the selection (sidebar: newest runs shown); dotted lines: stored steps, at "
        "the run that opened them; markers: confirmed regressions and improvements, failed cases."
    )
    st.plotly_chart(figs["suite"], key="suite", **PLOTLY)
    if not figs["cases"]:
        return
    st.plotly_chart(figs["grid"], key="grid", **PLOTLY)
    case = st.selectbox(
        "One case in detail (its samples' spread, eager, cuBLAS, T_SOL)",
        [None, *figs["cases"]],
        format_func=lambda c: "(pick a case)" if c is None else c,
        key=f"case-{sel.hardware}",
    )
    if case is not None:
        st.plotly_chart(_case_figure(key, token, sel, proto, case), key="case", **PLOTLY)


# ------------------------------------------------------------------------------------------------ SOL
_US_COLUMNS = {
    c: st.column_config.NumberColumn(c, format="%.2f")
    for c in ("median_us", "t_sol_us", "eager_us", "cublas_us", "best_us", "level_us", "record_us")
}


def _rows(n: int, most: int = 24) -> int:
    """A table height showing ``n`` rows (up to ``most``) without scrolling."""
    return 35 * (min(max(n, 1), most) + 1) + 3


def _sol_section(key: str, token: tuple, sel: Selection, run: pd.Series) -> None:
    run_label = f"run {run['label']}"
    quarantined = not fmt.missing(run["quarantine"])
    table, suite, published, best = _sol(key, token, sel, run["run_id"], quarantined)
    subset = data.subset_text(run)
    st.subheader(f"Distance to SOL — {fmt.md(sel.hardware)}, {fmt.md(run_label)}")
    passing = bool(run["passing"])
    has_score = not table.empty and table["score"].notna().any()
    if not passing:
        st.error(
            f"This run did not pass ({fmt.md(data.failure_text(run) or run['status'])}): its failed cases have "
            "no SOL score (–). Pick a passing run in the sidebar for the full picture."
        )
    if data.is_cpu(sel.hardware):
        st.info(
            f"**{fmt.md(sel.hardware)}**: Triton's interpreter has no SOL model and no score, and its timings "
            "never become records: this view is for GPU runs."
        )
    elif table.empty or table["t_sol_us"].isna().all():
        st.info(
            f"No SOL model for **{fmt.md(sel.hardware)}** (no peak rates known for it), so no T_SOL and no "
            "score; the project's best on this hardware is still shown below."
        )
    elif has_score:
        c1, c2 = st.columns(2)
        c1.plotly_chart(
            charts.sol_scores_figure(table.assign(hardware=sel.hardware), hardware=sel.hardware, run_label=run_label),
            key="sol-scores",
            **PLOTLY,
        )
        c2.plotly_chart(
            charts.sol_latency_figure(table, hardware=sel.hardware, run_label=run_label),
            key="sol-latency",
            **PLOTLY,
        )
    st.markdown(
        f"**Per case** ({charts.US}, {fmt.md(sel.hardware)}); *best* = the project's record on this hardware and "
        "protocol (its best confirmed level, never one lucky run), *gap* = median / best − 1 (lower is better); "
        "*level* = the case's current level (the median of the commits since the newest confirmed step, as "
        "judging last left it) and its *standing* against the record; – = no figure"
    )
    low = table[table["standing"].fillna("").astype(str).str.startswith("below record")] if not table.empty else table
    if not low.empty:
        st.warning(
            f"{len(low)} case(s) with a current level slower than the project record beyond noise: "
            + ", ".join(f"{fmt.md(c)} {fmt.md(t)}" for c, t in zip(low["case"], low["standing"], strict=True))
        )
    st.dataframe(
        table.assign(best_commit=table["best_commit"].map(fmt.short)),
        hide_index=True,
        placeholder=fmt.DASH,
        key="sol-table",
        height=_rows(len(table)),
        column_config={
            "score": st.column_config.NumberColumn("SOL score", format="percent"),
            "gap": st.column_config.NumberColumn("gap to best", format="percent"),
            "x_sol": st.column_config.NumberColumn("median / T_SOL (lower is better)", format="%.2f×"),
            **_US_COLUMNS,
        },
    )
    st.subheader("Best-known records")
    cols = st.columns(3)
    best_us = suite.get("best_us")
    apart = f"; this run measured {subset}: not comparable" if subset else ""
    cols[0].metric(
        f"Project record suite geomean ({charts.US})",
        fmt.us(best_us),
        help=f"commit {suite.get('best_commit') or '-'}, same hardware and protocol and cases{apart}",
    )
    if not fmt.missing(suite.get("level_us")):
        st.caption(
            f"Current suite level: {fmt.us(suite.get('level_us'))} {charts.US} over {suite.get('level_n_runs')} "
            f"commit(s) since {fmt.short(suite.get('level_since'), 12)}: {fmt.md(suite.get('level_standing'))}"
        )
    gap = suite.get("gap") if passing else None
    cols[1].metric(
        "This run vs project best (lower is better)",
        fmt.signed_pct(gap),
        delta_color="off",
        help=f"against the best run of the same cases{apart}",
    )
    best_score = None if best is None else best.get("score")
    cols[2].metric(
        "Project best SOL score",
        fmt.pct(best_score) if not data.is_cpu(sel.hardware) else fmt.DASH,
        help=f"the highest suite SOL score of a passing run of the benchmark's {data.N_FULL} cases of this "
        "selection (the leaderboard's cases)",
    )
    if data.is_cpu(sel.hardware):
        st.caption("The B200 leaderboard is compared through the SOL score only, which this hardware lacks.")
        return
    if best is None:
        st.caption(
            f"The B200 leaderboard ranks mean SOL scores over the benchmark's {data.N_FULL} cases: no passing run "
            f"of those {data.N_FULL} cases with a SOL score on this selection to compare with it."
        )
        return
    c1, c2 = st.columns([3, 2])
    run_score = run["score"] if passing and not subset else None
    c1.plotly_chart(
        charts.records_figure(
            published, hardware=sel.hardware, project_best=best, run_score=run_score, run_label=str(run["label"])
        ),
        key="records",
        **PLOTLY,
    )
    with c2:
        st.markdown("**How to read this comparison**")
        st.caption(charts.RECORDS_CAVEAT)
        st.text(
            f"project best: {fmt.pct(best_score)} at {fmt.short(best.get('commit'), 12)} "
            f"({best.get('started_at'):%Y-%m-%d})"
        )
        if subset:
            st.text(
                f"this run's SOL score ({fmt.pct(run['score'] if passing else None)}) covers {subset}: not "
                f"comparable to the leaderboard or the project's {data.N_FULL}-case best"
            )
        sg = suite.get("score_gap")
        if not fmt.missing(best_score) and not fmt.missing(suite.get("record_latency_us")):
            record = float(suite["record_pct_sol"]) / 100
            st.text(
                f"{abs(record - float(best_score)) * 100:.1f} pts {'behind' if record > best_score else 'ahead of'} "
                f"the B200 #1 ({suite.get('record_implementation')})"
            )
        elif not fmt.missing(sg):
            st.text(f"{abs(sg) * 100:.1f} pts from the B200 #1")


# ------------------------------------------------------------------------------------------------ runs, jobs
def _runs_section(win: pd.DataFrame, sel: Selection) -> None:
    st.subheader(f"Runs — {fmt.md(sel.hardware)}")
    ok = win["passing"]
    view = win.iloc[::-1].assign(
        commit=win["commit"].map(fmt.short),
        score=win["score"].where(ok & (not data.is_cpu(sel.hardware))),
        ratio_vs_cublas=win.apply(data.suite_ratio, axis=1) if not win.empty else win["ratio_vs_cublas"],
        ratio_vs_eager=win["ratio_vs_eager"].where(ok),
        geomean_us=win["geomean_us"].where(ok),
    )
    cols = [
        "commit",
        "branch",
        "started_at",
        "status",
        "verdict",
        "n_pass",
        "n_cases",
        "geomean_us",
        "score",
        "ratio_vs_cublas",
        "ratio_vs_eager",
        "wall_s",
        "job_id",
        "hostname",
        "run_id",
    ]
    st.dataframe(
        view[cols],
        hide_index=True,
        placeholder=fmt.DASH,
        key="runs-table",
        height=_rows(len(view), 12),
        column_config={
            "started_at": _TIME,
            "geomean_us": st.column_config.NumberColumn(f"suite geomean ({charts.US})", format="%.2f"),
            "score": st.column_config.NumberColumn("SOL score", format="percent"),
            "ratio_vs_cublas": st.column_config.NumberColumn(
                f"÷ {data.matmul_baseline(sel.hardware)} (lower is better)", format="%.2f×"
            ),
            "ratio_vs_eager": st.column_config.NumberColumn("÷ eager (lower is better)", format="%.2f×"),
            "wall_s": st.column_config.NumberColumn("wall (s)", format="%.0f"),
        },
    )


def _jobs_section(key: str, token: tuple) -> None:
    st.subheader("Job queue")
    jobs, counts = _jobs(key, token)
    if jobs.empty:
        st.caption("No jobs: `solci run`, `solci watch`, git hooks and `solci up` queue them.")
        return
    cols = st.columns(4)
    for col, status in zip(cols, ("queued", "running", "done", "failed"), strict=True):
        col.metric(status, int(counts.get(status, 0)))
    view = jobs.assign(commit=jobs["commit"].map(fmt.short), run_id=jobs["run_id"].map(lambda r: fmt.short(r, 8)))
    st.dataframe(
        view,
        hide_index=True,
        placeholder=fmt.DASH,
        key="jobs-table",
        height=_rows(len(view), 10),
        column_config={
            c: st.column_config.DatetimeColumn(c, format="YYYY-MM-DD HH:mm:ss")
            for c in ("enqueued_at", "started_at", "finished_at")
        },
    )


def _run_detail_section(key: str, token: tuple, run: pd.Series, sel: Selection) -> None:
    st.subheader(f"One run — {fmt.md(sel.hardware)}")
    info, cases, samples = _run_detail(key, token, run["run_id"])
    if info is None:
        st.warning(f"run {fmt.md(run['run_id'])} is no longer stored")
        return
    st.caption("The run picked in the sidebar (Run shown).")
    st.text(
        f"commit {info['commit']} ({info['branch'] or '-'}), started {info['started_at']:%Y-%m-%d %H:%M} UTC, "
        f"{info['mode']}, host {info['hostname']}, status {info['status']}, verdict {run['verdict']}"
    )
    failure = data.failure_text(run)
    if failure:
        st.error(f"{fmt.md(failure)}")
        errs = cases[cases["error"].notna() & (cases["status"] != "pass")]
        if not errs.empty:
            st.text(str(errs["error"].iloc[0])[-8000:])
    shown = ["case", "status", "median_us", "eager_us", "cublas_us", "t_sol_us", "score", "error_line"]
    believed = fmt.missing(run["quarantine"])  # a quarantined run's figures are not believed (as the SOL tab)
    view = cases[cases["case"] != data.SUITE].assign(
        score=lambda t: t["score"].where((t["status"] == "pass") & believed)
    )
    st.dataframe(
        view[shown],
        hide_index=True,
        placeholder=fmt.DASH,
        key="run-cases",
        height=_rows(len(view)),
        column_config={
            "score": st.column_config.NumberColumn("SOL score", format="percent"),
            "error_line": st.column_config.TextColumn("error", width="large"),
            **_US_COLUMNS,
        },
    )
    relative = st.toggle("Samples relative to each case's median", value=True, key="samples-relative")
    fig = charts.samples_figure(samples, hardware=sel.hardware, run_label=f"run {run['label']}", relative=relative)
    st.plotly_chart(fig, key="samples", **PLOTLY)
    _log_expander(key, token, run)
