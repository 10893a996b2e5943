"""Pure chart functions: DataFrames in, plotly Figures out (no storage, no streamlit).

Every figure is about ONE hardware label: its title and latency axis name it, and a frame holding another
label (column ``hardware``) is refused with ValueError. The one figure that shows other hardware, the
leaderboard comparison, compares only SOL scores (% of SOL), never microseconds.

Series run over commits in time order: the x axis is categorical, one tick per run, labelled with the short
commit (a commit measured twice gets a "#2" suffix), so the frames must come oldest first.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

SUITE = "__suite__"  # storage.schema.SUITE (kept here so the module stays free of storage imports)

COLORS = {
    "kernel": "#1f77b4",
    "band": "rgba(31, 119, 180, 0.18)",
    "eager": "#7f7f7f",
    "cublas": "#ff7f0e",
    "t_sol": "#2ca02c",
    "project": "#1f77b4",
    "published": "#b0b0b0",
}
FLAG_STYLE: dict[str, tuple[str, str, str]] = {  # kind -> (marker symbol, colour, legend name)
    "regression": ("triangle-up", "#d62728", "regression"),
    "improvement": ("triangle-down", "#2ca02c", "improvement"),
    "new_record": ("star", "#e6b800", "new record"),
    "incorrect": ("x", "#8b0000", "incorrect"),
    "error": ("x-open", "#9467bd", "error / timeout"),
}
STATUS_COLORS = {"pass": "#1f77b4", "incorrect": "#d62728", "error": "#9467bd", "timeout": "#9467bd"}
US = "µs"


# ------------------------------------------------------------------------------------------------ helpers
def check_one_hardware(df: pd.DataFrame | None, hardware: str) -> None:
    """ValueError when ``df`` holds rows of another hardware label than ``hardware``."""
    if df is None or df.empty or "hardware" not in df.columns:
        return
    others = sorted({str(h) for h in df["hardware"].dropna().unique()} - {hardware})
    if others:
        raise ValueError(f"a chart of {hardware!r} was given rows of {', '.join(others)}: never mix hardware")


def run_labels(df: pd.DataFrame) -> dict[str, str]:
    """run_id -> x label (short commit, '#2' for a repeat), in the frame's (time) order."""
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for run_id, commit in zip(df["run_id"], df["commit"], strict=True):
        if run_id in out:
            continue
        base = str(commit)[:8] if isinstance(commit, str) and commit else str(run_id)[:8]
        seen[base] = seen.get(base, 0) + 1
        out[run_id] = base if seen[base] == 1 else f"{base} #{seen[base]}"
    return out


def case_title(case: str) -> str:
    return "suite (geomean)" if case == SUITE else case


def _layout(fig: go.Figure, title: str, subtitle: str | None = None, *, height: int = 420) -> go.Figure:
    t: dict = {"text": title, "x": 0.0, "xanchor": "left"}
    if subtitle:
        t["subtitle"] = {"text": subtitle}
    fig.update_layout(
        title=t, height=height, template="plotly_white", hovermode="closest",
        margin={"l": 60, "r": 20, "t": 90 if subtitle else 60, "b": 50},
        legend={"orientation": "v", "yanchor": "top", "y": 1.0, "xanchor": "left", "x": 1.01,
                "traceorder": "normal"},
    )  # fmt: skip
    return fig


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, height=250)


def _fmt(v: object, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.{digits}f}"  # type: ignore[arg-type]


