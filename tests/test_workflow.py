"""The GitHub Actions workflow (issues 9 and 20): least permissions (the measuring job read-only, the comment job
only pull-requests: write and no checkout), no credentials left in the checkout, the runner's own pinned solci
measures (never the pushed code installed), exit codes that keep the infrastructure's failures apart from the
commit's, a pull request measured against its merge-base and reported in one comment (the comment job's script
run against a stand-in for GitHub's REST API), a fork's pull request refused by default, no event text inline in
a script, and actionlint clean (it runs here; an injected error makes it fail)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ci.service.pr_comment import MARKER
from tests.support import PROJECT
from tests.support.github import FakeGitHub

WORKFLOW = PROJECT / ".github" / "workflows" / "solci.yml"
ACTIONLINT_CONFIG = PROJECT / ".github" / "actionlint.yaml"
SUBCOMMANDS = "run|report|comment|flags|measure|worker|watch|enqueue|up|ack"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _step(job: str, name: str) -> dict:
    return next(s for s in _workflow()["jobs"][job]["steps"] if name in s.get("name", ""))


def _writes(permissions: dict) -> list[str]:
    return [k for k, v in permissions.items() if v == "write"]


def test_least_permissions_and_no_persisted_credentials() -> None:
    wf = _workflow()
    assert wf["permissions"] == {"contents": "read"}
    jobs = wf["jobs"]
    assert jobs["measure"].get("permissions", wf["permissions"]) == {"contents": "read"}
    assert jobs["comment"]["permissions"] == {"pull-requests": "write"}  # same-run artifacts need no actions: read
    assert jobs["fork-refused"]["permissions"] == {}
    for name, job in jobs.items():
        checkout = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout")]
        assert all(s["with"]["persist-credentials"] is False for s in checkout), name
        if _writes(job.get("permissions", wf["permissions"])):
            assert not checkout and name == "comment", f"{name}: a job that may write never checks out code"
            assert not any("git " in s.get("run", "") for s in job["steps"]), name
    assert [s for s in jobs["measure"]["steps"] if str(s.get("uses", "")).startswith("actions/checkout")]


def test_the_pushed_code_is_never_installed_or_run_as_the_harness() -> None:
    wf = _workflow()
    scripts = "\n".join(s.get("run", "") for job in wf["jobs"].values() for s in job["steps"])
    assert "pip install" not in scripts and "install -e" not in scripts
    commands = "\n".join(ln for ln in scripts.splitlines() if not ln.strip().startswith(("echo", "#", "printf")))
    calls = re.findall(rf'(\S*)solci"?\s+({SUBCOMMANDS})\b', commands)
    assert len(calls) >= 5 and all(prefix == '"$SOLCI_HOME/bin/' for prefix, _ in calls), calls
    assert {"run", "report", "comment", "flags"} <= {sub for _, sub in calls}
    assert "--gpu" in scripts, "each runner measures on its own GPU slot"


def test_no_event_text_is_ever_inline_in_a_script() -> None:
    """Branch names, titles, repository names reach a script through env: only (script injection)."""
    for name, job in _workflow()["jobs"].items():
        for s in job["steps"]:
            assert "${{" not in s.get("run", ""), f"{name}: {s.get('name')}"


def test_pull_requests_into_main_are_measured_and_forks_refused_by_default() -> None:
    wf = _workflow()
    on = wf[True]  # PyYAML reads the key `on` as True
    assert on["pull_request"] == {"types": ["opened", "synchronize", "reopened"], "branches": ["main"]}
    assert on["push"] == {"branches": ["main"]}
    jobs = wf["jobs"]
    checkout = next(s for s in jobs["measure"]["steps"] if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["ref"] == "${{ github.event.pull_request.head.sha }}"
    assert checkout["with"]["fetch-depth"] == 0
    fork = "github.event.pull_request.head.repo.full_name"
    assert f"{fork} == github.repository" in jobs["measure"]["if"]
    assert "vars.SOLCI_ALLOW_FORK_PRS == 'true'" in jobs["measure"]["if"]
    refused = jobs["fork-refused"]
    assert f"{fork} != github.repository" in refused["if"] and "vars.SOLCI_ALLOW_FORK_PRS != 'true'" in refused["if"]
    assert refused["runs-on"] == "ubuntu-latest" and not any("uses" in s for s in refused["steps"])
    comment = jobs["comment"]
    assert comment["needs"] == "measure" and "github.event_name == 'pull_request'" in comment["if"]
    assert "!cancelled()" in comment["if"] and f"{fork} == github.repository" in comment["if"]
    uses = [s["uses"] for s in comment["steps"] if "uses" in s]
    assert len(uses) == 1 and uses[0].startswith("actions/download-artifact@")
    upload = next(s for s in jobs["measure"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    download = next(s for s in comment["steps"] if "uses" in s)
    assert upload["with"]["name"] == "solci-report-${{ matrix.gpu }}"
    assert download["with"]["pattern"] == "solci-report-*" and download["with"]["merge-multiple"] is True


# ---------------------------------------------------------------------------------------- the scripts, run
def _fake_solci(tmp_path: Path, codes: list[int]) -> tuple[Path, Path]:
    """$SOLCI_HOME with a fake solci that logs its arguments and exits with ``codes`` in turn (flags: 0;
    report: prints a report and exits with its own turn)."""
    home = tmp_path / "solci"
    (home / "bin").mkdir(parents=True)
    state, log = tmp_path / "n", tmp_path / "calls"
    state.write_text("0")
    fake = home / "bin" / "solci"
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n[ "$1" = flags ] && exit 0\n'
        f'[ "$1" = report ] && echo "| verdict | REPORTED $2 |"\n'
        f"n=$(cat {state}); echo $((n+1)) > {state}\n"
        f"set -- {' '.join(map(str, codes))}\nshift $n\nexit ${{1:-0}}\n"
    )
    fake.chmod(0o755)
    return home, log


def _repo(tmp_path: Path, n: int) -> tuple[Path, list[str]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **GIT_ENV}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    shas = []
    for i in range(n):
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", f"c{i}"], cwd=repo, check=True, env=env)
        shas.append(
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, env=env
            ).stdout.strip()
        )
    return repo, shas


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {"PATH": os.environ["PATH"], "HOME": str(cwd.parent), **GIT_ENV, **env}
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=full, capture_output=True, text=True)


def _run_script(codes: list[int], tmp_path: Path) -> int:
    """The push's measuring step with a fake solci that exits with ``codes`` in turn."""
    step = _step("measure", "Measure each commit")
    home, _ = _fake_solci(tmp_path, codes)
    repo, shas = _repo(tmp_path, len(codes) + 1)
    env = dict(SOLCI_HOME=str(home), SOLCI_GPU="gpu1", BEFORE=shas[0], AFTER=shas[-1], BRANCH="main")
    return _bash(step["run"], repo, env).returncode


