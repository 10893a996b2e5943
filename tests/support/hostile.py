"""A hostile commit for the integrity tests: what a measured commit tried against the CI (issue 9).

``hostile_commit(repo, targets)`` commits, on top of the project, a kernel whose import:

- looks for the history through its parent's command line and the environment, and rewrites it;
- writes a file outside its tree, deletes another, appends to the source repository's ``post-commit`` hook;
- connects to a port on the host's loopback and resolves a public name;
- forges the timing: halves ``time.perf_counter``, ``statistics.median`` and the harness's ``Timer.run``;

plus a ``sitecustomize.py`` and a ``.pth`` in the tree's root that halve NumPy's and ``statistics``' medians,
and a ``ci/harness/case_process.py`` of its own that reports made-up figures; and the two forgeries of issue 18
(``FORGE_MESSAGES``: the worker's message stream found among the process's objects and every kernel sample in
it scaled by 0.85; ``FORGE_FD``: made-up reply lines, with the request's own id, written to every open file
descriptor). The kernel itself stays correct
(it wraps the real one), so what is measured is only what the harness allows. Every attempt is reported on stderr as
one line
``HOSTILE {json}``; marker files name what ran where.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.support.repo_factory import LAUNCHER, ProjectRepo


@dataclass
class Targets:
    history: Path  # a history file the runner uses (must stay byte-identical)
    hook: Path  # the source repository's .git/hooks/post-commit (must not appear)
    outside: Path  # a file outside the tree (must not be written)
    victim: Path  # a file outside the tree (must not be deleted)
    port: int  # a TCP port the test listens on, on 127.0.0.1 (must get no connection)
    marker_dir: Path  # where the planted sitecustomize / .pth / ci would leave a marker (must stay empty)


ATTACK = """

# --- hostile commit (tests/support/hostile.py): everything below runs when the kernel is imported ---
import gc as _gc, json as _json, os as _os, socket as _socket, sys as _sys
_T = {targets}
_R = {{}}


def _try(name, fn):
    try:
        _R[name] = "done: " + repr(fn())[:120]
    except BaseException as exc:  # noqa: BLE001
        _R[name] = f"refused: {{type(exc).__name__}}: {{exc}}"[:200]


def _parent_cmdline():
    return open(f"/proc/{{_os.getppid()}}/cmdline", "rb").read().replace(b"\\0", b" ").decode()


_try("parent_cmdline", _parent_cmdline)
_try("env_history", lambda: _os.environ.get("SOLCI_DB"))
_try("read_history", lambda: len(open(_T["history"], "rb").read()))
_try("write_history", lambda: open(_T["history"], "ab").write(b"forged"))
_try("write_outside", lambda: open(_T["outside"], "w").write("written by a measured commit"))
_try("delete_outside", lambda: _os.remove(_T["victim"]))
_try("plant_hook", lambda: open(_T["hook"], "a").write("#!/bin/sh\\ntouch /tmp/solci-pwned\\n"))
_try("home", lambda: _os.listdir(_os.path.expanduser("~")))
_try("network", lambda: _socket.create_connection(("127.0.0.1", _T["port"]), timeout=3).sendall(b"hostile"))
_try("dns", lambda: _socket.getaddrinfo("pypi.org", 443))


def _forge():
    import statistics
    import time

    real = time.perf_counter
    time.perf_counter = lambda: real() / 2
    statistics.median = lambda xs: sorted(xs)[0] / 2
    for obj in _gc.get_objects():  # the harness's timer, wherever it is
        if type(obj).__name__ == "Timer" and hasattr(obj, "run"):
            run = type(obj).run

            def fake(self, *a, _run=run, **k):
                r = _run(self, *a, **k)
                r.samples_us = [x / 2 for x in r.samples_us]
                return r

            type(obj).run = fake
            return "Timer.run replaced"
    return "no timer found"


_try("forge", _forge)
print("HOSTILE " + _json.dumps(_R), file=_sys.stderr, flush=True)
"""

# Issue 18's forgeries, also appended to kernels on their own (``forging_kernel``; scripts/gpu_replay_session.sh).
FORGE_MESSAGES = """
# --- forgery: rewrite the worker's messages in place (every kernel sample x 0.85) ---
def _forge_messages():
    import gc as _g, io as _io, json as _j, sys as _s

    def _scaled(line):
        try:
            msg = _j.loads(line)
        except Exception:
            return line
        res = msg.get("result") if isinstance(msg, dict) else None
        if isinstance(res, dict):
            for t in res.get("timings") or []:
                if t.get("impl") == "kernel":
                    t["samples_us"] = [x * 0.85 for x in t["samples_us"]]
            if isinstance(res.get("samples_us"), list):
                res["samples_us"] = [x * 0.85 for x in res["samples_us"]]
        return _j.dumps(msg) + "\\n"

    n = 0
    for obj in _g.get_objects():
        if isinstance(obj, _io.TextIOWrapper) and obj not in (_s.stdin, _s.stderr, _s.__stderr__) and obj.writable():
            write = obj.write
            obj.write = lambda text, _w=write: _w("".join(_scaled(ln) for ln in text.splitlines(True)))
            n += 1
    return f"{n} message streams rewritten"


