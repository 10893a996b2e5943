"""docker-compose.yml, Dockerfile, `./dev down` and the GitHub workflow; and the CPU stack against a real
engine: a runner restarted in the middle of a job finishes that job first, and the job and its run are
stored once, kept across `down` / `up` on the named volume.

The engine test skips when no engine answers, docker-compose is missing or solci-deps:cpu is missing,
except in CI (CI=true).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import PROJECT
from tests.support.images import IMAGE, needs_image
from tests.support.repo_factory import make_project_repo

yaml = pytest.importorskip("yaml")
BROKEN = ("error", "crashed", "timed_out", "build_failed")  # outcomes of a measurement that did not finish
needs_compose = pytest.mark.skipif(
    shutil.which("docker-compose") is None and os.environ.get("CI") != "true",
    reason="docker-compose (v1) is not installed",
)


def compose_config(*args: str, **env: str) -> dict:
    res = subprocess.run(
        ["docker-compose", *args, "config"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)


def seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)([smh])", text))


# ------------------------------------------------------------------------------------------------ files
@needs_compose
def test_compose_file_is_valid() -> None:
    compose_config()
    config = compose_config("--profile", "cpu")
    services = config["services"]
    assert {"runner", "runner-cpu", "dashboard"} <= set(services)
    assert services["runner"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert services["dashboard"]["command"][:2] == ["solci", "dashboard"]
    assert any("8501" in str(p) for p in services["dashboard"]["ports"])
    for name in ("runner", "dashboard"):
        assert any("/data" in str(v) for v in services[name]["volumes"])


@needs_compose
def test_runners_survive_restarts_and_measure_in_sibling_containers() -> None:
    services = compose_config("--profile", "cpu")["services"]
    for name in ("runner", "runner-cpu"):
        svc = services[name]
        assert seconds(svc["stop_grace_period"]) >= 15 * 60, "longer than a measurement"
        assert svc["init"] is True and svc["restart"] == "unless-stopped"
        assert any(str(v).startswith("/var/run/docker.sock:/var/run/docker.sock") for v in svc["volumes"])
        command = " ".join(svc["command"])
        assert "--executor docker" in command and "solci watch /repo" in command
    assert "--gpu gpu0" in " ".join(services["runner"]["command"])
    assert "--gpu cpu" in " ".join(services["runner-cpu"]["command"])  # CPU jobs are not labelled gpu0
    assert services["runner-cpu"]["environment"]["SOLCI_WATCH_ARGS"] == "--cases 1,7"


@needs_compose
def test_one_build_per_up_and_a_named_volume() -> None:
    services = compose_config("--profile", "cpu")["services"]
    built = [name for name, svc in services.items() if "build" in svc]
    assert built == ["dashboard"]  # built once, first in the file; the runners reuse its image
    in_file = yaml.safe_load((PROJECT / "docker-compose.yml").read_text())["services"]
    assert next(iter(in_file)) == "dashboard"  # compose v1 makes sure images exist in the file's order
    # every solci service runs the one image (postgres, of the fleet profile, is PostgreSQL's own)
    assert len({svc["image"] for name, svc in services.items() if name != "postgres"}) == 1
    # the volume's name does not follow the folder's (or the project's) name
    for project in ("main", "elsewhere"):
        config = compose_config("-p", project, "--profile", "cpu")
        assert config["volumes"]["solci-data"]["name"] == "solci-data"


@needs_compose
def test_dashboard_logs_the_port_it_is_reachable_on() -> None:
    dashboard = compose_config(SOLCI_DASHBOARD_PORT="18777")["services"]["dashboard"]
    assert [str(p.get("published")) for p in dashboard["ports"]] == ["18777"]
    assert str(dashboard["environment"]["SOLCI_PUBLIC_PORT"]) == "18777"


def test_workflow_measures_every_commit_of_the_push() -> None:
    wf = yaml.safe_load((PROJECT / ".github" / "workflows" / "solci.yml").read_text())
    job = wf["jobs"]["measure"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert 'git rev-list --reverse "$BEFORE..$AFTER"' in script
    assert 'solci" run --repo . --commit "$sha"' in script


def test_dockerfile_caches_dependencies_before_the_source() -> None:
    lines = [ln.split()[0:2] for ln in (PROJECT / "Dockerfile").read_text().splitlines() if ln and ln[0].isupper()]
    copies = [ln for ln in lines if ln[0] == "COPY"]
    assert copies[0] == ["COPY", "pyproject.toml"] and copies[-1] == ["COPY", "."]
    assert ["ARG", "BASE_IMAGE=solci-deps:latest"] in lines
    assert lines[-2] == ["USER", "10001"]  # what is measured runs unprivileged, named by uid (issue 19)
    # every USER by number (hadolint DL3066): a cluster's run-as-non-root policy can check it
    assert all(ln[1].split(":")[0].isdigit() for ln in lines if ln[0] == "USER"), lines
    assert "--uid 10001" in (PROJECT / "Dockerfile").read_text()  # ... which is the user solci


# ------------------------------------------------------------------------------------------------ ./dev down
def _dev_down(pidfile: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SOLCI_DOCKERD_PIDFILE": str(pidfile), "COMPOSE_PROJECT_NAME": f"solcinone{os.getpid()}"}
    return subprocess.run(["bash", str(PROJECT / "dev"), "down"], env=env, capture_output=True, text=True, timeout=180)


def test_dev_down_stops_the_engine_ci_setup_started(tmp_path: Path) -> None:
    # a stand-in engine: dev down checks that the pid's command line is a dockerd's
    proc = subprocess.Popen(["bash", "-c", "exec -a dockerd sleep 300"])
    threading.Thread(target=proc.wait, daemon=True).start()  # reap it once it is killed
    pidfile = tmp_path / "solci-dockerd.pid"
    pidfile.write_text(f"{proc.pid}\n")
    try:
        res = _dev_down(pidfile)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"stopping the Docker engine docker/ci_setup.sh started (dockerd, pid {proc.pid})" in res.stdout
        assert proc.wait(timeout=30) == -15 and not pidfile.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_dev_down_leaves_other_processes_alone(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "300"])  # the pid file names a process that is not a dockerd
    pidfile = tmp_path / "solci-dockerd.pid"
    pidfile.write_text(f"{proc.pid}\n")
    try:
        res = _dev_down(pidfile)
        assert res.returncode == 0 and "is not running any more" in res.stdout
        assert proc.poll() is None and not pidfile.exists()
        res = _dev_down(pidfile)
        assert res.returncode == 0 and "no Docker engine started by docker/ci_setup.sh" in res.stdout
    finally:
        proc.kill()


def _stand_in_checkout(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A copy of ``dev`` in a checkout whose venv, set-up scripts, ruff, pytest and Docker are stand-ins: a
    ``docker`` that answers once ``engine-up`` exists, a ``docker/ci_setup.sh`` that starts a stand-in dockerd
    (its pid in the pid file) when none answers."""
    root = tmp / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / "docker").mkdir()
    bin_ = root / ".venv" / "bin"
    bin_.mkdir(parents=True)
    shutil.copy(PROJECT / "dev", root / "dev")
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(PROJECT / name, root / name)
    digest = subprocess.run(
        "cat pyproject.toml constraints.txt | sha256sum | cut -c1-16",
        shell=True,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (root / ".venv" / ".solci-installed").write_text(f"cpu {digest}\n")
    (bin_ / "activate").write_text(f'PATH="{bin_}:$PATH"\n')

    def script(path: Path, body: str) -> None:
        path.write_text("#!/usr/bin/env bash\n" + body)
        path.chmod(0o755)

    for need in ("sandbox", "postgres", "browser"):
        script(root / "scripts" / f"setup_{need}.sh", "exit 0\n")
    script(bin_ / "python", f'echo "pytest: $*" >>"{tmp}/pytest.log"\n')
    script(bin_ / "ruff", "exit 0\n")
    fake = tmp / "fakebin"
    fake.mkdir()
    script(fake / "docker", f'[ "$1" = info ] && [ -f "{tmp}/engine-up" ]\n')
    pidfile = tmp / "solci-dockerd.pid"
    script(
        root / "docker" / "ci_setup.sh",
        f'if ! docker info; then setsid bash -c "exec -a dockerd sleep 300" </dev/null >/dev/null 2>&1 &\n'
        f'echo $! >"{pidfile}"; touch "{tmp}/engine-up"; fi\n',
    )
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "SOLCI_DOCKERD_PIDFILE": str(pidfile),
        "SOLCI_VARIANT": "cpu",
        "CI": "false",
    }
    env.pop("SOLCI_KEEP_DOCKER", None)
    env.pop("SOLCI_NO_DOCKER", None)
    return root, env


