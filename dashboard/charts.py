"""Pure chart functions: DataFrames in, plotly Figures out (no storage, no streamlit).

Every figure is about ONE hardware label: its title and latency axis name it, and a frame holding another
label (column ``hardware``) is refused with ValueError. The one figure that shows other hardware, the
leaderboard comparison, compares only SOL scores (% of SOL), never microseconds.

Only passing runs (column ``passing``: every case passed, not quarantined; storage.queries defines it) are drawn
as figures; the others are marked (failed, or quarantined: faster than the speed of light, not believed).
Stored strings are plain text in the frames and escaped (``fmt.html``) where a figure shows them: run labels as
x values, titles and axis titles in ``_layout``.

Series run over commits in time order: the x axis is categorical, one tick per run, labelled with the short
commit (a commit measured twice gets a "#2" suffix), so the frames must come oldest first.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.fmt import html

SUITE = "__suite__"  # storage.schema.SUITE (kept here so the module stays free of storage imports)

COLORS = {
    "kernel": "#1f77b4",
    "band": "rgba(31, 119, 180, 0.18)",
    "eager": "#7f7f7f",
    "cublas": "#ff7f0e",
    "t_sol": "#2ca02c",
    "project": "#1f77b4",
    "published": "#b0b0b0",
    "run": "#9ecae1",
}
FLAG_STYLE: dict[str, tuple[str, str, str]] = {  # kind -> (marker symbol, colour, legend name)
    "regression": ("triangle-up", "#d62728", "regression"),
    "improvement": ("triangle-down", "#2ca02c", "improvement"),
    "new_record": ("star", "#e6b800", "new record"),
    "incorrect": ("x", "#8b0000", "incorrect"),
    "error": ("x-open", "#9467bd", "error / timeout"),
}
# a run that did not pass: (marker symbol, colour, legend name), on the suite chart and on the case charts
RUN_MARK_STYLE: dict[str, tuple[str, str, str]] = {
    "failed": ("x", "#8b0000", "run failed (no suite figure)"),
    "failed_case": ("x-thin-open", "#8b0000", "run failed (no figure)"),
    "quarantined": ("hexagram-open", "#e377c2", "run quarantined (not believed)"),
}
STATUS_COLORS = {"pass": "#1f77b4", "incorrect": "#d62728", "error": "#9467bd", "timeout": "#9467bd"}
US = "µs"
# plotly_white's look in the few keys these charts use (the full template is 7 kB in every figure sent)
_GRID = {"gridcolor": "#EBF0F8", "linecolor": "#EBF0F8", "zerolinecolor": "#EBF0F8", "ticks": "", "automargin": True}
TEMPLATE = {
    "layout": {
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"color": "#2a3f5f"},
        "hoverlabel": {"align": "left"},
        "xaxis": _GRID,
        "yaxis": {**_GRID, "zerolinewidth": 2},
        "colorway": ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880"],
    }
}


# ------------------------------------------------------------------------------------------------ helpers
def check_one_hardware(df: pd.DataFrame | None, hardware: str) -> None:
    """ValueError when ``df`` holds rows of another hardware label than ``hardware``."""
    if df is None or df.empty or "hardware" not in df.columns:
        return
    others = sorted({str(h) for h in df["hardware"].dropna().unique()} - {hardware})
    if others:
        raise ValueError(f"a chart of {hardware!r} was given rows of {', '.join(others)}: never mix hardware")


def run_labels(df: pd.DataFrame) -> dict[str, str]:
    """run_id -> x label (short commit, '#2' for a repeat), in the frame's (time) order; plain text (the charts
    escape it as they draw it)."""
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for run_id, commit in zip(df["run_id"], df["commit"], strict=True):
        if run_id in out:
            continue
        base = str(commit)[:8] if isinstance(commit, str) and commit else str(run_id)[:8]
        seen[base] = seen.get(base, 0) + 1
        out[run_id] = base if seen[base] == 1 else f"{base} #{seen[base]}"
    return out


def _x_labels(df: pd.DataFrame) -> dict[str, str]:
    """run_labels escaped for plotly: the x values (category ticks) of the charts."""
    return {r: html(label) for r, label in run_labels(df).items()}


def _passing(df: pd.DataFrame) -> pd.Series:
    """The frame's ``passing`` column (queries.run_window / window_cases) as booleans: rows drawn as figures."""
    return df["passing"].fillna(False).astype(bool)


def case_title(case: str) -> str:
    return "suite (geomean)" if case == SUITE else case


