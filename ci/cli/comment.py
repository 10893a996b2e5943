"""``solci comment``: post the report of a pull request as one comment on it, updated in place.

solci comment --repo OWNER/NAME --pr N [--api-url URL] FILE...

The files (``solci report --format markdown``, one per GPU model) are joined into one body under a hidden marker
(``ci.service.pr_comment``); the token is ``$GITHUB_TOKEN``, the API ``--api-url``, else ``$GITHUB_API_URL``, else
https://api.github.com. Exit 0 posted; 2 a bad option or value (no token, an unreadable file); 4 the API was
unreachable or answered an error (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ci.cli.common import bounded, echo, error, handles_errors, one_line_errors
from ci.service.pr_comment import (
    API_URL_ENV,
    DEFAULT_API_URL,
    MAX_BODY,
    TOKEN_ENV,
    GitHubClient,
    GitHubError,
    check_repo,
    compose,
    post_report,
)
from ci.service.runner import EXIT_INFRA, EXIT_OK


def read_report(path: Path) -> str:
    """One report file's text (UTF-8; undecodable bytes replaced), or ValueError naming it (exit 2)."""
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise ValueError(f"cannot read the report {str(path)!r}: {exc.strerror or exc}") from None


@handles_errors
def cmd_comment(args: argparse.Namespace) -> int:
    check_repo(args.repo)
    token = (os.environ.get(TOKEN_ENV) or "").strip()
    if not token:
        raise ValueError(f"${TOKEN_ENV} is not set: the token that may comment on the pull request")
    api_url = args.api_url or (os.environ.get(API_URL_ENV) or "").strip() or DEFAULT_API_URL
    reports = [read_report(Path(f)) for f in args.files]
    body, truncated = compose(reports)
    client = GitHubClient(api_url, token)
    if truncated:
        echo(f"the report is longer than a comment may be ({MAX_BODY:,} characters): posting it truncated")
    try:
        posted = post_report(client, args.repo, args.pr, body)
    except GitHubError as exc:
        error(str(exc))
        return EXIT_INFRA
    print(f"solci: {posted.action} comment {posted.comment_id} on {args.repo}#{args.pr} {posted.url}".rstrip())
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = one_line_errors(
        subparsers.add_parser(
            "comment",
            help="post report files as the pull request's one solci comment, updated in place (token: "
            f"${TOKEN_ENV}); exit 2 bad value, 4 the API failed",
        )
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="report files (Markdown), one per GPU model, joined")
    p.add_argument("--repo", required=True, help="the repository, OWNER/NAME")
    p.add_argument("--pr", required=True, type=bounded(int, 1), help="the pull request's number")
    p.add_argument(
        "--api-url",
        help=f"GitHub's REST API (default: ${API_URL_ENV}, else {DEFAULT_API_URL})",
    )
    p.set_defaults(func=cmd_comment)