def _kill_stand_in(pidfile: Path) -> None:
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), 9)
        except (ProcessLookupError, ValueError):
            pass


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize("keep", [None, "--keep-docker", "env"])
def test_dev_test_stops_the_engine_it_started_unless_asked(tmp_path: Path, keep: str | None) -> None:
    """`./dev test` leaves the machine as it found it: an engine docker/ci_setup.sh started for the tests is
    stopped afterwards, unless --keep-docker or SOLCI_KEEP_DOCKER=1; the pytest arguments pass through."""
    root, env = _stand_in_checkout(tmp_path)
    pidfile = Path(env["SOLCI_DOCKERD_PIDFILE"])
    args = ["bash", str(root / "dev"), "test", "-k", "storage"]
    if keep == "--keep-docker":
        args.append("--keep-docker")
    if keep == "env":
        env["SOLCI_KEEP_DOCKER"] = "1"
    try:
        res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert (tmp_path / "pytest.log").read_text() == "pytest: -m pytest -q -p no:cacheprovider -k storage\n"
        pid = int(pidfile.read_text()) if pidfile.exists() else None
        if keep is None:
            assert "stopping the Docker engine started for the tests" in res.stdout
            assert not pidfile.exists()
        else:
            assert "stopping" not in res.stdout and pid is not None and _alive(pid)
    finally:
        _kill_stand_in(pidfile)