def _escape_titles(fig: go.Figure) -> None:
    """Every axis title of ``fig`` escaped for plotly (they name the hardware, a stored string)."""

    def escape(axis) -> None:
        if axis.title.text:
            axis.title.text = html(axis.title.text)

    fig.for_each_xaxis(escape)
    fig.for_each_yaxis(escape)


def _layout(fig: go.Figure, title: str, subtitle: str | None = None, *, height: int = 420) -> go.Figure:
    """Title, subtitle, size and legend; the one place where the titles (figure and axes, which carry the
    hardware label and the protocol, stored strings) are escaped for plotly: callers pass plain text."""
    _escape_titles(fig)
    t: dict = {"text": html(title), "x": 0.0, "xanchor": "left"}
    if subtitle:
        t["subtitle"] = {"text": html(subtitle)}
    fig.update_layout(
        title=t,
        height=height,
        template=TEMPLATE,
        hovermode="closest",
        margin={"l": 60, "r": 20, "t": 90 if subtitle else 60, "b": 50},
        legend={"orientation": "v", "yanchor": "top", "y": 1.0, "xanchor": "left", "x": 1.01, "traceorder": "normal"},
    )
    return fig


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=html(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, height=250)


def _fmt(v: object, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.{digits}f}"  # type: ignore[arg-type]


def _flag_markers(
    flags: pd.DataFrame | None, case: str, labels: dict[str, str], y_of: dict[str, float], **trace_kw: object
) -> list[dict]:
    """One marker trace (a dict) per flag kind for ``case``, at the run's x and y (``y_of`` by run_id)."""
    if flags is None or flags.empty:
        return []
    sub = flags[(flags["case"] == case) & flags["run_id"].isin(labels)]
    out = []
    for kind, (symbol, color, name) in FLAG_STYLE.items():
        k = sub[sub["kind"] == kind]
        k = k[k["run_id"].map(lambda r: r in y_of and y_of[r] is not None and not pd.isna(y_of[r]))]
        if k.empty:
            continue
        trace = _marker_trace(k["run_id"], labels, y_of, (symbol, color, name), [html(m) for m in k["message"]])
        out.append(
            trace
            | {"hovertemplate": "%{x}<br>%{text}<extra>" + name + "</extra>"}
            | {"legendgroup": f"flag-{kind}", **trace_kw}
        )
    return out


def _marker_trace(
    run_ids: pd.Series, labels: dict[str, str], y_of: dict[str, float], style: tuple[str, str, str], text: list[str]
) -> dict:
    """A marker trace (a dict) at these runs' x (``labels``) and y (``y_of``): ``style`` (symbol, colour, legend
    name), one hover ``text`` (already escaped) per run."""
    symbol, color, name = style
    return {
        "type": "scatter",
        "x": [labels[r] for r in run_ids],
        "y": [y_of[r] for r in run_ids],
        "mode": "markers",
        "name": name,
        "marker": {"symbol": symbol, "size": 14, "color": color, "line": {"width": 1}},
        "text": text,
        "hovertemplate": "%{x}<br>%{text}<extra></extra>",
    }


def _run_marks(df: pd.DataFrame, labels: dict[str, str], y_of: dict[str, float], *, suite: bool) -> list[dict]:
    """Marker traces (dicts, as ``_flag_markers``) for the rows of runs that did not pass (``passing`` false),
    whose figures are not drawn: quarantined runs, and failed runs (``suite``: one row per run, with n_pass and
    n_cases; otherwise per run x case, where a failed case is marked by its own flag and only the cases that
    passed in a failed run are marked here)."""
    bad = df[~_passing(df)]
    if bad.empty:
        return []
    quarantined = bad["quarantine"].notna()
    kinds = {"quarantined": bad[quarantined]}
    if suite:
        kinds["failed"] = bad[~quarantined]
    else:
        kinds["failed_case"] = bad[~quarantined & (bad["status"] == "pass")]
    out = []
    for kind, rows in kinds.items():
        rows = rows[rows["run_id"].map(lambda r: r in labels and not pd.isna(y_of.get(r)))]
        if rows.empty:
            continue
        symbol, color, name = RUN_MARK_STYLE[kind]
        if kind == "quarantined":
            text = [html(f"quarantined, figures not believed: {q}") for q in rows["quarantine"]]
        elif suite:
            text = [
                html(f"{s}: {p}/{n} cases passed")
                for s, p, n in zip(rows["status"], rows["n_pass"], rows["n_cases"], strict=True)
            ]
        else:
            text = ["another case of this run failed: no figure"] * len(rows)
        out.append(_marker_trace(rows["run_id"], labels, y_of, (symbol, color, name), text))
    return out