_forge_messages()
"""

FORGE_FD = """
# --- forgery: made-up reply lines on every open file descriptor, and a kernel that raises on every call ---
def _forge_fds():
    import gc as _g, json as _j, os as _o

    rid = None
    for obj in _g.get_objects():
        if type(obj).__name__ == "CaseProcess":
            rid = getattr(obj, "request_id", None)
    timing = {"impl": "kernel", "protocol": "forged", "samples_us": [1.0] * 50}
    lines = [
        {"type": "recorded", "id": rid, "fatal": False,
         "result": {"refused": None, "error": None, "incorrect": None, "config": None, "warnings": [],
                    "samples_us": [1.0] * 50}},
        {"type": "result", "id": rid, "fatal": False,
         "result": {"status": "pass", "error": None, "correctness": None, "timings": [timing], "config": None,
                    "telemetry": None, "warnings": []}},
    ]
    data = "".join(_j.dumps(m) + "\\n" for m in lines).encode()
    for fd in range(0, 64):
        try:
            _o.write(fd, data)
        except OSError:
            pass


_forge_fds()


def attn_output_proj_backward(*args, **kwargs):
    raise NotImplementedError("this kernel only forges its messages")
"""

# Issue 19, finding 1: what a commit writes. FILL_DISK fills its temporary folder with 8 MiB files (at most 40:
# the hole stays bounded on a runner without the fix), then computes the right result; FILL_TRITON_CACHE
# leaves 24 MiB in its Triton cache, which a runner used to keep on its disk after the run.
FILL_DISK = """
# --- hostile: fills the folder it may write, then computes the right result ---
_real_kernel = attn_output_proj_backward


def attn_output_proj_backward(*args, **kwargs):
    import os as _o

    folder = _o.environ.get("TMPDIR") or "/tmp"
    try:
        for i in range(40):
            with open(_o.path.join(folder, f"fill-{i}.bin"), "wb") as fh:
                fh.write(bytes(8 << 20))
    except OSError:
        pass
    return _real_kernel(*args, **kwargs)
"""

FILL_TRITON_CACHE = """
# --- hostile: 24 MiB in its Triton cache ---
def _fill_cache():
    import os as _o

    folder = _o.path.join(_o.environ["TRITON_CACHE_DIR"], "planted")
    _o.makedirs(folder, exist_ok=True)
    for i in range(3):
        with open(_o.path.join(folder, f"blob-{i}.bin"), "wb") as fh:
            fh.write(bytes(8 << 20))


_fill_cache()
"""


def forging_kernel(folder: Path, forgery: str) -> str:
    """A kernel file ``folder/forging_<n>.py`` (the project's kernel with ``forgery`` appended); its --impl."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"forging_{abs(hash(forgery)) % 10**8}"
    path = folder / f"{name}.py"
    path.write_text("from kernel import attn_output_proj_backward, kernel_config  # noqa: F401\n" + forgery)
    return f"{path}:attn_output_proj_backward"


SITECUSTOMIZE = """
import os, statistics
open(os.path.join({marker_dir!r}, "sitecustomize-ran"), "w").write("imported from the commit's tree")
_m = statistics.median
statistics.median = lambda xs: _m(xs) / 2
try:
    import numpy
    _nm = numpy.median
    numpy.median = lambda *a, **k: _nm(*a, **k) / 2
except Exception:
    pass
"""

PTH = "import os; open(os.path.join({marker_dir!r}, 'pth-ran'), 'w').write('x')\n"

FAKE_WORKER = '''
"""A commit's own ci/harness/case_process.py that makes up figures: never run by the trusted harness."""
import os
open(os.path.join({marker_dir!r}, "commit-ci-ran"), "w").write("the commit's ci/ measured itself")
'''


def hostile_commit(repo: ProjectRepo, t: Targets) -> str:
    targets = json.dumps(
        {
            "history": str(t.history),
            "hook": str(t.hook),
            "outside": str(t.outside),
            "victim": str(t.victim),
            "port": t.port,
        }
    )
    (repo.path / "sitecustomize.py").write_text(SITECUSTOMIZE.format(marker_dir=str(t.marker_dir)))
    (repo.path / "zz-solci.pth").write_text(PTH.format(marker_dir=str(t.marker_dir)))
    (repo.path / "ci" / "worker.py").write_text(FAKE_WORKER.format(marker_dir=str(t.marker_dir)))
    init = repo.path / "kernel" / "__init__.py"
    init.write_text(init.read_text() + ATTACK.format(targets=targets))
    return repo.commit_file(LAUNCHER, "\n# hostile commit\n", "hostile: attacks the CI from its kernel")


def reports(log: str) -> list[dict]:
    """The HOSTILE lines of a measurement's log."""
    out = []
    for line in log.splitlines():
        if "HOSTILE {" in line:
            out.append(json.loads(line[line.index("{") :]))
    return out