def test_dev_test_never_stops_an_engine_that_was_running(tmp_path: Path) -> None:
    root, env = _stand_in_checkout(tmp_path)
    (tmp_path / "engine-up").touch()  # an engine answers before the tests
    pidfile = Path(env["SOLCI_DOCKERD_PIDFILE"])
    proc = subprocess.Popen(["bash", "-c", "exec -a dockerd sleep 300"])  # even one ci_setup.sh started earlier
    threading.Thread(target=proc.wait, daemon=True).start()
    pidfile.write_text(f"{proc.pid}\n")
    try:
        res = subprocess.run(["bash", str(root / "dev"), "test"], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "stopping" not in res.stdout and proc.poll() is None and pidfile.exists()
    finally:
        proc.kill()


def test_dev_test_passes_on_the_tests_exit_code_and_still_stops_the_engine(tmp_path: Path) -> None:
    root, env = _stand_in_checkout(tmp_path)
    (root / ".venv" / "bin" / "python").write_text("#!/usr/bin/env bash\nexit 5\n")
    pidfile = Path(env["SOLCI_DOCKERD_PIDFILE"])
    try:
        res = subprocess.run(["bash", str(root / "dev"), "test"], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 5, res.stdout + res.stderr
        assert "stopping the Docker engine started for the tests" in res.stdout and not pidfile.exists()
    finally:
        _kill_stand_in(pidfile)


# ------------------------------------------------------------------------------------------------ real engine
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    """One CPU stack of docker-compose.yml under its own project, image and volume names."""

    def __init__(self, repo: Path, commit: str) -> None:
        self.commit = commit
        tag = uuid.uuid4().hex[:8]
        self.volume = f"solci-test-data-{tag}"
        self.image = f"solci-test-compose:{tag}"
        self.env = {
            **os.environ,
            "COMPOSE_PROJECT_NAME": f"solcitest{tag}",
            "SOLCI_REPO": str(repo),
            "SOLCI_VOLUME": self.volume,
            "SOLCI_IMAGE": self.image,
            "SOLCI_DEPS_IMAGE": IMAGE,
            "SOLCI_INTERVAL": "2",
            "SOLCI_DASHBOARD_PORT": str(_free_port()),
        }

    def compose(self, *args: str, timeout: float = 600) -> str:
        res = subprocess.run(
            ["docker-compose", "--profile", "cpu", *args],
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert res.returncode == 0, f"docker-compose {' '.join(args)}: {res.stdout[-2000:]}{res.stderr[-3000:]}"
        return res.stdout

    def runner_log(self) -> str:
        return self.compose("logs", "--no-color", "runner-cpu", timeout=60)

    def wait_log(self, text: str, *, count: int = 1, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.runner_log()
            if log.count(text) >= count:
                return log
            time.sleep(1)
        raise AssertionError(f"{text!r} (x{count}) not in the runner's log within {timeout:.0f} s:\n{log[-3000:]}")

    def history(self, commit: str) -> tuple[list[list[str]], list[str]]:
        """(jobs of the commit: [id, status, outcome, attempts], run ids of the commit) read through the volume."""
        query = (
            "SELECT 'J|' || id || '|' || status || '|' || coalesce(outcome, '-') || '|' || attempts AS x FROM jobs "
            f"WHERE \"commit\" = '{commit}' UNION ALL SELECT 'R|' || run_id FROM runs WHERE \"commit\" = '{commit}'"
        )
        read = ["solci", "sql", query, "--db", "/data/history.duckdb", "--max-colwidth", "500"]
        res = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "-v", f"{self.volume}:/data", self.image, *read],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        rows = [ln.strip().split("|") for ln in res.stdout.splitlines() if "|" in ln]
        return [r[1:] for r in rows if r[0] == "J"], [r[1] for r in rows if r[0] == "R"]


@pytest.fixture()
def stack(tmp_path: Path) -> Iterator[Stack]:
    needs_image()
    if shutil.which("docker-compose") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("in CI the compose test needs docker-compose (docker/ci_setup.sh installs it)")
        pytest.skip("docker-compose (v1) is not installed")
    repo = make_project_repo(tmp_path / "repo")
    s = Stack(repo.path, repo.head())
    try:
        yield s
    finally:
        down = ["docker-compose", "--profile", "cpu", "down", "-v", "-t", "0"]
        subprocess.run(down, cwd=PROJECT, env=s.env, capture_output=True, timeout=300)
        subprocess.run(["docker", "image", "rm", "-f", s.image], capture_output=True, timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_restart_mid_job_finishes_the_job_once_and_down_up_keeps_it(stack: Stack) -> None:
    sha = stack.commit
    stack.compose("build", "dashboard")  # the one service that builds the image
    stack.compose("up", "-d", "runner-cpu")
    stack.wait_log(f"job 1: measuring {sha[:12]}")
    stack.compose("restart", "runner-cpu", timeout=900)  # SIGTERM mid-job; waits for the runner to stop
    log = stack.wait_log("watching main of /repo", count=2, timeout=120)
    sigterm = log.index("got SIGTERM: stopping after the current job")
    finished = re.search(rf"job 1: {sha[:12]} (\w+)", log)
    assert finished and finished.group(1) not in BROKEN, log[-3000:]
    finished = finished.start()
    second_start = log.index("watching main of /repo", log.index("watching main of /repo") + 1)
    assert sigterm < finished < second_start, log[-3000:]  # the job ended before the runner did
    assert "requeued job" not in log
    time.sleep(6)  # a few polls of the restarted runner: the commit is not queued or measured again
    jobs, runs = stack.history(sha)
    assert len(jobs) == 1 and jobs[0][1] == "done" and jobs[0][3] == "1", jobs  # done, in one attempt
    assert jobs[0][2] not in BROKEN, jobs
    assert len(runs) == 1, runs

    stack.compose("down")  # the named volume stays
    volumes = subprocess.run(["docker", "volume", "ls", "-q"], capture_output=True, text=True, timeout=60).stdout
    assert stack.volume in volumes.split()
    stack.compose("up", "-d", "runner-cpu")
    stack.wait_log("watching main of /repo")
    time.sleep(6)
    assert stack.history(sha) == (jobs, runs)