def _step_lines(
    steps: pd.DataFrame | None,
    case: str,
    labels: dict[str, str],
    *,
    xref: str = "x",
    yref: str = "paper",
    annotate: bool = True,
) -> tuple[list[dict], list[dict]]:
    """(shapes, annotations): a dotted vertical line at the run that opened each stored step, with its change."""
    shapes: list[dict] = []
    notes: list[dict] = []
    if steps is None or steps.empty:
        return shapes, notes
    for row in steps[(steps["case"] == case) & steps["run_id"].isin(labels)].itertuples(index=False):
        change = float(row.change)
        x = labels[row.run_id]
        color = "#d62728" if change > 0 else "#2ca02c"
        shapes.append(
            {
                "type": "line",
                "xref": xref,
                "yref": yref,
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dot", "width": 1.5, "color": color},
            }
        )
        if annotate:
            notes.append(
                {
                    "x": x,
                    "xref": xref,
                    "y": 1.0,
                    "yref": yref,
                    "text": f"step {change:+.1%}",
                    "showarrow": False,
                    "yanchor": "bottom",
                    "font": {"size": 10},
                }
            )
    return shapes, notes


def _reference(x: list, y: pd.Series, name: str, dash: str, color: str) -> dict:
    """A baseline's line over the runs (with markers when too few runs for a line to show)."""
    return {
        "type": "scatter",
        "x": x,
        "y": list(y),
        "mode": "lines" if len(x) > 2 else "lines+markers",
        "name": name,
        "line": {"dash": dash, "color": color},
        "hovertemplate": "%{x}: %{y:.2f} " + US + "<extra>" + name + "</extra>",
    }


def _sol_line(x: list, t_sol: float, name: str) -> dict:
    """The speed-of-light time: a flat line across the runs."""
    return {
        "type": "scatter",
        "x": [x[0], x[-1]],
        "y": [t_sol, t_sol],
        "mode": "lines",
        "name": name,
        "line": {"dash": "dashdot", "color": COLORS["t_sol"]},
        "hoverinfo": "skip",
    }


def _latency_axis(hardware: str) -> str:
    return f"latency ({US}), {hardware}"


def _figure(traces: list[dict], layout: dict) -> go.Figure:
    """One Figure from plain trace and layout dicts (validated once, not trace by trace)."""
    return go.Figure(data=traces, layout=layout)


def _values(s: pd.Series, digits: int = 3) -> list:
    """Plain floats for a trace, rounded (3 decimals of a microsecond; less to send and parse)."""
    return [None if pd.isna(v) else round(float(v), digits) for v in s]


def _when(s: pd.Series) -> list[str]:
    return [str(v)[:16] for v in s]


