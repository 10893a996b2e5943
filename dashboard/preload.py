"""Fetch the charting library while the browser is idle, so the first tab with charts does not wait for it.

Streamlit loads plotly.js (4.7 MB of JavaScript, about a second to load and set up in a browser, more for its
first chart) the first time a page draws a plotly chart. ``mount()`` adds an empty component to the page whose
script, a second after the first render and once the browser is idle, imports that same module (so Streamlit's
own import of it later resolves at once) and draws one chart off screen, shaped like the History tab's, then
drops it. Only the library comes in: no data, no stored string. ``window.__solciChartsPreload`` says where it is
("loading", "done" or "failed"; scripts/bench_dashboard.py waits for it). If this Streamlit's static files hold
no plotly chunk, nothing is mounted.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

CHUNK = next(iter(sorted((Path(st.__file__).parent / "static" / "static" / "js").glob("PlotlyChart.*.js"))), None)
JS = """
export default function (component) {
  const chunk = component.data && component.data.chunk;
  if (!chunk || window.__solciChartsPreload) return;
  window.__solciChartsPreload = "loading";
  // plotly.js's first chart also sets it up (styles, fonts, code paths): draw one off screen, then drop it
  const warm = async () => {
    const P = window.Plotly;
    if (!P || !P.newPlot) return;
    const div = document.createElement("div");
    div.style.cssText = "position:absolute;left:-10000px;top:0;width:1400px;height:1000px";
    document.body.appendChild(div);
    // a chart shaped like the History tab's (16 panels of 200 runs on category axes, markers, error bars, a
    // box, bars, lines and notes), so the code paths those charts take are warm too
    const x = Array.from({ length: 200 }, (_, i) => "c" + i);
    const y = x.map((_, i) => 1 + (i % 7));
    const data = [], layout = { shapes: [], annotations: [], template: "plotly_white", title: { text: "warm-up" } };
    for (let i = 0; i < 16; i++) {
      const n = i ? String(i + 1) : "", r = Math.floor(i / 4), c = i % 4;
      layout["xaxis" + n] = { type: "category", domain: [c * 0.25, c * 0.25 + 0.2], anchor: "y" + n, nticks: 3 };
      layout["yaxis" + n] = { domain: [1 - (r + 1) * 0.25, 1 - r * 0.25 - 0.05], anchor: "x" + n };
      data.push({ type: "scatter", mode: "lines", x, y, xaxis: "x" + n, yaxis: "y" + n, hovertemplate: "%{x}" });
      layout.shapes.push({ type: "line", xref: "x" + n, yref: "y" + n + " domain", x0: "c9", x1: "c9", y0: 0, y1: 1 });
      layout.annotations.push({ text: "p" + i, x: c * 0.25, y: 1 - r * 0.25, xref: "paper", yref: "paper" });
    }
    const few = y.slice(0, 9);
    data.push({ type: "scatter", mode: "markers", x: x.slice(0, 9), y: few, error_y: { array: few } });
    data.push({ type: "bar", x: x.slice(0, 16), y: y.slice(0, 16), text: y.slice(0, 16).map(String) });
    data.push({ type: "box", y, boxpoints: "all" });
    try {
      await P.newPlot(div, data, layout, { displayModeBar: false });
      P.purge(div);
    } finally {
      div.remove();
    }
  };
  const load = () => import(new URL(chunk, document.baseURI).href)
    .then(warm)
    .then(() => { window.__solciChartsPreload = "done"; }, () => { window.__solciChartsPreload = "failed"; });
  // after the first render has settled (a second later, when the browser is idle): never in its way
  const idle = () => (window.requestIdleCallback ? window.requestIdleCallback(load, { timeout: 3000 }) : load());
  window.setTimeout(idle, 1000);
}
"""
_component = st.components.v2.component("solci_chart_preload", js=JS) if CHUNK is not None else None


def mount() -> None:
    """The (invisible) preloading component, once per page run."""
    if _component is not None and CHUNK is not None:
        _component(data={"chunk": f"static/js/{CHUNK.name}"}, key="chart-preload")
