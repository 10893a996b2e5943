"""The solci dashboard.

    streamlit run dashboard/app.py [-- --db PATH]       (or: solci dashboard [--db PATH] [--port 8501])

The history file: ``--db`` after ``--``, else ``$SOLCI_DB``, else ``./.solci/history.duckdb``. The page only
reads (read-only connections, opened per query and closed at once, retried while a runner writes) and never
creates a history: a missing file, like any storage error (locked too long, corrupt, newer schema), is shown in
an error box.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    import dashboard  # noqa: F401  (installed, or run from the project root)
except ImportError:  # `streamlit run dashboard/app.py` from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from dashboard import data, fmt, views
from storage.db import HistoryMissingError, StorageError


def db_path(argv: list[str]) -> str | Path:
    """``--db`` after ``--``, else ``$SOLCI_DB``, else ``./.solci/history.duckdb`` (a path, or a lake spec)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db")
    args, _ = parser.parse_known_args(argv)
    return data.history_location(args.db)


def main() -> None:
    st.set_page_config(page_title="solci: kernel regression CI", page_icon="⚡", layout="wide")
    path = db_path(sys.argv[1:])
    try:
        views.render(path)
    except HistoryMissingError as exc:
        st.error(f"No history at this path; nothing was created.\n\n{fmt.md(exc)}")
        st.caption(
            "Measure a commit first (`solci up`, `solci run`), or serve an existing history: "
            "`solci dashboard --db PATH`."
        )
    except StorageError as exc:
        st.error(f"Cannot read the history database:\n\n{fmt.md(exc)}")
        st.caption("The dashboard retries while a runner holds the file; use the Refresh button to try again.")
        if st.button("Refresh", key="refresh-after-error"):
            st.rerun()


main()