def _masked(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``df`` with the figures in ``columns`` missing on the rows of runs that did not pass (``passing``)."""
    ok = _passing(df)
    return df.assign(**{c: df[c].where(ok) for c in columns if c in df.columns})


def _marker_y(h: pd.DataFrame, raw: pd.DataFrame) -> dict[str, float]:
    """run_id -> where a marker goes on a case chart: the kernel's median, else (no figure drawn) the last drawn
    median, else the run's own eager time (a position, not a figure)."""
    anchor = h["median_us"].ffill().fillna(raw["eager_us"]).fillna(raw["median_us"])
    return dict(zip(h["run_id"], anchor, strict=True))


# ------------------------------------------------------------------------------------------------ history
def case_history_figure(
    hist: pd.DataFrame,
    *,
    case: str,
    hardware: str,
    protocol: str = "",
    flags: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
) -> go.Figure:
    """Latency of one case over the runs (oldest first): the kernel's median with the p25-p75 band of its
    samples, eager and cuBLAS as reference lines, T_SOL, flag markers and the stored steps' lines. Runs that did
    not pass have no figure: a marker instead (quarantined, or failed).

    ``hist``: per run x case rows (run_id, commit, branch, started_at, hardware, quarantine, passing, case,
    status, median_us, eager_us, cublas_us, t_sol_us), optionally q25_us, q75_us, min_us, max_us
    (dashboard.data.chart_cases)."""
    check_one_hardware(hist, hardware)
    title = f"{case_title(case)} latency — {hardware}"
    h = hist[hist["case"] == case] if not hist.empty else hist
    if h.empty:
        return _empty(title, f"no runs of {case} on {hardware}")
    raw = h
    h = _masked(h, ("median_us", "q25_us", "q75_us", "min_us", "max_us", "eager_us", "cublas_us"))
    labels = _x_labels(h)
    x = [labels[r] for r in h["run_id"]]
    traces: list[dict] = []
    if {"q25_us", "q75_us"} <= set(h.columns) and h["q25_us"].notna().any():
        traces.append(
            {
                "type": "scatter",
                "x": x,
                "y": _values(h["q75_us"]),
                "mode": "lines",
                "line": {"width": 0},
                "showlegend": False,
                "hoverinfo": "skip",
                "name": "p75",
            }
        )
        traces.append(
            {
                "type": "scatter",
                "x": x,
                "y": _values(h["q25_us"]),
                "mode": "lines",
                "line": {"width": 0},
                "fill": "tonexty",
                "fillcolor": COLORS["band"],
                "name": "kernel p25–p75",
                "hoverinfo": "skip",
            }
        )
    spread = [
        f"p25–p75 {_fmt(a)}–{_fmt(b)}, min {_fmt(c)}, max {_fmt(d)}"
        for a, b, c, d in zip(
            *(h[k] if k in h.columns else [None] * len(h) for k in ("q25_us", "q75_us", "min_us", "max_us")),
            strict=True,
        )
    ]
    custom = [
        list(t)
        for t in zip(
            h["commit"].map(lambda c: html(str(c)[:12])),
            h["branch"].map(html),
            _when(h["started_at"]),
            h["status"].astype(str),
            spread,
            strict=True,
        )
    ]
    traces.append(
        {
            "type": "scatter",
            "x": x,
            "y": _values(h["median_us"]),
            "mode": "lines+markers",
            "name": "kernel median",
            "line": {"color": COLORS["kernel"]},
            "customdata": custom,
            "hovertemplate": "%{customdata[0]} (%{customdata[1]})<br>%{customdata[2]}<br>median %{y:.2f} "
            + US
            + "<br>%{customdata[4]}<br>status %{customdata[3]}<extra></extra>",
        }
    )
    for key, name, dash in (("eager_us", "eager (PyTorch)", "dash"), ("cublas_us", "cuBLAS (2 GEMMs)", "dot")):
        if key in h.columns and h[key].notna().any():
            color = COLORS["eager" if key == "eager_us" else "cublas"]
            traces.append(_reference(x, _values(h[key]), name, dash, color))
    if "t_sol_us" in h.columns and h["t_sol_us"].notna().any():
        t_sol = float(h["t_sol_us"].dropna().iloc[-1])
        traces.append(_sol_line(x, t_sol, f"T_SOL {t_sol:.1f} {US}"))
    y_of = _marker_y(h, raw)
    traces += _flag_markers(flags, case, labels, y_of) + _run_marks(h, labels, y_of, suite=False)
    shapes, notes = _step_lines(steps, case, labels)
    sub = f"protocol {protocol}; " if protocol else ""
    fig = _figure(
        traces,
        {
            "shapes": shapes,
            "annotations": notes,
            "xaxis": {"title": {"text": "commit (oldest → newest)"}, "type": "category", "nticks": 24},
            "yaxis": {"title": {"text": _latency_axis(hardware)}, "rangemode": "tozero"},
        },
    )
    return _layout(fig, title, sub + "median of the timed iterations, band p25–p75 of the raw samples")


def _apart(runs: pd.DataFrame, main_set: str | None) -> pd.Series:
    """The runs (rows) of a set of cases other than ``main_set`` (column ``case_set``; none without either)."""
    if main_set is None or "case_set" not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs["case_set"].notna() & (runs["case_set"] != main_set)


def _case_count(case_set: object) -> int:
    return len(str(case_set).split(","))


def _other_sets(apart: pd.DataFrame, labels: dict[str, str]) -> list[dict]:
    """One marker trace (no line) per other set of cases: those runs' own geomeans, named with their number of
    cases; never joined to the suite line (a mean over other cases is not a change of it)."""
    if apart.empty:
        return []
    out = []
    for k, (key, rows) in enumerate(apart.groupby("case_set", sort=False)):
        if rows["geomean_us"].isna().all():  # none passed: only their run marks show
            continue
        n = _case_count(key)
        name = f"kernel geomean, {n} cases (other runs)" + (f" #{k + 1}" if k else "")
        out.append(
            {
                "type": "scatter",
                "x": [labels[r] for r in rows["run_id"]],
                "y": _values(rows["geomean_us"]),
                "mode": "markers",
                "name": name,
                "marker": {"symbol": "diamond", "size": 10, "color": COLORS["run"], "line": {"width": 1}},
                "text": [
                    html(f"{str(c)[:12]}: geomean of {n} cases only, not comparable with the line")
                    for c in rows["commit"]
                ],
                "hovertemplate": "%{text}<br>%{y:.2f} " + US + "<extra></extra>",
            }
        )
    return out


def suite_history_figure(
    runs: pd.DataFrame,
    *,
    hardware: str,
    protocol: str = "",
    flags: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
    t_sol_us: float | None = None,
    main_set: str | None = None,
) -> go.Figure:
    """Suite geometric mean over the runs (oldest first; one row per run), eager and cuBLAS geomeans as
    reference lines, the geomean T_SOL, runs without a suite figure (a case failed) marked, stored steps.

    A geomean compares only runs of the same cases: with ``main_set`` and a ``case_set`` column, the line, its
    references and ``t_sol_us`` are of the runs of ``main_set``; runs of other sets are markers of their own,
    named with their number of cases, at their place in time."""
    check_one_hardware(runs, hardware)
    title = f"Suite geometric mean — {hardware}"
    if runs.empty:
        return _empty(title, f"no runs on {hardware}")
    raw = runs
    runs = _masked(runs, ("geomean_us", "geomean_eager_us", "geomean_cublas_us", "score"))
    labels = _x_labels(runs)
    apart = _apart(runs, main_set)
    line = runs[~apart]
    x = [labels[r] for r in line["run_id"]]
    scores = (line["score"] * 100).round(1)
    custom = [
        list(t)
        for t in zip(
            line["commit"].map(lambda c: html(str(c)[:12])),
            line["branch"].map(html),
            _when(line["started_at"]),
            line["status"].astype(str),
            ["–" if pd.isna(v) else f"{v}%" for v in scores],
            strict=True,
        )
    ]
    traces: list[dict] = [
        {
            "type": "scatter",
            "x": x,
            "y": _values(line["geomean_us"]),
            "mode": "lines+markers",
            "name": "kernel geomean",
            "line": {"color": COLORS["kernel"], "width": 3},
            "customdata": custom,
            "hovertemplate": "%{customdata[0]} (%{customdata[1]})<br>%{customdata[2]}<br>geomean %{y:.2f} "
            + US
            + "<br>SOL score %{customdata[4]}<br>status %{customdata[3]}<extra></extra>",
        }
    ]
    for key, name, dash in (
        ("geomean_eager_us", "eager (PyTorch)", "dash"),
        ("geomean_cublas_us", "cuBLAS (2 GEMMs)", "dot"),
    ):
        if line[key].notna().any():
            color = COLORS["eager" if "eager" in key else "cublas"]
            traces.append(_reference(x, _values(line[key]), name, dash, color))
    if t_sol_us and x:
        traces.append(_sol_line(x, t_sol_us, f"T_SOL geomean {t_sol_us:.1f} {US}"))
    traces += _other_sets(runs[apart], labels)
    y_of = _suite_marker_y(runs, raw, apart)
    traces += _run_marks(runs, labels, y_of, suite=True)
    traces += _flag_markers(flags, SUITE, labels, y_of)
    shapes, notes = _step_lines(steps, SUITE, labels)
    sub = f"protocol {protocol}; " if protocol else ""
    xaxis: dict = {"title": {"text": "commit (oldest → newest)"}, "type": "category", "nticks": 24}
    what = "geometric mean of the per-case medians (passing runs)"
    if apart.any():  # the line skips those runs: keep every run in time order on the axis
        xaxis |= {"categoryorder": "array", "categoryarray": list(labels.values())}
        what += f"; line: runs of the same {_case_count(main_set)} cases, ◆: runs of other cases (not comparable)"
    fig = _figure(
        traces,
        {
            "shapes": shapes,
            "annotations": notes,
            "xaxis": xaxis,
            "yaxis": {"title": {"text": f"geomean {_latency_axis(hardware)}"}, "rangemode": "tozero"},
        },
    )
    return _layout(fig, title, sub + what)


def _suite_marker_y(runs: pd.DataFrame, raw: pd.DataFrame, apart: pd.Series) -> dict[str, float]:
    """run_id -> where a marker goes on the suite chart: the run's geomean, else (no figure drawn) the last drawn
    one of the runs of its set of cases, else the run's cuBLAS or eager geomean (a position, not a figure)."""
    key = runs["case_set"].where(apart, "") if apart.any() else pd.Series("", index=runs.index)
    anchor = runs["geomean_us"].groupby(key, sort=False).ffill()
    anchor = anchor.fillna(raw["geomean_cublas_us"]).fillna(raw["geomean_eager_us"]).fillna(raw["geomean_us"])
    return dict(zip(runs["run_id"], anchor, strict=True))


def case_grid_figure(
    hist: pd.DataFrame,
    *,
    hardware: str,
    protocol: str = "",
    flags: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
    columns: int = 4,
) -> go.Figure:
    """Small multiples: every case's kernel median over the runs, flags marked, stored steps as dotted lines,
    each with its own y axis and a few commit labels on its x axis (the baselines are in the one-case chart)."""
    check_one_hardware(hist, hardware)
    title = f"All cases — {hardware}"
    if hist.empty:
        return _empty(title, f"no runs on {hardware}")
    order = hist.drop_duplicates("case").sort_values(["m", "case"])["case"].tolist()
    rows = math.ceil(len(order) / columns)
    hgap, vgap = 0.05, 0.32 / max(rows, 1)
    width = (1.0 - hgap * (columns - 1)) / columns
    height = (1.0 - vgap * (rows - 1)) / rows
    raw = hist
    hist = _masked(hist, ("median_us", "eager_us"))
    labels = _x_labels(hist)
    layout: dict = {"shapes": [], "annotations": []}
    traces: list[dict] = []
    shown: set[str] = set()
    kinds: set[tuple[str, str, str]] = set()
    for i, (case, h) in enumerate(zip(order, (hist[hist["case"] == c] for c in order), strict=True)):
        r, c = divmod(i, columns)
        n = "" if i == 0 else str(i + 1)
        x0, y1 = c * (width + hgap), 1.0 - r * (height + vgap)
        x1, y0 = min(1.0, x0 + width), max(0.0, y1 - height)
        layout[f"xaxis{n}"] = {
            "domain": [x0, x1],
            "anchor": f"y{n}",
            "type": "category",
            "nticks": 3,
            "tickangle": 0,
            "tickfont": {"size": 8},
        }
        layout[f"yaxis{n}"] = {
            "domain": [y0, min(1.0, y1)],
            "anchor": f"x{n}",
            "rangemode": "tozero",
            "tickfont": {"size": 9},
        }
        if c == 0:
            layout[f"yaxis{n}"]["title"] = {"text": f"{US}, {hardware}"}
        layout["annotations"].append(
            {
                "text": case,
                "x": x0 + width / 2,
                "y": y1,
                "xref": "paper",
                "yref": "paper",
                "xanchor": "center",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 12},
            }
        )
        x = [labels[q] for q in h["run_id"]]
        lines = (("median_us", "kernel median", {"color": COLORS["kernel"]}),)  # eager: in the one-case chart
        for key, name, style in lines:
            if key not in h.columns or not h[key].notna().any():
                continue
            traces.append(
                {
                    "type": "scatter",
                    "x": x,
                    "y": _values(h[key]),
                    "mode": "lines",
                    "name": name,
                    "line": style,
                    "legendgroup": name,
                    "showlegend": name not in shown,
                    "xaxis": f"x{n}",
                    "yaxis": f"y{n}",
                    "hovertemplate": f"{case}<br>%{{x}}: %{{y:.2f}} {US}<extra>{name}</extra>",
                }
            )
            shown.add(name)
        y_of = _marker_y(h, raw.loc[h.index])
        marks = _flag_markers(flags, case, {q: labels[q] for q in h["run_id"]}, y_of)
        if marks:  # one trace per panel for all its marks (a trace per kind and panel costs the browser dearly)
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "xaxis": f"x{n}",
                    "yaxis": f"y{n}",
                    "showlegend": False,
                    "x": [v for t in marks for v in t["x"]],
                    "y": [v for t in marks for v in t["y"]],
                    "text": [v for t in marks for v in t["text"]],
                    "marker": {
                        "size": 9,
                        "line": {"width": 1},
                        "symbol": [t["marker"]["symbol"] for t in marks for _ in t["x"]],
                        "color": [t["marker"]["color"] for t in marks for _ in t["x"]],
                    },
                    "hovertemplate": f"{case} %{{x}}<br>%{{text}}<extra></extra>",
                }
            )
            kinds.update((t["name"], t["marker"]["symbol"], t["marker"]["color"]) for t in marks)
        lines_, _ = _step_lines(
            steps, case, {q: labels[q] for q in h["run_id"]}, xref=f"x{n}", yref=f"y{n} domain", annotate=False
        )
        layout["shapes"] += lines_
    sub = f"protocol {protocol}; " if protocol else ""
    for name, symbol, color in sorted(kinds):  # the marks' legend: one entry per kind, no point of its own
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": [None],
                "y": [None],
                "name": name,
                "marker": {"symbol": symbol, "color": color, "size": 9},
                "hoverinfo": "skip",
            }
        )
    fig = _figure(traces, layout)
    return _layout(
        fig,
        title,
        sub + "kernel median per run (x: commit, oldest → newest); dotted: stored steps",
        height=max(320, 250 * rows),
    )