def test_exit_codes_keep_infrastructure_apart(tmp_path: Path) -> None:
    assert _run_script([0, 0], tmp_path / "a") == 0
    assert _run_script([0, 3], tmp_path / "b") == 3
    assert _run_script([4, 0], tmp_path / "c") == 4, "an infrastructure failure is its own code"
    assert _run_script([4, 3], tmp_path / "d") == 3
    assert _run_script([3, 1, 4], tmp_path / "e") == 1


@pytest.mark.parametrize("code", [0, 3, 1, 4])
def test_a_pull_request_is_run_against_its_base_and_exits_with_the_runs_code(tmp_path: Path, code: int) -> None:
    step = _step("measure", "Measure the pull request")
    home, log = _fake_solci(tmp_path, [code])
    repo, shas = _repo(tmp_path, 2)
    subprocess.run(["git", "update-ref", "refs/remotes/origin/main", shas[0]], cwd=repo, check=True)
    env = dict(SOLCI_HOME=str(home), SOLCI_GPU="gpu1", HEAD=shas[1], BASE="main", PR="17")
    proc = _bash(step["run"], repo, env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert log.read_text() == f"run --repo . --commit {shas[1]} --base origin/main --branch pr-17 --gpu gpu1\n"
    assert ("::error::" in proc.stdout) == (code != 0)


def test_a_pull_request_without_its_base_in_the_checkout_is_an_infrastructure_failure(tmp_path: Path) -> None:
    step = _step("measure", "Measure the pull request")
    home, log = _fake_solci(tmp_path, [0])
    repo, shas = _repo(tmp_path, 1)
    proc = _bash(step["run"], repo, dict(SOLCI_HOME=str(home), SOLCI_GPU="gpu0", HEAD=shas[0], BASE="main", PR="1"))
    assert proc.returncode == 4 and "::error::the base branch origin/main is not in the checkout" in proc.stdout
    assert not log.exists(), "nothing is measured without a merge-base"


@pytest.mark.parametrize(("base", "code"), [("main", 3), ("", 0), ("main", 2)])
def test_the_report_goes_to_the_job_summary_and_a_file_outside_the_checkout(
    tmp_path: Path, base: str, code: int
) -> None:
    step = _step("measure", "Report to the job summary")
    home, log = _fake_solci(tmp_path, [code])
    repo, shas = _repo(tmp_path, 1)
    temp, summary = tmp_path / "runner-temp", tmp_path / "summary.md"
    temp.mkdir()
    env = dict(
        SOLCI_HOME=str(home),
        HEAD=shas[0],
        BASE=base,
        MODEL="H200",
        RUNNER_TEMP=str(temp),
        GITHUB_STEP_SUMMARY=str(summary),
    )
    proc = _bash(step["run"], repo, env)
    assert proc.returncode == 0, proc.stderr  # the verdict's exit code is the measuring step's to give
    report = (temp / "solci-report-H200.md").read_text()
    assert report.startswith("### solci on H200\n\n| verdict | REPORTED ") and summary.read_text() == report
    assert ("could not report" in report) == (code == 2)
    assert log.read_text() == f"report {shas[0]} {'--base origin/main ' if base else ''}--format markdown\n"


def test_a_fork_is_refused_with_a_failing_check_that_says_why(tmp_path: Path) -> None:
    step = _step("fork-refused", "Refuse")
    proc = _bash(step["run"], tmp_path, {"HEAD_REPO": "mallory/kernel"})
    assert proc.returncode == 1
    assert proc.stdout.startswith("::error::not measured: this pull request comes from mallory/kernel")
    assert "SOLCI_ALLOW_FORK_PRS" in proc.stdout and proc.stdout.count("\n") == 1


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    fake = FakeGitHub(token="job-token")
    yield fake
    fake.close()


def test_the_comment_job_posts_one_comment_against_a_stand_in_for_the_api(tmp_path: Path, github: FakeGitHub) -> None:
    """The comment step's script as the job runs it: this checkout's solci (as the runner's pinned one), the
    reports the measuring jobs uploaded, the job's token; GitHub's REST API a local stand-in."""
    step = _step("comment", "Post them")
    home = tmp_path / "solci"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "solci").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ci.cli "$@"\n')
    (home / "bin" / "solci").chmod(0o755)
    reports = tmp_path / "runner-temp" / "solci-reports"
    reports.mkdir(parents=True)
    for model in ("B200", "H200"):
        (reports / f"solci-report-{model}.md").write_text(f"### solci on {model}\n\npassed\n")
    github.add("octo/kernel", 5, "a reviewer's comment")
    env = dict(
        SOLCI_HOME=str(home),
        GITHUB_TOKEN="job-token",
        GITHUB_API_URL=github.url,
        GITHUB_REPOSITORY="octo/kernel",
        PR="5",
        REPORTS=str(reports),
        MEASURED="success",
        RUN_URL="https://github.example/octo/kernel/actions/runs/1",
        PYTHONPATH=str(PROJECT),
        no_proxy="*",
    )
    work = tmp_path / "workspace"
    work.mkdir()
    (work / "solci-report-evil.md").write_text("a file of the measured commit's checkout\n")
    first = _bash(step["run"], work, env)
    assert first.returncode == 0 and "created comment" in first.stdout, first.stdout + first.stderr
    (ours,) = github.marked("octo/kernel", 5, MARKER)
    assert "### solci on B200" in ours["body"] and "### solci on H200" in ours["body"]
    assert "[The run](https://github.example/octo/kernel/actions/runs/1)" in ours["body"]
    assert "measured commit" not in ours["body"], "only the downloaded reports are posted, never the workspace's"
    for f in reports.glob("solci-report-*.md"):
        f.unlink()
    env["MEASURED"] = "failure"
    second = _bash(step["run"], work, env)
    assert second.returncode == 0 and "updated comment" in second.stdout, second.stdout + second.stderr
    (ours,) = github.marked("octo/kernel", 5, MARKER)
    assert "No report: the measurement ended failure before writing one." in ours["body"]
    assert github.comments[("octo/kernel", 5)][0]["body"] == "a reviewer's comment"
    env["GITHUB_TOKEN"] = "read-only"
    refused = _bash(step["run"], work, env)
    assert refused.returncode == 4 and "401" in refused.stderr