def _flag_markers(
    fig: go.Figure, flags: pd.DataFrame | None, case: str, labels: dict[str, str], y_of: dict[str, float],
    **trace_kw: object,
) -> None:  # fmt: skip
    """One marker trace per flag kind for ``case``, at the run's x and y (``y_of`` by run_id)."""
    if flags is None or flags.empty:
        return
    sub = flags[(flags["case"] == case) & flags["run_id"].isin(labels)]
    for kind, (symbol, color, name) in FLAG_STYLE.items():
        k = sub[sub["kind"] == kind]
        k = k[k["run_id"].map(lambda r: r in y_of and y_of[r] is not None and not pd.isna(y_of[r]))]
        if k.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=[labels[r] for r in k["run_id"]], y=[y_of[r] for r in k["run_id"]], mode="markers",
                name=name, marker={"symbol": symbol, "size": 14, "color": color, "line": {"width": 1}},
                text=list(k["message"]), hovertemplate="%{x}<br>%{text}<extra>" + name + "</extra>",
                legendgroup=f"flag-{kind}", **trace_kw,
            )
        )  # fmt: skip


def _step_lines(fig: go.Figure, steps: pd.DataFrame | None, case: str, labels: dict[str, str]) -> None:
    """A dotted vertical line at the first run after each change point, annotated with the change."""
    if steps is None or steps.empty:
        return
    for row in steps[(steps["case"] == case) & steps["run_id"].isin(labels)].itertuples(index=False):
        change = row.after_median / row.before_median - 1.0
        x = labels[row.run_id]
        fig.add_shape(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                      line={"dash": "dot", "width": 1.5, "color": "#d62728" if change > 0 else "#2ca02c"})  # fmt: skip
        fig.add_annotation(x=x, xref="x", y=1.0, yref="paper", text=f"step {change:+.1%}", showarrow=False,
                           yanchor="bottom", font={"size": 10})  # fmt: skip


def _reference(x: list, y: pd.Series, name: str, dash: str, color: str) -> go.Scatter:
    """A baseline's line over the runs (with markers when too few runs for a line to show)."""
    return go.Scatter(
        x=x, y=y, mode="lines" if len(x) > 2 else "lines+markers", name=name, line={"dash": dash, "color": color},
        hovertemplate="%{x}: %{y:.2f} " + US + "<extra>" + name + "</extra>",
    )  # fmt: skip


def _latency_axis(hardware: str) -> str:
    return f"latency ({US}), {hardware}"