# ------------------------------------------------------------------------------------------------ SOL
def sol_scores_figure(cases: pd.DataFrame, *, hardware: str, run_label: str) -> go.Figure:
    """The SOL score per case of one run as bars (% of SOL): 50% is the eager baseline, 100% is T_SOL. A case
    that did not pass has no score: no bar, its status written where the bar would be (never a 0 % bar).

    ``cases``: rows with case, status, score (0..1), median_us, t_sol_us (dashboard.data.sol_table)."""
    check_one_hardware(cases, hardware)
    title = f"SOL score per case — {hardware}, {run_label}"
    if cases.empty or not cases["score"].notna().any():
        return _empty(title, f"no SOL score on {hardware} (no peak-rate model for it, or no passing case)")
    ok = (cases["status"] == "pass") & cases["score"].notna()
    pct = (cases["score"] * 100).where(ok)
    fig = go.Figure(
        go.Bar(
            x=cases["case"],
            y=pct.fillna(0.0),
            name="SOL score",
            marker_color=[STATUS_COLORS.get(s, "#7f7f7f") for s in cases["status"]],
            text=[(f"{p:.0f}%" if good else str(s)) for p, good, s in zip(pct, ok, cases["status"], strict=True)],
            textposition="outside",
            customdata=list(zip(cases["status"], cases["median_us"], cases["t_sol_us"], strict=True)),
            hovertemplate=(
                "%{x}: %{text}<br>median %{customdata[1]:.2f} "
                + US
                + ", T_SOL "
                + "%{customdata[2]:.2f} "
                + US
                + "<br>status %{customdata[0]}<extra></extra>"
            ),
        )
    )
    fig.add_hline(
        y=50,
        line={"dash": "dash", "color": COLORS["eager"]},
        annotation_text="eager baseline (50%)",
        annotation_position="top left",
    )
    fig.add_hline(
        y=100,
        line={"dash": "dashdot", "color": COLORS["t_sol"]},
        annotation_text="T_SOL (100%)",
        annotation_position="top left",
    )
    fig.update_xaxes(title_text="case (ordered by M = B·S)", type="category")
    fig.update_yaxes(title_text=f"% of SOL, {hardware}", range=[0, 112])
    return _layout(
        fig,
        title,
        "S = 1 / (1 + (T_k − T_SOL) / (T_b − T_SOL)), T_b = this run's eager; higher is "
        "better; a failed case has no score",
    )


