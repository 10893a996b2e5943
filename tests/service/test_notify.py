"""Notifications (``--notify URL``, ``$SOLCI_NOTIFY``) against a real HTTP server on the loopback interface:
a step opened, a step fixed and a broken commit post once each; a passing job posts nothing; a server that
fails twice gets the message on the third try; an unreachable one never fails the job (the notifier gives up
after its tries)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ci.cli.main import build_parser
from ci.service import notify
from ci.service.executors import executor_line
from ci.service.runner import JobRunner, JobRunnerConfig
from storage.db import Database
from storage.jobs import enqueue
from tests.support.fakes import FakeExecutor
from tests.support.repo_factory import small_repo


class Recorder:
    """An HTTP server on 127.0.0.1 (a free port) that records each POST body and answers the codes of
    ``answers`` in turn (then 200)."""

    def __init__(self, answers: list[int] | None = None) -> None:
        self.bodies: list[dict] = []
        self.answers = list(answers or [])
        self.tries = 0
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                recorder.tries += 1
                code = recorder.answers.pop(0) if recorder.answers else 200
                if code == 200:
                    recorder.bodies.append(json.loads(data))
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "*")  # loopback only, never through a proxy
    r = Recorder()
    yield r
    r.close()


def fast(url: str, **kw: object) -> notify.Notifier:
    """A notifier with no backoff (the tries are counted, not timed)."""
    return notify.Notifier(url, backoff_s=(0.0,), timeout_s=5.0, **kw)  # type: ignore[arg-type]


def run_jobs(db: Database, tmp_path: Path, kinds: list[str], notifier: notify.Notifier) -> list:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    shas = [repo.commit_file("notes.txt", f"{i}\n", f"c{i}") for i in range(len(kinds))]
    for sha in shas:
        enqueue(db, str(repo.path), sha, branch="main")
    fake = FakeExecutor(dict(zip(shas, kinds, strict=True)))
    runner = JobRunner(db, JobRunnerConfig(worker="w"), executor=fake, notifier=notifier)
    reports = runner.run(once=True)
    notifier.wait()
    return reports


def test_neutral_jobs_post_nothing_a_regression_posts_once(db: Database, tmp_path: Path, server: Recorder) -> None:
    notifier = fast(server.url)
    reports = run_jobs(db, tmp_path, ["pass", "pass", "pass", "slow"], notifier)
    assert [r.outcome for r in reports] == ["passed", "passed", "passed", "regressed"]
    assert len(server.bodies) == 1, server.bodies
    body = server.bodies[0]
    s = body["solci"]
    assert s["event"] == "step_opened" and s["outcome"] == "regressed" and s["verdict"] == "regressed"
    assert s["commit"] == reports[-1].commit and s["branch"] == "main" and s["run_id"] == reports[-1].run_id
    assert s["step_id"] and s["step_status"] == "open"
    assert s["cases_moved"] == 2 and s["n_cases"] == 2
    assert {c["case"] for c in s["cases"]} == {"B1_S256", "B4_S128"}
    assert all(c["change"] > 0 and c["lo"] > 0 for c in s["cases"])
    assert s["suite_change"] > 0
    # one Slack-compatible line: verdict, commit, cases moved, suite change
    text = body["text"]
    assert "\n" not in text
    assert text.startswith(f"solci: REGRESSED {reports[-1].commit[:12]} (main): 2/2 cases moved, suite +")
    assert notifier.attempts == 1 and notifier.delivered == 1 and notifier.gave_up == 0


def test_a_fix_posts_once_and_names_the_step_it_fixed(
    db: Database, tmp_path: Path, server: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(notify.DASHBOARD_URL_ENV, "http://dash.example:8501/")
    notifier = fast(server.url)
    reports = run_jobs(db, tmp_path, ["pass", "pass", "pass", "slow", "slow", "pass"], notifier)
    assert [r.outcome for r in reports][-3:] == ["regressed", "passed", "improved"]
    assert [b["solci"]["event"] for b in server.bodies] == ["step_opened", "step_fixed"]
    fixed = server.bodies[1]["solci"]
    assert fixed["fixed_steps"] == [{"step_id": server.bodies[0]["solci"]["step_id"], "commit": reports[3].commit}]
    assert f"fixes {reports[3].commit[:12]}" in server.bodies[1]["text"]
    assert fixed["link"] == f"http://dash.example:8501/?commit={reports[-1].commit}"
    assert server.bodies[1]["text"].endswith(f"<{fixed['link']}>")


def test_a_broken_commit_posts_once(db: Database, tmp_path: Path, server: Recorder) -> None:
    notifier = fast(server.url)
    reports = run_jobs(db, tmp_path, ["pass", "build_failed", "incorrect", "pass"], notifier)
    assert [r.outcome for r in reports] == ["passed", "build_failed", "incorrect", "passed"]
    events = [(b["solci"]["event"], b["solci"]["outcome"], b["solci"]["commit"]) for b in server.bodies]
    assert sorted(events) == sorted(
        [("broken", "build_failed", reports[1].commit), ("broken", "incorrect", reports[2].commit)]
    )
    for b in server.bodies:
        assert b["text"].startswith(f"solci: BROKEN {b['solci']['commit'][:12]} (main): {b['solci']['outcome']}")
    build = next(b for b in server.bodies if b["solci"]["outcome"] == "build_failed")
    assert build["solci"]["error_line"] == "fake build_failed" and build["text"].endswith(": fake build_failed")


def test_a_server_that_fails_twice_gets_the_message_on_the_third_try(
    db: Database, tmp_path: Path, server: Recorder
) -> None:
    server.answers = [500, 500]
    notifier = fast(server.url)
    reports = run_jobs(db, tmp_path, ["pass", "build_failed"], notifier)
    assert reports[-1].outcome == "build_failed"
    assert server.tries == 3 and len(server.bodies) == 1
    assert notifier.attempts == 3 and notifier.delivered == 1 and notifier.gave_up == 0


def test_an_unreachable_server_never_fails_the_job(db: Database, tmp_path: Path, server: Recorder) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    said: list[str] = []
    notifier = fast(f"http://127.0.0.1:{port}/hook", say=said.append)
    reports = run_jobs(db, tmp_path, ["pass", "pass", "pass", "slow", "crashed"], notifier)
    assert [r.outcome for r in reports] == ["passed", "passed", "passed", "regressed", "crashed"]
    assert all(r.recorded and r.status == "done" for r in reports)
    assert notifier.attempts == 2 * notifier.tries == 6 and notifier.gave_up == 2 and notifier.delivered == 0
    assert len(said) == 2 and all("not delivered after 3 tries" in line for line in said)


def test_the_backoff_between_tries_is_bounded_and_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults: 3 tries, a short timeout each, 1 s then 2 s between them (the last wait repeated past the list)."""
    n = notify.Notifier("http://127.0.0.1:1/x")
    assert n.tries == 3 and n.backoff_s[:2] == (1.0, 2.0) and n.timeout_s <= 5.0
    slept: list[float] = []
    monkeypatch.setattr(notify.time, "sleep", slept.append)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = notify.Notifier(f"http://127.0.0.1:{port}/x", tries=4, backoff_s=(1.0, 2.0))
    n.send({"text": "x"}).join()
    assert slept == [1.0, 2.0, 2.0] and n.attempts == 4 and n.gave_up == 1