# ------------------------------------------------------------------------------------------------ history
def case_history_figure(
    hist: pd.DataFrame, *, case: str, hardware: str, protocol: str = "", flags: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
) -> go.Figure:  # fmt: skip
    """Latency of one case over the runs (oldest first): the kernel's median with the p25-p75 band of its
    samples, eager and cuBLAS as reference lines, T_SOL, flag markers and change-point lines.

    ``hist``: queries.history rows (run_id, commit, branch, started_at, hardware, case, status, median_us,
    eager_us, cublas_us, t_sol_us), optionally q25_us, q75_us, min_us, max_us (dashboard.data.case_history)."""
    check_one_hardware(hist, hardware)
    title = f"{case_title(case)} latency — {hardware}"
    h = hist[hist["case"] == case] if not hist.empty else hist
    if h.empty:
        return _empty(title, f"no runs of {case} on {hardware}")
    labels = run_labels(h)
    x = [labels[r] for r in h["run_id"]]
    fig = go.Figure()
    if {"q25_us", "q75_us"} <= set(h.columns) and h["q25_us"].notna().any():
        fig.add_trace(go.Scatter(x=x, y=h["q75_us"], mode="lines", line={"width": 0}, showlegend=False,
                                 hoverinfo="skip", name="p75"))  # fmt: skip
        fig.add_trace(go.Scatter(x=x, y=h["q25_us"], mode="lines", line={"width": 0}, fill="tonexty",
                                 fillcolor=COLORS["band"], name="kernel p25–p75", hoverinfo="skip"))  # fmt: skip
    spread = [
        f"p25–p75 {_fmt(a)}–{_fmt(b)}, min {_fmt(c)}, max {_fmt(d)}"
        for a, b, c, d in zip(*(h[k] if k in h.columns else [None] * len(h) for k in ("q25_us", "q75_us",
                                                                                    "min_us", "max_us")),
                              strict=True)
    ]  # fmt: skip
    custom = list(zip(h["commit"].astype(str), h["branch"].fillna("").astype(str),
                      h["started_at"].astype(str), h["status"].astype(str), spread, strict=True))  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=x, y=h["median_us"], mode="lines+markers", name="kernel median", line={"color": COLORS["kernel"]},
            customdata=custom,
            hovertemplate=("%{customdata[0]} (%{customdata[1]})<br>%{customdata[2]}<br>median %{y:.2f} " + US
                           + "<br>%{customdata[4]}<br>status %{customdata[3]}<extra></extra>"),
        )
    )  # fmt: skip
    for key, name, dash in (("eager_us", "eager (PyTorch)", "dash"), ("cublas_us", "cuBLAS (2 GEMMs)", "dot")):
        if key in h.columns and h[key].notna().any():
            color = COLORS["eager" if key == "eager_us" else "cublas"]
            fig.add_trace(_reference(x, h[key], name, dash, color))
    if "t_sol_us" in h.columns and h["t_sol_us"].notna().any():
        t_sol = float(h["t_sol_us"].dropna().iloc[-1])
        fig.add_trace(go.Scatter(x=[x[0], x[-1]], y=[t_sol, t_sol], mode="lines", name=f"T_SOL {t_sol:.1f} {US}",
                                 line={"dash": "dashdot", "color": COLORS["t_sol"]}, hoverinfo="skip"))  # fmt: skip
    y_of = dict(zip(h["run_id"], h["median_us"].where(h["median_us"].notna(), h.get("eager_us")), strict=True))
    _flag_markers(fig, flags, case, labels, y_of)
    _step_lines(fig, steps, case, labels)
    fig.update_xaxes(title_text="commit (oldest → newest)", type="category")
    fig.update_yaxes(title_text=_latency_axis(hardware), rangemode="tozero")
    sub = f"protocol {protocol}; " if protocol else ""
    return _layout(fig, title, sub + "median of the timed iterations, band p25–p75 of the raw samples")


def suite_history_figure(
    runs: pd.DataFrame, *, hardware: str, protocol: str = "", flags: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None, t_sol_us: float | None = None,
) -> go.Figure:  # fmt: skip
    """Suite geometric mean over the runs (oldest first; queries.runs rows), eager and cuBLAS geomeans as
    reference lines, the geomean T_SOL, runs without a suite figure (a case failed) marked."""
    check_one_hardware(runs, hardware)
    title = f"Suite geometric mean — {hardware}"
    if runs.empty:
        return _empty(title, f"no runs on {hardware}")
    labels = run_labels(runs)
    x = [labels[r] for r in runs["run_id"]]
    fig = go.Figure()
    custom = list(zip(runs["commit"].astype(str), runs["branch"].fillna("").astype(str),
                      runs["started_at"].astype(str), runs["status"].astype(str),
                      (runs["score"] * 100).round(1).astype(str), strict=True))  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=x, y=runs["geomean_us"], mode="lines+markers", name="kernel geomean",
            line={"color": COLORS["kernel"], "width": 3}, customdata=custom,
            hovertemplate=("%{customdata[0]} (%{customdata[1]})<br>%{customdata[2]}<br>geomean %{y:.2f} " + US
                           + "<br>SOL score %{customdata[4]}%<br>status %{customdata[3]}<extra></extra>"),
        )
    )  # fmt: skip
    for key, name, dash in (("geomean_eager_us", "eager (PyTorch)", "dash"),
                            ("geomean_cublas_us", "cuBLAS (2 GEMMs)", "dot")):  # fmt: skip
        if runs[key].notna().any():
            color = COLORS["eager" if "eager" in key else "cublas"]
            fig.add_trace(_reference(x, runs[key], name, dash, color))
    if t_sol_us:
        fig.add_trace(go.Scatter(x=[x[0], x[-1]], y=[t_sol_us, t_sol_us], mode="lines",
                                 name=f"T_SOL geomean {t_sol_us:.1f} {US}",
                                 line={"dash": "dashdot", "color": COLORS["t_sol"]}, hoverinfo="skip"))  # fmt: skip
    anchor = runs["geomean_us"].ffill().fillna(runs["geomean_cublas_us"]).fillna(runs["geomean_eager_us"])
    y_of = dict(zip(runs["run_id"], anchor, strict=True))
    failed = runs[(runs["status"] != "pass") & anchor.notna()]
    if not failed.empty:
        fig.add_trace(go.Scatter(
            x=[labels[r] for r in failed["run_id"]], y=[y_of[r] for r in failed["run_id"]], mode="markers",
            name="run failed (no suite figure)", marker={"symbol": "x", "size": 14, "color": "#8b0000"},
            text=[f"{s}: {p}/{n} cases passed" for s, p, n in zip(failed["status"], failed["n_pass"],
                                                                  failed["n_cases"], strict=True)],
            hovertemplate="%{x}<br>%{text}<extra></extra>",
        ))  # fmt: skip
    _flag_markers(fig, flags, SUITE, labels, y_of)
    _step_lines(fig, steps, SUITE, labels)
    fig.update_xaxes(title_text="commit (oldest → newest)", type="category")
    fig.update_yaxes(title_text=f"geomean {_latency_axis(hardware)}", rangemode="tozero")
    sub = f"protocol {protocol}; " if protocol else ""
    return _layout(fig, title, sub + "geometric mean of the per-case medians (passing runs)")