def sol_latency_figure(cases: pd.DataFrame, *, hardware: str, run_label: str) -> go.Figure:
    """Per case of one run: the kernel's median next to T_SOL, cuBLAS and eager (µs, same hardware)."""
    check_one_hardware(cases, hardware)
    title = f"Latency vs SOL per case — {hardware}, {run_label}"
    if cases.empty:
        return _empty(title, "no cases")
    fig = go.Figure()
    for key, name, color in (
        ("median_us", "kernel median", COLORS["kernel"]),
        ("t_sol_us", "T_SOL", COLORS["t_sol"]),
        ("cublas_us", "cuBLAS (2 GEMMs)", COLORS["cublas"]),
        ("eager_us", "eager (PyTorch)", COLORS["eager"]),
    ):
        if key in cases.columns and cases[key].notna().any():
            fig.add_trace(
                go.Bar(
                    x=cases["case"],
                    y=cases[key],
                    name=name,
                    marker_color=color,
                    hovertemplate="%{x}: %{y:.2f} " + US + "<extra>" + name + "</extra>",
                )
            )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="case (ordered by M = B·S)", type="category")
    fig.update_yaxes(title_text=_latency_axis(hardware))
    return _layout(fig, title, "T_SOL = max(FLOPs / peak bf16 rate, bytes / DRAM bandwidth) of this GPU model")


