"""The Docker executor against the real engine (skipped when no engine answers or the base image is missing:
``docker/ci_setup.sh`` provides both)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from ci.service.executors import choose_executor
from ci.service.executors.base import MeasureOptions
from ci.service.executors.docker import HISTORY_LABEL, LABEL, OWNER_LABEL, DockerExecutor, owner_id, remove_all
from ci.service.executors.local import LocalExecutor
from ci.service.runner import outcome_of
from storage.jobs import process_start, this_host
from tests.support.repo_factory import ProjectRepo, make_project_repo, small_repo

REASON = DockerExecutor.unavailable_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=f"docker executor: {REASON}")]
OPTIONS = MeasureOptions(cases="1,7", rounds=1, warmup=0, iters=2, timeout=300)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> ProjectRepo:
    return make_project_repo(tmp_path_factory.mktemp("docker") / "repo")


@pytest.fixture(scope="module")
def executor() -> DockerExecutor:
    return DockerExecutor(gpu="gputest")


def test_auto_chooses_docker_when_an_engine_answers() -> None:
    assert choose_executor("auto").name == "docker"
    assert isinstance(choose_executor("local"), LocalExecutor)


@pytest.mark.timeout(600)
def test_builds_the_commit_and_measures_inside(repo: ProjectRepo, executor: DockerExecutor) -> None:
    sha = repo.head()
    ex = executor.execute(repo.path, sha, branch="main", repo=str(repo.path), options=OPTIONS)
    assert ex.status == "ok", ex.log[-4000:]
    doc = ex.doc
    assert doc["commit"] == sha and doc["branch"] == "main" and doc["repo"] == str(repo.path)
    assert doc["mode"] == "cpu-interpreter"
    assert [c["case"] for c in doc["cases"]] == ["B1_S7"] and doc["suite"]["status"] == "pass"
    tag = executor.run_tag(sha, executor.harness_image([]) or "")
    assert f"Successfully tagged {tag}" in ex.log or f"reusing {tag}" in ex.log
    assert not executor.client.containers.list(all=True, filters={"label": f"{LABEL}=gputest"})


@pytest.mark.timeout(300)
def test_containers_have_no_network_no_root_no_writes_no_capabilities(
    repo: ProjectRepo, executor: DockerExecutor
) -> None:
    image = executor.build(repo.path, repo.head(), [])
    assert image
    probe = (
        "import socket, os\n"
        "print('interfaces', sorted(os.listdir('/sys/class/net')))\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=3); print('network: reachable')\n"
        "except OSError as e:\n"
        "    print('network: unreachable', e)\n"
        "print('uid', os.getuid())\n"
        "for path in ('/candidate/x', '/opt/solci/x', '/etc/x'):\n"
        "    try:\n"
        "        open(path, 'w'); print('writable', path)\n"
        "    except OSError as e:\n"
        "        print('read-only', path, e.errno)\n"
        "print('caps', open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
        "open('/out/probe.txt', 'w').write('ok')\n"
    )
    run = executor.run_in_image(image, ["python", "-c", probe], timeout=60, fetch="/out/probe.txt")
    assert run.status == "ok" and run.exit_code == 0, run.log
    assert "interfaces ['lo']" in run.log and "network: unreachable" in run.log
    assert "uid 10001" in run.log, "the commit's code does not run as root"
    assert "writable" not in run.log, "the root filesystem is read-only"
    assert "caps 0000000000000000" in run.log, "no capability is left"
    assert run.fetched == b"ok"


def test_run_options_lock_the_container_down(executor: DockerExecutor) -> None:
    opts = executor.run_options(timeout=60, env=None, commit="c")
    assert opts["network_mode"] == "none" and opts["read_only"] is True and opts["user"] == "10001:10001"
    assert opts["cap_drop"] == ["ALL"] and "no-new-privileges" in opts["security_opt"]
    assert opts["pids_limit"] > 0 and opts["labels"][LABEL] == "gputest"
    total = executor.client.info()["MemTotal"]
    assert int(opts["mem_limit"].rstrip("m")) * 2**20 <= 0.8 * total + 2**20, "below the host's memory"


@pytest.mark.timeout(600)
def test_the_commits_own_dockerfile_is_never_used(repo: ProjectRepo, executor: DockerExecutor) -> None:
    """The harness image is the runner's: a commit that rewrites its Dockerfile (here: a build step that needs
    the network, and a measurement of its own) is measured like any other; nothing of it runs at build time."""
    base = repo.head()
    sha = repo.commit_file(
        "Dockerfile", "FROM scratch\nRUN pip install solci-no-such-package\n", "own Dockerfile", append=False
    )
    try:
        ex = executor.execute(repo.path, sha, branch="main", repo=str(repo.path), options=OPTIONS)
    finally:
        repo.revert_to(base, "undo own Dockerfile")
    assert ex.status == "ok" and ex.doc is not None, ex.log[-3000:]
    assert "solci-no-such-package" not in ex.log and ex.doc["suite"]["status"] == "pass"
    assert ex.doc["candidate"] is True and ex.doc["harness"]


@pytest.mark.timeout(300)
def test_timeout_kills_the_container(repo: ProjectRepo, executor: DockerExecutor) -> None:
    opts = MeasureOptions(cases="1,7", rounds=1, warmup=0, iters=50, timeout=8)
    ex = executor.execute(repo.path, repo.head(), branch="main", repo=str(repo.path), options=opts)
    assert ex.status == "timed_out", ex.log[-3000:]
    assert not executor.client.containers.list(all=True, filters={"label": f"{LABEL}=gputest"})


@pytest.mark.timeout(120)
def test_unimportable_kernel_crashes(repo: ProjectRepo, executor: DockerExecutor) -> None:
    base = repo.head()
    sha = repo.broken()
    try:
        ex = executor.execute(repo.path, sha, branch="main", repo=str(repo.path), options=OPTIONS)
    finally:
        repo.revert_to(base, "undo broken")
    # measure itself starts (it imports the kernel only in its worker), so every case is recorded as an error
    # carrying the SyntaxError, and the runner classifies the commit as crashed
    assert ex.status == "ok" and ex.doc is not None, ex.log[-3000:]
    assert {c["status"] for c in ex.doc["cases"]} == {"error"}
    assert all("SyntaxError" in (c["error"] or "") for c in ex.doc["cases"])
    assert outcome_of("broken", {c["status"] for c in ex.doc["cases"]}) == "crashed"


def test_context_is_the_commits_tree_under_candidate_with_the_runners_dockerfile(
    tmp_path: Path, executor: DockerExecutor
) -> None:
    repo = small_repo(tmp_path / "plain", n_commits=1)
    data, dockerfile = executor.build_context(repo.path, repo.head(), "solci-harness:test")
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        names = set(tf.getnames())
        text = tf.extractfile(dockerfile).read().decode()
    assert "candidate/notes.txt" in names and dockerfile.startswith("Dockerfile.solci-")
    assert text.startswith("FROM solci-harness:test") and "COPY --chown=0:0 candidate /candidate" in text


def test_cleanup_stale_removes_only_what_dead_runners_of_its_history_and_slot_left(
    executor: DockerExecutor, monkeypatch
) -> None:
    """Issue 19, finding 7: cleanup used to remove every container of the slot's label, a live runner's of
    another history too. Now only a dead owner's (this host: pid gone or reused) of this history and slot, or,
    owned under another host name, one that exited longer than a lease timeout ago."""
    monkeypatch.setenv("SOLCI_LEASE_TIMEOUT", "0.001")  # "longer than a lease timeout ago": any exited container
    proc = subprocess.Popen(["sleep", "60"])
    dead = f"{this_host()}:{proc.pid}:{process_start(proc.pid)}"
    proc.kill()
    proc.wait()
    mine = {LABEL: "gputest", HISTORY_LABEL: executor.history}
    made: list = []
    volumes: list = []

    def container(labels: dict[str, str], *, exited: bool = False):
        c = executor.client.containers.create("solci-base:bookworm", ["true"], labels=labels, network_mode="none")
        made.append(c)
        if exited:
            c.start()
            c.wait(timeout=60)
        return c

    try:
        gone = container({**mine, OWNER_LABEL: dead})
        abandoned = container({**mine, OWNER_LABEL: "another-host:7:7"}, exited=True)  # a recreated runner's
        kept = [
            container({**mine, OWNER_LABEL: owner_id()}),  # a live runner's (this process)
            container({**mine, OWNER_LABEL: "another-host:7:7"}),  # another host's, not finished
            container({LABEL: "gputest", HISTORY_LABEL: "another-history", OWNER_LABEL: dead}),
            container({LABEL: "gputest", OWNER_LABEL: dead}),  # no history: an older runner's, not known here
            container({LABEL: "gpuother", HISTORY_LABEL: executor.history, OWNER_LABEL: dead}),
        ]
        volumes += [
            executor.client.volumes.create(
                name=f"{abandoned.name}-out", labels={**mine, OWNER_LABEL: "another-host:7:7"}
            ),
            executor.client.volumes.create(name=f"solci-test-dead-{proc.pid}", labels={**mine, OWNER_LABEL: dead}),
            executor.client.volumes.create(
                name=f"solci-test-live-{proc.pid}", labels={**mine, OWNER_LABEL: owner_id()}
            ),
        ]
        removed = executor.cleanup_stale()
        assert sorted(removed) == sorted([gone.name, abandoned.name, volumes[0].name, volumes[1].name])
        left = {c.name for c in executor.client.containers.list(all=True, filters={"label": "solci.owner"})}
        assert {c.name for c in kept} <= left and gone.name not in left and abandoned.name not in left
        assert volumes[2].name in {v.name for v in executor.client.volumes.list()}
    finally:
        for thing in [*made, *volumes]:
            try:
                thing.remove(force=True)
            except Exception:
                pass


def test_prune_keeps_the_newest_images(repo: ProjectRepo, executor: DockerExecutor) -> None:
    tag = executor.build(repo.path, repo.head(), [])
    assert tag
    executor.prune_images(keep=1, protect=tag)
    tags = [t for im in executor.client.images.list(name="solci-run") for t in im.tags]
    assert tag in tags and len(tags) <= 2


@pytest.mark.timeout(300)
def test_a_commits_image_is_built_once_and_reused(repo: ProjectRepo, executor: DockerExecutor) -> None:
    """Each confirmation run measures the same commit again: its image is built once per harness image,
    then reused (no rebuild, the same tag), and a new harness makes a new one."""
    first: list[str] = []
    tag = executor.build(repo.path, repo.head(), first)
    again: list[str] = []
    assert tag and executor.build(repo.path, repo.head(), again) == tag
    assert any(line.startswith(f"[solci] reusing {tag}") for line in again), again
    assert tag.startswith(f"solci-run:{repo.head()}-")
    harness = executor.harness_image([])
    assert harness and tag.endswith(harness.rsplit(":", 1)[1])


def test_what_the_engine_refuses_to_remove_is_retried_and_named_never_dropped(executor: DockerExecutor) -> None:
    """CI (stop 25) found a measuring container left behind after a run: removal errors were swallowed. A volume
    its container still holds is refused; ``remove_all`` retries, then names it; removing the container first
    removes both; what is gone already counts as removed."""
    labels = {LABEL: "gputest", HISTORY_LABEL: executor.history, OWNER_LABEL: owner_id()}
    volume = executor.client.volumes.create(name=f"solci-test-held-{owner_id().replace(':', '-')}", labels=labels)
    container = executor.client.containers.create(
        "solci-base:bookworm", ["true"], labels=labels, network_mode="none", volumes={volume.name: {"bind": "/out"}}
    )
    try:
        left = remove_all([volume], attempts=2, pause_s=0.01)
        assert len(left) == 1 and left[0].startswith(f"{volume.name}: "), left
        assert remove_all([container, volume], pause_s=0.01) == []
        assert remove_all([container, volume], pause_s=0.01) == []  # gone already
        names = {c.name for c in executor.client.containers.list(all=True, filters={"label": "solci.gpu=gputest"})}
        assert container.name not in names
        assert volume.name not in {v.name for v in executor.client.volumes.list()}
    finally:
        remove_all([container, volume], pause_s=0.01)