def test_notify_option_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from ci.cli.common import runner_config

    parser = build_parser()
    for command in (["run"], ["watch", "."], ["worker"]):
        args = parser.parse_args([*command, "--notify", "http://127.0.0.1:1/h"])
        assert runner_config(args).notify == "http://127.0.0.1:1/h"
    monkeypatch.setenv(notify.NOTIFY_ENV, "http://127.0.0.1:2/env")
    assert runner_config(parser.parse_args(["worker"])).notify == "http://127.0.0.1:2/env"
    monkeypatch.delenv(notify.NOTIFY_ENV)
    assert runner_config(parser.parse_args(["worker"])).notify is None
    with pytest.raises(ValueError, match="--notify"):
        runner_config(parser.parse_args(["worker", "--notify", "ftp://x"]))
    runner = JobRunner(None, JobRunnerConfig(notify="http://127.0.0.1:3/c"), executor=FakeExecutor({}))
    assert runner.notifier is not None and runner.notifier.url == "http://127.0.0.1:3/c"


def test_the_runner_says_which_executor_measures_and_why(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    from ci.service import executors
    from ci.service.executors.docker import DockerExecutor
    from ci.service.executors.local import LocalExecutor

    class Made:
        def __init__(self, name: str) -> None:
            self.name = name

    monkeypatch.setattr(LocalExecutor, "from_options", classmethod(lambda cls, **kw: Made("local")))
    monkeypatch.setattr(DockerExecutor, "from_options", classmethod(lambda cls, **kw: Made("docker")))
    monkeypatch.delenv("SOLCI_EXECUTOR", raising=False)

    monkeypatch.setattr(DockerExecutor, "unavailable_reason", staticmethod(lambda **kw: None))
    line = executor_line(executors.choose_executor())
    assert line.startswith("executor: docker (auto: a Docker engine answers") and "--executor local" in line

    monkeypatch.setattr(DockerExecutor, "unavailable_reason", staticmethod(lambda **kw: "no Docker engine answers"))
    assert executor_line(executors.choose_executor()).startswith("executor: local (auto: no Docker engine answers")
    assert executor_line(executors.choose_executor("local")) == "executor: local (--executor local)"
    assert "(--trusted)" in executor_line(executors.choose_executor("local", sandbox="none"))
    monkeypatch.setenv("SOLCI_EXECUTOR", "local")
    assert executor_line(executors.choose_executor()) == "executor: local ($SOLCI_EXECUTOR local)"

    said: list[str] = []
    JobRunner(db, JobRunnerConfig(worker="w"), executor=FakeExecutor({}), echo=said.append).start()
    assert "executor: fake" in said