RECORDS_CAVEAT = (
    "The project's SOL score uses its own eager PyTorch time as T_b and the datasheet peaks of its GPU for "
    "T_SOL; the leaderboard's uses the benchmark's baseline on B200s. Only these scores are compared, never "
    "the latencies."
)


def records_figure(
    published: pd.DataFrame,
    *,
    hardware: str,
    project_best: dict | None = None,
    run_score: float | None = None,
    run_label: str = "",
) -> go.Figure:
    """The project's best suite SOL score on ``hardware`` (``project_best``: score 0..1, commit) next to the
    published B200 leaderboard, and the shown run's score (``run_score``) when it differs. Only the score is
    compared: the leaderboard's latencies are B200 microseconds and appear in hover text only."""
    title = f"Suite SOL score: the project on {hardware} vs the B200 leaderboard"
    names: list[str] = []
    pcts: list[float] = []
    colors: list[str] = []
    hover: list[str] = []
    for row in published.itertuples(index=False):
        names.append(f"#{int(row.rank)} {html(row.implementation)} (B200)")
        pcts.append(float(row.pct_sol))
        colors.append(COLORS["published"])
        hover.append(f"B200 leaderboard, observed {str(row.observed_at)[:10]}")
    best = None if not project_best or pd.isna(project_best.get("score")) else float(project_best["score"]) * 100
    if best is not None:
        names.append(f"solci best, {html(str(project_best.get('commit') or '')[:8])} ({html(hardware)})")
        pcts.append(best)
        colors.append(COLORS["project"])
        hover.append(f"the project's best passing run on {html(hardware)}; T_b = its eager PyTorch")
    if run_score is not None and not pd.isna(run_score) and (best is None or abs(float(run_score) * 100 - best) > 1e-9):
        names.append(f"shown run {html(run_label)} ({html(hardware)})")
        pcts.append(float(run_score) * 100)
        colors.append(COLORS["run"])
        hover.append(f"the run picked in the sidebar, on {html(hardware)}")
    if not names:
        return _empty(title, "no leaderboard rows and no score")
    order = sorted(range(len(names)), key=lambda i: (pcts[i], -i))  # bottom to top; ties: better rank on top
    fig = go.Figure(
        go.Bar(
            y=[names[i] for i in order],
            x=[pcts[i] for i in order],
            orientation="h",
            marker_color=[colors[i] for i in order],
            text=[f"{pcts[i]:.0f}%" for i in order],
            textposition="outside",
            customdata=[hover[i] for i in order],
            hovertemplate="%{y}: %{x:.1f}% of SOL<br>%{customdata}<extra></extra>",
            name="% of SOL",
        )
    )
    fig.add_vline(x=50, line={"dash": "dash", "color": COLORS["eager"]})
    fig.update_xaxes(
        title_text="% of SOL (mean SOL score × 100; higher is better; comparable across GPUs)", range=[0, 105]
    )
    fig.update_yaxes(title_text="")
    return _layout(
        fig,
        title,
        "compared only through the SOL score; B200 and " + hardware + " latencies (µs) are never compared",
        height=max(320, 30 * len(names) + 140),
    )