def case_grid_figure(
    hist: pd.DataFrame, *, hardware: str, protocol: str = "", flags: pd.DataFrame | None = None,
    columns: int = 4,
) -> go.Figure:  # fmt: skip
    """Small multiples: every case's median (and eager) over the runs, flags marked, each with its own y axis."""
    check_one_hardware(hist, hardware)
    title = f"All cases — {hardware}"
    if hist.empty:
        return _empty(title, f"no runs on {hardware}")
    order = hist.drop_duplicates("case").sort_values(["m", "case"])["case"].tolist()
    rows = math.ceil(len(order) / columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=order, vertical_spacing=0.5 / max(rows, 1) / 2,
                        horizontal_spacing=0.05)  # fmt: skip
    labels = run_labels(hist)
    shown: set[str] = set()
    for i, case in enumerate(order):
        r, c = i // columns + 1, i % columns + 1
        h = hist[hist["case"] == case]
        x = [labels[q] for q in h["run_id"]]
        lines = (("median_us", "kernel median", {"color": COLORS["kernel"]}),
                 ("eager_us", "eager (PyTorch)", {"color": COLORS["eager"], "dash": "dash"}))  # fmt: skip
        for key, name, style in lines:
            if key not in h.columns or not h[key].notna().any():
                continue
            fig.add_trace(go.Scatter(x=x, y=h[key], mode="lines", name=name, line=style, legendgroup=name,
                                     showlegend=name not in shown,
                                     hovertemplate=f"{case}<br>%{{x}}: %{{y:.2f}} {US}<extra>{name}</extra>"),
                          row=r, col=c)  # fmt: skip
            shown.add(name)
        y_of = dict(zip(h["run_id"], h["median_us"].where(h["median_us"].notna(), h.get("eager_us")), strict=True))
        before = len(fig.data)
        _flag_markers(fig, flags, case, {q: labels[q] for q in h["run_id"]}, y_of)
        for tr in fig.data[before:]:
            tr.update(xaxis=f"x{i + 1}" if i else "x", yaxis=f"y{i + 1}" if i else "y",
                      showlegend=tr.legendgroup not in shown, marker_size=9)  # fmt: skip
            shown.add(tr.legendgroup)
    fig.update_xaxes(type="category", showticklabels=False)
    fig.update_yaxes(rangemode="tozero", tickfont={"size": 9})
    fig.update_yaxes(title_text=f"{US}, {hardware}", col=1)
    sub = f"protocol {protocol}; " if protocol else ""
    return _layout(fig, title, sub + "kernel median per run; hover for the commit", height=max(300, 230 * rows))


