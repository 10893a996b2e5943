"""Start the dashboard's streamlit server with the page's heavy modules already imported.

    python -m dashboard.serve run dashboard/app.py [streamlit options]     (what `solci dashboard` runs)

The same as ``python -m streamlit``, except that pandas, plotly, DuckDB and the dashboard's data and chart
modules are imported, plotly's validators set up and the history's first reads made once, before the server
listens: streamlit imports a page's modules on its first visit, so the first visitor would otherwise wait a
second or two for them.
(``dashboard.views`` itself is left to the page: its caches belong to streamlit's runtime, which does not
exist yet.)
"""

from __future__ import annotations

import sys

import plotly.graph_objects as go
from streamlit.web import cli

from dashboard import charts, data
from storage.db import StorageError


def warm_up() -> None:
    """Build one small figure of each kind the page draws (the page's modules are imported above)."""
    x = ["a", "b"]
    fig = go.Figure(
        data=[
            {"type": "scatter", "x": x, "y": [1, 2], "customdata": [[1], [2]], "error_y": {"array": [1, 1]}},
            {"type": "scatter", "x": x, "y": [1, 2], "xaxis": "x2", "yaxis": "y2", "marker": {"symbol": ["x", "x"]}},
            {"type": "bar", "x": x, "y": [1, 2], "orientation": "v", "text": ["1", "2"]},
            {"type": "box", "y": [1, 2, 3], "boxpoints": "all"},
        ],
        layout={
            "xaxis": {"type": "category", "domain": [0, 0.4]},
            "xaxis2": {"domain": [0.6, 1], "anchor": "y2"},
            "yaxis2": {"anchor": "x2"},
            "shapes": [{"type": "line", "x0": "a", "x1": "a", "y0": 0, "y1": 1}],
            "annotations": [{"text": "a", "x": 0, "y": 1}],
            "title": {"text": "t", "subtitle": {"text": "s"}},
            "template": charts.TEMPLATE,
        },
    )
    fig.add_hline(y=1)
    fig.to_json()
    warm_history(data.history_location(None))


def warm_history(location: object) -> None:
    """Read what the page's first render reads (the series, the default selection's window and changes) once,
    so the first visitor finds the file's pages in the OS cache and the read path run once. Any storage error
    is left for the page to show."""
    try:
        db = data.open_db(location)  # type: ignore[arg-type]
        sel = data.default_selection(data.summary(db))
        if sel is not None:
            data.window(db, sel)
            data.changes(db, sel)
    except (StorageError, OSError):
        pass


def main() -> int:
    warm_up()
    sys.argv = ["streamlit", *sys.argv[1:]]
    return int(cli.main(prog_name="streamlit") or 0)


if __name__ == "__main__":
    sys.exit(main())
