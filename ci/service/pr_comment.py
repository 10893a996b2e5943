"""A pull request's report as ONE comment on it, updated in place (``solci comment``; the workflow's comment job).

The body joins the report files (one per GPU model) under a hidden marker line (``MARKER``) and stays under
GitHub's limit of 65,536 characters (a longer one is cut at a line, with a line saying so). The pull request's
issue comments are listed (``Link: rel="next"`` followed, on the API's own host only); the first comment that
starts with the marker is PATCHed, else a new one is POSTed. A 5xx, a 429 or a connection error is retried a few
times with a short backoff (the whole look-up again, so a POST whose answer was lost is never made twice); any
other answer is a ``GitHubError`` at once. The standard library only (urllib, json).
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MARKER = "<!-- solci-report -->"
MAX_BODY = 65536  # GitHub's limit on a comment's body, in characters
DEFAULT_API_URL = "https://api.github.com"
TOKEN_ENV = "GITHUB_TOKEN"
API_URL_ENV = "GITHUB_API_URL"
SEPARATOR = "\n\n---\n\n"  # between the reports of two GPU models
MAX_PAGES = 100  # 100 comments a page: a pull request with more than 10,000 comments is refused
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_LINK = re.compile(r'<([^>]*)>\s*;\s*rel="([^"]*)"')


class GitHubError(Exception):
    """The API could not be reached, or answered an error (the command's exit 4: infrastructure)."""

    def __init__(self, message: str, *, status: int | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


@dataclass(frozen=True)
class Posted:
    """What ``post_report`` did: ``created`` or ``updated`` the comment ``comment_id`` (its page: ``url``)."""

    action: str
    comment_id: int
    url: str


def _units(text: str) -> int:
    """The length GitHub may count: UTF-16 code units (a character outside the BMP counts twice)."""
    return len(text.encode("utf-16-le")) // 2


def compose(reports: Sequence[str], *, limit: int = MAX_BODY) -> tuple[str, bool]:
    """The comment's body: the marker line, then the reports (each stripped) separated by a rule; cut at a line
    when it would exceed ``limit`` characters, an open code fence closed and a line saying so appended.
    Returns the body and whether it was cut."""
    parts = [r.strip() or "_(an empty report)_" for r in reports] or ["_(no report)_"]
    body = MARKER + "\n" + SEPARATOR.join(parts) + "\n"
    if _units(body) <= limit:
        return body, False
    note = (
        f"\n\n**Truncated**: the report is {_units(body):,} characters, over GitHub's limit of {limit:,} for a "
        "comment; the whole report is in the run's job summary and its artifacts.\n"
    )
    budget = limit - _units(note) - len("```\n")
    if budget <= len(MARKER) + 1:
        raise ValueError(f"a comment limit of {limit} characters leaves no room for a report")
    cut = body[:budget]
    while _units(cut) > budget:  # a character outside the BMP counts twice: drop one character per extra unit
        cut = cut[: len(cut) - (_units(cut) - budget)]
    newline = cut.rfind("\n")
    if newline > len(MARKER):
        cut = cut[: newline + 1]
    if cut.count("```") % 2:  # cut inside a code block: close it, or the note would read as code
        cut += "```\n"
    return cut + note, True


def check_repo(repo: str) -> str:
    """``OWNER/NAME`` as given, or ValueError (a bad value: exit 2)."""
    if not _REPO.match(repo or ""):
        raise ValueError(f"--repo: expected OWNER/NAME, got {repo!r}")
    return repo


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer of its own (the token is never sent on to another address)."""

    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None


def _one_line(text: str, cap: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= cap else line[: cap - 1] + "…"


def _api_message(raw: bytes) -> str:
    """The ``message`` of a GitHub error body, else the start of the body."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return _one_line(raw.decode("utf-8", "replace"), 200)
    if isinstance(doc, dict) and doc.get("message"):
        return _one_line(str(doc["message"]), 200)
    return ""


def next_link(header: str | None) -> str | None:
    """The ``rel="next"`` address of a ``Link`` header, or None."""
    for url, rels in _LINK.findall(header or ""):
        if "next" in rels.split():
            return url
    return None


class GitHubClient:
    """A small client of GitHub's REST API at ``api_url`` with ``token``: each request is one try
    (``timeout_s``); ``post_report`` makes ``tries`` tries of the whole update, sleeping ``backoff_s[i]`` (the last
    one repeated) after failed try i with ``sleep`` (injectable: tests do not wait)."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        tries: int = 3,
        timeout_s: float = 15.0,
        backoff_s: tuple[float, ...] = (1.0, 3.0),
        sleep: Callable[[float], None] = time.sleep,
        user_agent: str = "solci",
    ) -> None:
        api_url = (api_url or "").strip().rstrip("/")
        if not api_url.startswith(("http://", "https://")):
            raise ValueError(f"--api-url: expected an http:// or https:// URL, got {api_url!r}")
        if not token:
            raise ValueError(f"${TOKEN_ENV} is empty: a token that may comment on the pull request is needed")
        self.api_url = api_url
        self._origin = urllib.parse.urlsplit(api_url)[:2]
        self._token = token
        self.tries = max(1, int(tries))
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s or (0.0,)
        self.sleep = sleep
        self.user_agent = user_agent
        self._opener = urllib.request.build_opener(_NoRedirect)

    def request(self, method: str, url: str, payload: dict[str, Any] | None = None) -> tuple[Any, str | None]:
        """One request to ``url`` (an API path, or an address on the API's own host): the decoded JSON answer
        and its ``Link`` header. GitHubError otherwise (``transient`` for a 5xx, a 429 or no connection)."""
        if url.startswith("/"):
            url = self.api_url + url
        if urllib.parse.urlsplit(url)[:2] != self._origin:
            raise GitHubError(f"GitHub API: refusing to send the token to {_one_line(url, 120)} (not {self.api_url})")
        what = f"{method} {urllib.parse.urlsplit(url).path}"
        data = None if payload is None else json.dumps(payload).encode()
        headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self._token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": self.user_agent,
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
                link = resp.headers.get("Link")
        except urllib.error.HTTPError as exc:
            with exc:
                detail = _api_message(exc.read(4096) or b"")
            status = exc.code
            msg = f"GitHub API answered {status} {exc.reason} to {what}" + (f": {detail}" if detail else "")
            if status == 401:
                msg += f" (the token in ${TOKEN_ENV} was refused)"
            elif status == 403:
                msg += " (the token lacks pull-requests: write; a fork's pull request gets a read-only one)"
            raise GitHubError(msg, status=status, transient=status >= 500 or status == 429) from None
        except (OSError, http.client.HTTPException) as exc:  # refused, unreachable, timed out, cut off
            reason = getattr(exc, "reason", None) or exc
            raise GitHubError(
                f"GitHub API unreachable at {self.api_url} ({what}): {_one_line(str(reason), 200)}", transient=True
            ) from None
        try:
            return (json.loads(raw) if raw.strip() else None), link
        except ValueError:
            raise GitHubError(f"GitHub API answered {what} with something other than JSON") from None

    def comments(self, repo: str, pr: int) -> list[dict[str, Any]]:
        """Every issue comment of pull request ``pr`` of ``repo``, oldest first (all pages)."""
        url: str | None = f"/repos/{_path(repo)}/issues/{int(pr)}/comments?per_page=100"
        out: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            if url is None:
                return out
            page, link = self.request("GET", url)
            if not isinstance(page, list):
                raise GitHubError(f"GitHub API: the comments of {repo}#{pr} are not a list")
            out.extend(c for c in page if isinstance(c, dict))
            url = next_link(link)
        raise GitHubError(f"GitHub API: {repo}#{pr} has more than {MAX_PAGES} pages of comments")


def _path(repo: str) -> str:
    owner, name = check_repo(repo).split("/")
    return f"{urllib.parse.quote(owner, safe='')}/{urllib.parse.quote(name, safe='')}"


def find_marked(comments: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first comment whose body starts with the marker (a quote of it in someone's reply does not)."""
    for c in comments:
        if str(c.get("body") or "").lstrip().startswith(MARKER) and isinstance(c.get("id"), int):
            return c
    return None


def _update_once(client: GitHubClient, repo: str, pr: int, body: str) -> Posted:
    mine = find_marked(client.comments(repo, pr))
    if mine is not None:
        doc, _ = client.request("PATCH", f"/repos/{_path(repo)}/issues/comments/{mine['id']}", {"body": body})
        action = "updated"
    else:
        doc, _ = client.request("POST", f"/repos/{_path(repo)}/issues/{int(pr)}/comments", {"body": body})
        action = "created"
    doc = doc if isinstance(doc, dict) else {}
    comment_id = doc.get("id", mine["id"] if mine else 0)
    return Posted(action, int(comment_id), str(doc.get("html_url") or ""))


def post_report(client: GitHubClient, repo: str, pr: int, body: str) -> Posted:
    """Make ``body`` the pull request's one solci comment: update the marked comment, or create it. Transient
    failures are retried (``client.tries``, with backoff); GitHubError when every try failed or the API refused."""
    check_repo(repo)
    if pr < 1:
        raise ValueError(f"--pr: expected a pull request number, got {pr}")
    for i in range(client.tries):
        try:
            return _update_once(client, repo, pr, body)
        except GitHubError as exc:
            if not exc.transient or i + 1 == client.tries:
                if exc.transient and client.tries > 1:
                    raise GitHubError(f"{exc} ({client.tries} tries)", status=exc.status) from None
                raise
        client.sleep(client.backoff_s[min(i, len(client.backoff_s) - 1)])
    raise AssertionError("unreachable")  # the loop returns or raises