# ------------------------------------------------------------------------------------------------ SOL
def sol_scores_figure(cases: pd.DataFrame, *, hardware: str, run_label: str) -> go.Figure:
    """The SOL score per case of one run as bars (% of SOL): 50% is the eager baseline, 100% is T_SOL.

    ``cases``: rows with case, status, score (0..1), median_us, t_sol_us (queries.run_cases)."""
    check_one_hardware(cases, hardware)
    title = f"SOL score per case — {hardware}, {run_label}"
    if cases.empty or not cases["score"].notna().any():
        return _empty(title, f"no SOL score on {hardware} (no peak-rate model for it)")
    pct = cases["score"] * 100
    fig = go.Figure(
        go.Bar(
            x=cases["case"], y=pct, name="SOL score",
            marker_color=[STATUS_COLORS.get(s, "#7f7f7f") for s in cases["status"]],
            text=[("-" if pd.isna(p) else f"{p:.0f}%") for p in pct], textposition="outside",
            customdata=list(zip(cases["status"], cases["median_us"], cases["t_sol_us"], strict=True)),
            hovertemplate=("%{x}: %{y:.1f}% of SOL<br>median %{customdata[1]:.2f} " + US + ", T_SOL "
                           + "%{customdata[2]:.2f} " + US + "<br>status %{customdata[0]}<extra></extra>"),
        )
    )  # fmt: skip
    fig.add_hline(y=50, line={"dash": "dash", "color": COLORS["eager"]}, annotation_text="eager baseline (50%)",
                  annotation_position="top left")  # fmt: skip
    fig.add_hline(y=100, line={"dash": "dashdot", "color": COLORS["t_sol"]}, annotation_text="T_SOL (100%)",
                  annotation_position="top left")  # fmt: skip
    fig.update_xaxes(title_text="case (ordered by M = B·S)", type="category")
    fig.update_yaxes(title_text=f"% of SOL, {hardware}", range=[0, 112])
    return _layout(fig, title, "S = 1 / (1 + (T_k − T_SOL) / (T_b − T_SOL)), T_b = this run's eager; failed = 0")


def sol_latency_figure(cases: pd.DataFrame, *, hardware: str, run_label: str) -> go.Figure:
    """Per case of one run: the kernel's median next to T_SOL, cuBLAS and eager (µs, same hardware)."""
    check_one_hardware(cases, hardware)
    title = f"Latency vs SOL per case — {hardware}, {run_label}"
    if cases.empty:
        return _empty(title, "no cases")
    fig = go.Figure()
    for key, name, color in (("median_us", "kernel median", COLORS["kernel"]), ("t_sol_us", "T_SOL", COLORS["t_sol"]),
                             ("cublas_us", "cuBLAS (2 GEMMs)", COLORS["cublas"]),
                             ("eager_us", "eager (PyTorch)", COLORS["eager"])):  # fmt: skip
        if key in cases.columns and cases[key].notna().any():
            fig.add_trace(go.Bar(x=cases["case"], y=cases[key], name=name, marker_color=color,
                                 hovertemplate="%{x}: %{y:.2f} " + US + "<extra>" + name + "</extra>"))  # fmt: skip
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="case (ordered by M = B·S)", type="category")
    fig.update_yaxes(title_text=_latency_axis(hardware))
    return _layout(fig, title, "T_SOL = max(FLOPs / peak bf16 rate, bytes / DRAM bandwidth) of this GPU model")