# ---------------------------------------------------------------------------------------------- actionlint
def _actionlint() -> str:
    """actionlint (the dev extras install it next to this Python); a skip without it, a failure in CI."""
    beside = Path(sys.executable).parent / "actionlint"
    found = str(beside) if beside.exists() else shutil.which("actionlint")
    if found:
        return found
    reason = "actionlint is not installed (pip install -e '.[dev]' brings it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI=true, so the workflow's lint may not be skipped")
    pytest.skip(reason)


def _lint(actionlint: str, workflow: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [actionlint, "-oneline", "-no-color", "-config-file", str(ACTIONLINT_CONFIG), str(workflow)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=workflow.parent,
    )


def test_actionlint_finds_nothing_in_the_workflow_and_an_injected_error_fails_it(tmp_path: Path) -> None:
    """actionlint checks the workflow's syntax, expressions, permissions and script injection (and its scripts
    with shellcheck when shellcheck is installed; without it that part is skipped)."""
    actionlint = _actionlint()
    proc = _lint(actionlint, WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = WORKFLOW.read_text()
    anchor = "          worst=0\n"
    assert anchor in text
    bad = tmp_path / "solci.yml"
    bad.write_text(text.replace(anchor, anchor + '          echo "${{ github.event.pull_request.title }}"\n', 1))
    proc = _lint(actionlint, bad)
    assert proc.returncode == 1 and "github.event.pull_request.title" in proc.stdout, proc.stdout + proc.stderr
    key = "    permissions:\n      pull-requests: write"
    assert key in text
    bad.write_text(text.replace(key, key.replace("pull-requests", "pull-request"), 1))
    proc = _lint(actionlint, bad)
    assert proc.returncode == 1 and "pull-request" in proc.stdout, proc.stdout + proc.stderr