# ------------------------------------------------------------------------------------------------ one run
def _has_samples(v: object) -> bool:
    return isinstance(v, (list, tuple, np.ndarray)) and len(v) > 0


def samples_figure(samples: pd.DataFrame, *, hardware: str, run_label: str, relative: bool = True) -> go.Figure:
    """The raw kernel samples of one run (queries.run_samples rows): a box with every point per case. Cases
    without samples (an error or timeout has none) are left out and named in the subtitle.

    ``relative``: each sample as its deviation from the case's median (%), so the spread of small and large
    cases reads on one axis; otherwise latencies (log axis when they span more than 20x)."""
    check_one_hardware(samples, hardware)
    title = f"Raw samples per case — {hardware}, {run_label}"
    if samples.empty:
        return _empty(title, "no timed samples in this run")
    mask = samples["samples_us"].map(_has_samples)
    have, without = samples[mask], samples[~mask]
    if have.empty:
        return _empty(title, f"no timed samples in this run ({len(without)} cases without: failed before timing)")
    fig = go.Figure()
    lo, hi = math.inf, 0.0
    for row in have.itertuples(index=False):
        xs = [float(v) for v in row.samples_us]
        lo, hi = min(lo, min(xs)), max(hi, max(xs))
        med = float(pd.Series(xs).median())
        ys = [(v / med - 1.0) * 100 for v in xs] if relative else xs
        text = [f"{v:.2f} {US}" for v in xs]
        hover = f"{row.case}: %{{text}}<extra>{row.status}, median {med:.2f} {US}</extra>"
        fig.add_trace(
            go.Box(
                y=ys,
                name=row.case,
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                marker={"size": 3},
                marker_color=STATUS_COLORS.get(row.status, "#7f7f7f"),
                showlegend=False,
                text=text,
                hovertemplate=hover,
            )
        )
    fig.update_xaxes(title_text="case", type="category")
    missing = f"; no samples: {', '.join(map(str, without['case']))}" if not without.empty else ""
    if relative:
        fig.update_yaxes(title_text=f"deviation from the case median (%), {hardware}", zeroline=True)
        return _layout(fig, title, "each point one timed iteration of the kernel; hover for the latency" + missing)
    log = lo > 0 and hi / lo > 20
    fig.update_yaxes(title_text=_latency_axis(hardware), type="log" if log else "linear")
    return _layout(
        fig, title, "each point one timed iteration of the kernel" + ("; log scale" if log else "") + missing
    )
