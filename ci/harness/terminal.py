"""Text from a commit or a log, made safe to print: control characters shown as escapes (issue 19).

An error text or a log line comes from the measured commit; printed raw, its terminal control sequences can
move the cursor and rewrite what is on screen (a crashed commit read PASSED). ``visible`` keeps newlines and
tabs and shows every other control character (C0, DEL, C1, and the bidirectional and zero-width formatting
characters) as a ``\\xNN`` / ``\\uNNNN`` escape."""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """``text`` (made a string) with control characters other than newline and tab shown as escapes."""
    return _CONTROL.sub(_escape, str(text))
