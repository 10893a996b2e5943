"""A pull request's report as one comment (``solci comment``, ``ci.service.pr_comment``) against a stand-in for
GitHub's REST endpoints on the loopback interface (tests/support/github.py): the first post creates the comment,
the next updates it in place (other people's comments untouched), a marked comment on page 2 is found, a 5xx is
retried (and a write whose answer was lost is not made twice), a refused token is exit 4 in one line, a missing
token or file exit 2, and a report longer than GitHub's limit is cut under it with a line saying so."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ci.cli.main import main
from ci.service import pr_comment
from ci.service.pr_comment import MARKER, MAX_BODY, GitHubClient, GitHubError, compose, post_report
from tests.support import PROJECT
from tests.support.github import FakeGitHub

REPO = "octo/kernel"
PROXIES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


@pytest.fixture
def gh(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    for var in PROXIES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "*")  # loopback only, never through a proxy
    fake = FakeGitHub(token="t0ken")
    yield fake
    fake.close()


def client(gh: FakeGitHub, token: str = "t0ken", **kw: object) -> tuple[GitHubClient, list[float]]:
    """A client of the stand-in whose backoff sleeps are recorded, not slept."""
    slept: list[float] = []
    return GitHubClient(gh.url, token, sleep=slept.append, timeout_s=5.0, **kw), slept  # type: ignore[arg-type]


def test_the_first_post_creates_the_comment_and_the_next_updates_it_in_place(gh: FakeGitHub) -> None:
    before = gh.add(REPO, 7, "LGTM, but is the H200 number real?")
    quoting = gh.add(REPO, 7, f"> {MARKER}\n> quoting the bot: not the bot's comment")
    c, _ = client(gh)
    first = post_report(c, REPO, 7, compose(["## solci: H200\npassed"])[0])
    assert first.action == "created" and first.url.endswith(f"#issuecomment-{first.comment_id}")
    second = post_report(c, REPO, 7, compose(["## solci: H200\nREGRESSED"])[0])
    assert second.action == "updated" and second.comment_id == first.comment_id
    mine = gh.marked(REPO, 7, MARKER)
    assert [m["id"] for m in mine] == [first.comment_id] and mine[0]["body"].endswith("REGRESSED\n")
    others = [x for x in gh.comments[(REPO, 7)] if x["id"] != first.comment_id]
    assert others == [before, quoting] and before["body"].startswith("LGTM")  # untouched
    assert [m for m, _, _ in gh.requests] == ["GET", "POST", "GET", "PATCH"]
    assert {auth for _, _, auth in gh.requests} == {"Bearer t0ken"}
    assert gh.requests[0][1] == f"/repos/{REPO}/issues/7/comments?per_page=100"
    assert gh.requests[3][1] == f"/repos/{REPO}/issues/comments/{first.comment_id}"


def test_a_marked_comment_on_the_second_page_is_found(gh: FakeGitHub) -> None:
    for i in range(130):
        gh.add(REPO, 3, f"comment {i}")
    ours = gh.add(REPO, 3, f"{MARKER}\nan older report", user="github-actions[bot]")
    gh.add(REPO, 3, "a later comment")
    c, _ = client(gh)
    posted = post_report(c, REPO, 3, compose(["the new report"])[0])
    assert posted.action == "updated" and posted.comment_id == ours["id"]
    assert "the new report" in ours["body"] and len(gh.marked(REPO, 3, MARKER)) == 1
    gets = [path for method, path, _ in gh.requests if method == "GET"]
    assert len(gets) == 2 and gets[1].endswith("page=2"), gets


def test_a_5xx_is_retried_with_backoff(gh: FakeGitHub) -> None:
    gh.answers = [500, 503]
    c, slept = client(gh, tries=3, backoff_s=(1.0, 3.0))
    posted = post_report(c, REPO, 9, compose(["report"])[0])
    assert posted.action == "created" and slept == [1.0, 3.0] and len(gh.comments[(REPO, 9)]) == 1


def test_a_write_whose_answer_was_lost_is_not_made_twice(gh: FakeGitHub) -> None:
    gh.lose_answer = True  # the comment is created, the answer is a 502
    c, slept = client(gh)
    posted = post_report(c, REPO, 4, compose(["report"])[0])
    assert posted.action == "updated" and slept == [1.0]
    assert len(gh.marked(REPO, 4, MARKER)) == 1 and [m for m, _, _ in gh.requests] == ["GET", "POST", "GET", "PATCH"]


def test_every_try_failing_or_no_server_is_a_github_error(gh: FakeGitHub) -> None:
    gh.answers = [502, 502, 502]
    c, slept = client(gh, tries=3, backoff_s=(0.5,))
    with pytest.raises(GitHubError, match=r"502 .*\(3 tries\)") as err:
        post_report(c, REPO, 1, "x")
    assert err.value.status == 502 and slept == [0.5, 0.5]
    gone = GitHubClient("http://127.0.0.1:9", "t", sleep=lambda _s: None, timeout_s=2.0)
    with pytest.raises(GitHubError, match=re.escape("unreachable at http://127.0.0.1:9")):
        post_report(gone, REPO, 1, "x")


def test_the_token_never_follows_a_link_to_another_host(gh: FakeGitHub) -> None:
    for i in range(101):
        gh.add(REPO, 5, f"c{i}")
    gh.link_host = "http://127.0.0.2:1"
    c, _ = client(gh)
    with pytest.raises(GitHubError, match=re.escape("refusing to send the token to http://127.0.0.2:1")):
        post_report(c, REPO, 5, "x")
    assert len(gh.requests) == 1


@pytest.mark.parametrize(("token", "forbid", "code"), [("wrong", False, "401"), ("t0ken", True, "403")])
def test_a_refused_token_is_exit_4_in_one_line(
    gh: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    token: str,
    forbid: bool,
    code: str,
) -> None:
    gh.forbid = forbid
    report = tmp_path / "solci-report-H200.md"
    report.write_text("## H200\npassed\n")
    monkeypatch.setenv("GITHUB_TOKEN", token)
    rc = main(["comment", "--repo", REPO, "--pr", "2", "--api-url", gh.url, str(report)])
    err = capsys.readouterr().err
    assert rc == 4 and err.count("\n") == 1 and err.startswith("solci: error: GitHub API answered " + code), err
    assert token not in err and len(gh.requests) == (1 if code == "401" else 2)  # refused: never retried


def test_no_token_or_no_file_is_exit_2(
    gh: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.md"
    report.write_text("passed\n")
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert main(["comment", "--repo", REPO, "--pr", "2", "--api-url", gh.url, str(report)]) == 2
    err = capsys.readouterr().err
    assert err == "solci: error: $GITHUB_TOKEN is not set: the token that may comment on the pull request\n"
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    assert main(["comment", "--repo", REPO, "--pr", "2", "--api-url", gh.url, str(tmp_path / "none.md")]) == 2
    assert "cannot read the report" in capsys.readouterr().err
    assert main(["comment", "--repo", "no-slash", "--pr", "2", str(report)]) == 2
    assert "expected OWNER/NAME" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad_pr:
        main(["comment", "--repo", REPO, "--pr", "0", str(report)])
    assert bad_pr.value.code == 2 and gh.requests == []


def test_a_report_over_the_limit_is_cut_under_it_with_a_line_saying_so(gh: FakeGitHub) -> None:
    huge = "| case | change |\n| --- | --- |\n" + "".join(f"| B{i}_S128 | +1.0% 🚀 |\n" for i in range(6000))
    fenced = "```text\n" + "log line\n" * 12000 + "```\n"
    for reports in ([huge], ["## H200\nshort", fenced]):
        body, cut = compose(reports)
        assert cut and body.startswith(MARKER + "\n") and len(body.encode("utf-16-le")) // 2 <= MAX_BODY
        assert body.rstrip().endswith("the whole report is in the run's job summary and its artifacts.")
        assert body.count("```") % 2 == 0, "an open code block is closed before the note"
    small, cut = compose(["a", "b"])
    assert not cut and small == f"{MARKER}\na\n\n---\n\nb\n"
    c, _ = client(gh)
    post_report(c, REPO, 8, compose([huge])[0])  # the stand-in refuses a body over 65536 characters (422)
    assert len(gh.marked(REPO, 8, MARKER)[0]["body"]) <= MAX_BODY


def test_solci_comment_from_the_command_line(gh: FakeGitHub, tmp_path: Path) -> None:
    files = []
    for model in ("B200", "H200"):
        files.append(tmp_path / f"solci-report-{model}.md")
        files[-1].write_text(f"### solci on {model}\n\npassed\n")
    env = {k: v for k, v in os.environ.items() if k not in PROXIES}
    env.update(GITHUB_TOKEN="t0ken", GITHUB_API_URL=gh.url, no_proxy="*", PYTHONPATH=str(PROJECT))
    cmd = [sys.executable, "-m", "ci.cli", "comment", "--repo", REPO, "--pr", "12", *map(str, files)]
    for expected in ("created", "updated"):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"solci: {expected} comment ") and f"{REPO}#12" in proc.stdout
    (ours,) = gh.marked(REPO, 12, MARKER)
    assert ours["body"] == f"{MARKER}\n### solci on B200\n\npassed\n\n---\n\n### solci on H200\n\npassed\n"
    assert pr_comment.DEFAULT_API_URL == "https://api.github.com"
