"""A stand-in for GitHub's REST endpoints of a pull request's comments, on the loopback interface (``http.server``
in a thread): what ``solci comment`` and the workflow's comment job are tested against.

    GET   /repos/{owner}/{repo}/issues/{n}/comments?per_page=&page=   paginated, with a Link: rel="next" header
    POST  /repos/{owner}/{repo}/issues/{n}/comments                   {"body": ...} -> 201, the new comment
    PATCH /repos/{owner}/{repo}/issues/comments/{id}                  {"body": ...} -> 200, the comment

Every request must carry ``Authorization: Bearer <token>`` (else 401, as GitHub answers a bad token);
``forbid`` answers 403 to writes (a fork's read-only token); ``answers`` are status codes given to the next
requests in turn instead of serving them (a 5xx GitHub sometimes answers); ``lose_answer`` makes the next write
happen but answers it 502 (an answer lost on the way). ``requests`` records (method, path and query, auth).
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_COMMENTS = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)/comments$")
_COMMENT = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/comments/(\d+)$")


class FakeGitHub:
    """The stand-in server (``url``: its API base); ``comments[(owner/repo, n)]``: each pull request's comments."""

    def __init__(self, token: str = "t0ken", *, bot: str = "github-actions[bot]") -> None:
        self.token = token
        self.bot = bot
        self.comments: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.answers: list[int] = []
        self.forbid = False
        self.lose_answer = False
        self.link_host: str | None = None  # a Link: next to another host (the token must not follow it)
        self._next_id = 1000
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def do_PATCH(self) -> None:
                fake._handle(self, "PATCH")

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, repo: str, pr: int, body: str, *, user: str = "someone") -> dict[str, Any]:
        """A comment made by someone (the tests' other people)."""
        with self._lock:
            self._next_id += 1
            c = {"id": self._next_id, "body": body, "user": {"login": user}, "html_url": self._html(repo, pr)}
            c["html_url"] += f"#issuecomment-{c['id']}"
            self.comments.setdefault((repo, pr), []).append(c)
            return c

    def marked(self, repo: str, pr: int, marker: str) -> list[dict[str, Any]]:
        return [c for c in self.comments.get((repo, pr), []) if c["body"].startswith(marker)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _html(self, repo: str, pr: int) -> str:
        return f"https://github.example/{repo}/pull/{pr}"

    def _send(self, h: BaseHTTPRequestHandler, code: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(doc).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        auth = h.headers.get("Authorization")
        self.requests.append((method, h.path, auth))
        length = int(h.headers.get("Content-Length") or 0)
        payload = json.loads(h.rfile.read(length)) if length else None
        if self.answers:
            code = self.answers.pop(0)
            return self._send(h, code, {"message": f"stand-in answer {code}"})
        if auth != f"Bearer {self.token}":
            return self._send(h, 401, {"message": "Bad credentials"})
        url = urllib.parse.urlsplit(h.path)
        query = urllib.parse.parse_qs(url.query)
        if m := _COMMENTS.match(url.path):
            repo, pr = f"{m[1]}/{m[2]}", int(m[3])
            if method == "GET":
                return self._list(h, repo, pr, query)
            if method == "POST":
                return self._write(h, repo, pr, None, payload)
        if (m := _COMMENT.match(url.path)) and method == "PATCH":
            return self._write(h, f"{m[1]}/{m[2]}", None, int(m[3]), payload)
        return self._send(h, 404, {"message": "Not Found"})

    def _list(self, h: BaseHTTPRequestHandler, repo: str, pr: int, query: dict[str, list[str]]) -> None:
        per_page = min(int(query.get("per_page", ["30"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        with self._lock:
            items = list(self.comments.get((repo, pr), []))
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            host = self.link_host or self.url
            nxt = f"{host}/repos/{repo}/issues/{pr}/comments?per_page={per_page}&page={page + 1}"
            headers["Link"] = f'<{nxt}>; rel="next", <{host}/repos/{repo}/issues/{pr}/comments?page=99>; rel="last"'
        self._send(h, 200, chunk, headers)

    def _write(
        self, h: BaseHTTPRequestHandler, repo: str, pr: int | None, cid: int | None, payload: dict | None
    ) -> None:
        if self.forbid:
            return self._send(h, 403, {"message": "Resource not accessible by integration"})
        body = (payload or {}).get("body")
        if not isinstance(body, str) or not body:
            return self._send(h, 422, {"message": "Validation Failed"})
        if len(body) > 65536:
            return self._send(h, 422, {"message": "Body is too long (maximum is 65536 characters)"})
        with self._lock:
            if cid is None:
                assert pr is not None
                self._next_id += 1
                c = {"id": self._next_id, "body": body, "user": {"login": self.bot}}
                c["html_url"] = f"{self._html(repo, pr)}#issuecomment-{c['id']}"
                self.comments.setdefault((repo, pr), []).append(c)
                code = 201
            else:
                found = [c for cs in self.comments.values() for c in cs if c["id"] == cid]
                if not found:
                    return self._send(h, 404, {"message": "Not Found"})
                c = found[0]
                c["body"] = body
                code = 200
            lose, self.lose_answer = self.lose_answer, False
        if lose:
            return self._send(h, 502, {"message": "Bad Gateway"})
        self._send(h, code, c)
