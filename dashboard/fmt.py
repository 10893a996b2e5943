"""Plain formatting for the dashboard: numbers as text ("–" for a missing figure) and stored strings made safe.

Stored strings (commit, branch, host, messages, errors) come from result documents and git, so they are data,
never markup: ``md`` escapes them for the Markdown of ``st.markdown`` / ``st.caption`` / ``st.info`` (a branch
named ``![x](http://host/x.png)`` is shown as those characters, it does not make the viewer's browser fetch an
image), ``html`` escapes them for Plotly's text (which understands a few HTML tags).
"""

from __future__ import annotations

import html as _html
import math
import re
from typing import Any

DASH = "–"  # a figure that does not exist (a failed run has no SOL score, not 0 %)
_MD_SPECIAL = frozenset("\\`*_{}[]()<>#+-!|~$&=\"'^%,;?.:/@")
# Streamlit's Markdown turns URLs and e-mail addresses in text into links after escapes are undone (GFM autolink
# literals), so an invisible word joiner goes where those patterns would match: "http:⁠//", "www⁠.", "a⁠@b".
WORD_JOINER = "\u2060"
_AUTOLINK = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?=@)", re.IGNORECASE)


def missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v) or (isinstance(v, float) and math.isinf(v))  # NaN, NaT, pd.NA compare unequal
    except (TypeError, ValueError):  # pd.NA in a boolean context
        return True


def md(value: Any) -> str:
    """A stored string as literal text inside Markdown: ASCII punctuation backslash-escaped (no emphasis, link,
    image, HTML, code or LaTeX), a word joiner where a URL or e-mail address would become a link, line breaks as
    spaces."""
    text = " ".join(("" if missing(value) else str(value)).splitlines())
    text = _AUTOLINK.sub(WORD_JOINER, text)
    return "".join(f"\\{c}" if c in _MD_SPECIAL else c for c in text)


def code(value: Any) -> str:
    """A stored string as an inline code span inside Markdown: shown exactly as it is (no Markdown, HTML or
    link inside a code span); the fence is longer than any run of backticks in the string."""
    text = " ".join(("" if missing(value) else str(value)).splitlines()) or " "
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html(value: Any) -> str:
    """A stored string as literal text inside Plotly's text (hover, ticks)."""
    return _html.escape("" if missing(value) else str(value), quote=False)


def short(commit: Any, n: int = 10) -> str:
    return DASH if missing(commit) or not str(commit) else str(commit)[:n]


def us(v: Any, digits: int = 2) -> str:
    return DASH if missing(v) else f"{float(v):.{digits}f}"


def pct(v: Any, digits: int = 1) -> str:
    """A fraction as a percentage: 0.621 -> '62.1%'."""
    return DASH if missing(v) else f"{float(v) * 100:.{digits}f}%"


def signed_pct(v: Any, digits: int = 1) -> str:
    """A relative change: 0.031 -> '+3.1%'."""
    return DASH if missing(v) else f"{float(v) * 100:+.{digits}f}%"


def interval(change: Any, lo: Any, hi: Any) -> str:
    """'+3.1% [+2.0%, +4.2%]' (the change and its interval); the change alone without one."""
    if missing(change):
        return DASH
    if missing(lo) or missing(hi):
        return signed_pct(change)
    return f"{signed_pct(change)} [{signed_pct(lo)}, {signed_pct(hi)}]"


def ratio(v: Any) -> str:
    return DASH if missing(v) else f"{float(v):.2f}×"


def p_value(v: Any) -> str:
    """Two significant digits; '<0.0001' below that."""
    if missing(v):
        return DASH
    v = float(v)
    return "<0.0001" if v < 1e-4 else f"{v:.2g}"