def records_figure(published: pd.DataFrame, *, hardware: str, project_score: float | None, run_label: str) -> go.Figure:
    """The suite SOL score (% of SOL) of this run next to the published B200 leaderboard. Only the score is
    compared: the leaderboard's latencies are B200 microseconds and appear in hover text only."""
    title = f"Suite SOL score: {hardware} vs the B200 leaderboard"
    names: list[str] = []
    pcts: list[float] = []
    colors: list[str] = []
    hover: list[str] = []
    for row in published.itertuples(index=False):
        names.append(f"#{int(row.rank)} {row.implementation} (B200)")
        pcts.append(float(row.pct_sol))
        colors.append(COLORS["published"])
        hover.append(f"B200 leaderboard, observed {str(row.observed_at)[:10]}")
    if project_score is not None and not pd.isna(project_score):
        names.append(f"this run {run_label} ({hardware})")
        pcts.append(float(project_score) * 100)
        colors.append(COLORS["project"])
        hover.append(f"{hardware}, T_b = the run's eager PyTorch")
    if not names:
        return _empty(title, "no leaderboard rows and no score")
    order = sorted(range(len(names)), key=lambda i: (pcts[i], -i))  # bottom to top; ties: better rank on top
    fig = go.Figure(
        go.Bar(
            y=[names[i] for i in order], x=[pcts[i] for i in order], orientation="h",
            marker_color=[colors[i] for i in order], text=[f"{pcts[i]:.0f}%" for i in order],
            textposition="outside", customdata=[hover[i] for i in order],
            hovertemplate="%{y}: %{x:.1f}% of SOL<br>%{customdata}<extra></extra>", name="% of SOL",
        )
    )  # fmt: skip
    fig.add_vline(x=50, line={"dash": "dash", "color": COLORS["eager"]})
    fig.update_xaxes(title_text="% of SOL (mean SOL score × 100; comparable across GPUs)", range=[0, 105])
    fig.update_yaxes(title_text="")
    return _layout(fig, title, "compared only through the SOL score; B200 and " + hardware
                   + " latencies (µs) are never compared", height=max(320, 30 * len(names) + 140))  # fmt: skip


# ------------------------------------------------------------------------------------------------ one run
def samples_figure(samples: pd.DataFrame, *, hardware: str, run_label: str, relative: bool = True) -> go.Figure:
    """The raw kernel samples of one run (queries.run_samples rows): a box with every point per case.

    ``relative``: each sample as its deviation from the case's median (%), so the spread of small and large
    cases reads on one axis; otherwise latencies (log axis when they span more than 20x)."""
    check_one_hardware(samples, hardware)
    title = f"Raw samples per case — {hardware}, {run_label}"
    have = samples[samples["samples_us"].map(lambda s: s is not None and len(s) > 0)] if not samples.empty else samples
    if have.empty:
        return _empty(title, "no timed samples in this run")
    fig = go.Figure()
    lo, hi = math.inf, 0.0
    for row in have.itertuples(index=False):
        xs = [float(v) for v in row.samples_us]
        lo, hi = min(lo, min(xs)), max(hi, max(xs))
        med = float(pd.Series(xs).median())
        ys = [(v / med - 1.0) * 100 for v in xs] if relative else xs
        text = [f"{v:.2f} {US}" for v in xs]
        hover = f"{row.case}: %{{text}}<extra>{row.status}, median {med:.2f} {US}</extra>"
        fig.add_trace(go.Box(y=ys, name=row.case, boxpoints="all", jitter=0.4, pointpos=0, marker={"size": 3},
                             marker_color=STATUS_COLORS.get(row.status, "#7f7f7f"), showlegend=False, text=text,
                             hovertemplate=hover))  # fmt: skip
    fig.update_xaxes(title_text="case", type="category")
    if relative:
        fig.update_yaxes(title_text=f"deviation from the case median (%), {hardware}", zeroline=True)
        return _layout(fig, title, "each point one timed iteration of the kernel; hover for the latency")
    log = lo > 0 and hi / lo > 20
    fig.update_yaxes(title_text=_latency_axis(hardware), type="log" if log else "linear")
    return _layout(fig, title, "each point one timed iteration of the kernel" + ("; log scale" if log else ""))
