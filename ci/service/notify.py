"""Notifications (``--notify URL`` / ``$SOLCI_NOTIFY``): one JSON POST when a job opens a step, fixes one, or
finds its commit broken; nothing for a pass, an improvement that fixes nothing, or an infrastructure failure.

The body is Slack-compatible (``text``: one line) and carries the verdict's summary as JSON (``solci``):

    {"text": "solci: REGRESSED 1a2b3c4d5e6f (main): 2/16 cases moved, suite +3.1% [+2.0%, +4.2%] <link>",
     "solci": {"event": "step_opened", "commit": ..., "branch": ..., "repo": ..., "job_id": ..., "run_id": ...,
               "outcome": ..., "verdict": ..., "message": ..., "cases_moved": ..., "n_cases": ...,
               "suite_change": ..., "suite_lo": ..., "suite_hi": ..., "step_id": ..., "step_status": ...,
               "fixed_steps": [...], "cases": [{"case", "change", "lo", "hi"}], "error_line": ..., "link": ...}}

Delivery never blocks or fails a job: each message is posted from a thread of its own, tried ``tries`` times
(default 3) with a short timeout each and a backoff between tries (1 s, then 2 s, then 4 s ...); a message that
every try failed is dropped with one line on the runner's terminal. The standard library only (urllib).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from storage import queries

NOTIFY_ENV = "SOLCI_NOTIFY"
DASHBOARD_URL_ENV = "SOLCI_DASHBOARD_URL"  # the link's base (the dashboard as the team reaches it); optional
BROKEN_OUTCOMES = frozenset({"incorrect", "build_failed", "crashed", "timed_out", "rejected", "quarantined"})


def notify_url() -> str | None:
    """``$SOLCI_NOTIFY`` (the default of ``--notify``), or None."""
    return (os.environ.get(NOTIFY_ENV) or "").strip() or None


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:+.1%}"


def summary(db: Any, report: Any) -> dict[str, Any] | None:
    """The notification of one finished job (``ci.service.runner.JobReport``) as a JSON-ready dict, or None
    when there is nothing to say: ``event`` is ``step_opened`` (a confirmed slowdown), ``step_fixed`` (a later
    step back closed an open one) or ``broken`` (build failed, crashed, timed out, incorrect, rejected,
    quarantined)."""
    v = queries.verdict(db, report.run_id) if report.run_id else None
    v = v or {}
    step_id = v.get("step_id")
    fixed: list[dict[str, Any]] = []
    if step_id:
        with db.read() as conn:
            rows = conn.execute('SELECT step_id, "commit" FROM steps WHERE fixed_by = ?', [step_id]).fetchall()
        fixed = [{"step_id": s, "commit": c} for s, c in rows]
    if report.outcome == "regressed":
        event = "step_opened"
    elif fixed:
        event = "step_fixed"
    elif report.outcome in BROKEN_OUTCOMES:
        event = "broken"
    else:
        return None
    step_status = None
    cases: list[dict[str, Any]] = []
    if step_id:
        with db.read() as conn:
            row = conn.execute("SELECT status FROM steps WHERE step_id = ?", [step_id]).fetchone()
        step_status = row[0] if row else None
        df = queries.step_cases(db, step_id)
        for rec in df.to_dict("records") if not df.empty else []:
            name = rec.get("case") or rec.get("case_name")
            cases.append({"case": name, **{k: _num(rec.get(k)) for k in ("change", "lo", "hi")}})
    n_cases = None
    if report.run_id:
        df = queries.run_cases(db, report.run_id)
        n_cases = None if df.empty else len(df)
    base = (os.environ.get(DASHBOARD_URL_ENV) or "").strip().rstrip("/")
    error_line = None
    if event == "broken":  # the measurement's last own line (the runner's lines start with [solci])
        own = [ln.strip() for ln in (report.log or "").splitlines() if ln.strip() and not ln.startswith("[solci]")]
        error_line = own[-1][:300] if own else None
    return {
        "event": event,
        "commit": report.commit,
        "branch": report.branch,
        "repo": report.repo,
        "job_id": report.job_id,
        "run_id": report.run_id,
        "outcome": report.outcome,
        "verdict": v.get("verdict") or report.verdict,
        "message": v.get("message") or report.message,
        "cases_moved": None if v.get("cases_moved") is None else int(v["cases_moved"]),
        "n_cases": n_cases,
        "suite_change": _num(v.get("suite_change")),
        "suite_lo": _num(v.get("suite_lo")),
        "suite_hi": _num(v.get("suite_hi")),
        "step_id": step_id,
        "step_status": step_status,
        "fixed_steps": fixed,
        "cases": cases,
        "error_line": error_line,
        "link": f"{base}/?commit={report.commit}" if base else None,
    }


def text(s: dict[str, Any]) -> str:
    """The one Slack-compatible line of a summary: verdict, commit, cases moved, suite change, link."""
    what = {"step_opened": "REGRESSED", "step_fixed": "FIXED", "broken": "BROKEN"}[s["event"]]
    line = f"solci: {what} {s['commit'][:12]}"
    if s.get("branch"):
        line += f" ({s['branch']})"
    if s["event"] == "broken":
        line += f": {s['outcome']}"
        detail = s.get("message") or s.get("error_line")
        if detail:
            line += f": {str(detail).splitlines()[0][:200]}"
    else:
        if s.get("cases_moved") is not None:
            line += f": {s['cases_moved']}/{s['n_cases'] or '?'} cases moved"
        if s.get("suite_change") is not None:
            line += f", suite {_pct(s['suite_change'])} [{_pct(s['suite_lo'])}, {_pct(s['suite_hi'])}]"
        if s["event"] == "step_fixed":
            line += ", fixes " + ", ".join(f["commit"][:12] for f in s["fixed_steps"])
        if s.get("step_id"):
            line += f"; step {s['step_id']} {s.get('step_status') or ''}".rstrip()
    if s.get("link"):
        line += f" <{s['link']}>"
    return line


def payload(s: dict[str, Any]) -> dict[str, Any]:
    """The POST body: ``{"text": <one line>, "solci": <the summary>}``."""
    return {"text": text(s), "solci": s}


class Notifier:
    """Posts payloads to ``url`` from background threads, ``tries`` times at most, ``timeout_s`` each, waiting
    ``backoff_s[i]`` (the last one repeated) after failed try i. ``attempts``, ``delivered`` and ``gave_up``
    count what happened; ``wait`` joins the messages in flight (bounded by their tries)."""

    def __init__(
        self,
        url: str,
        *,
        tries: int = 3,
        timeout_s: float = 5.0,
        backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0),
        say: Callable[[str], None] | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--notify: expected an http:// or https:// URL, got {url!r}")
        self.url = url
        self.tries = max(1, int(tries))
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s or (0.0,)
        self.say = say or (lambda _msg: None)
        self.attempts = 0
        self.delivered = 0
        self.gave_up = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def send(self, body: dict[str, Any]) -> threading.Thread:
        """Post ``body`` in the background; returns at once (the thread, for tests)."""
        data = json.dumps(body, default=str).encode()
        t = threading.Thread(target=self._deliver, args=(data,), name="solci-notify", daemon=False)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()
        return t

    def wait(self, timeout_s: float | None = None) -> None:
        """Join the messages in flight (each ends by itself after its tries)."""
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout_s)

    def _deliver(self, data: bytes) -> None:
        opener = urllib.request.build_opener()
        last = ""
        for i in range(self.tries):
            with self._lock:
                self.attempts += 1
            req = urllib.request.Request(
                self.url, data=data, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with opener.open(req, timeout=self.timeout_s) as resp:
                    resp.read(65536)
                with self._lock:
                    self.delivered += 1
                return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (OSError, ValueError) as exc:  # refused, unreachable, timed out
                last = f"{exc.__class__.__name__}: {exc}"
            if i + 1 < self.tries:
                time.sleep(self.backoff_s[min(i, len(self.backoff_s) - 1)])
        with self._lock:
            self.gave_up += 1
        self.say(f"notification to {self.url} not delivered after {self.tries} tries ({last}); dropped")
