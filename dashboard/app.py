"""The solci dashboard.

    streamlit run dashboard/app.py [-- --db PATH]       (or: solci dashboard [--db PATH] [--port 8501])

The history file: ``--db`` after ``--``, else ``$SOLCI_DB``, else ``./.solci/history.duckdb``. The page only
reads (read-only connections, opened per query and closed at once, retried while a runner writes); a storage
error (locked too long, corrupt, newer schema) is shown in an error box.
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

from dashboard import views
from storage.db import StorageError, default_db_path


def db_path(argv: list[str]) -> Path:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db")
    args, _ = parser.parse_known_args(argv)
    return Path(args.db).expanduser() if args.db else default_db_path()


def main() -> None:
    st.set_page_config(page_title="solci: kernel regression CI", page_icon="⚡", layout="wide")
    path = db_path(sys.argv[1:])
    try:
        views.render(path)
    except StorageError as exc:
        st.error(f"Cannot read the history database `{path}`:\n\n{exc}")
        st.caption("The dashboard retries while a runner holds the file; use the Refresh button to try again.")
        if st.button("Refresh", key="refresh-after-error"):
            st.rerun()


main()
