"""Fake kernels for ``solci measure`` tests: ``--impl tests/support/fake_kernels.py:NAME``.

Each takes the kernel's signature ``(grad_output, reshaped, weight, *, out=None)``. ``mixed`` picks a
behaviour by batch size, so one run covers every status (see BEHAVIOUR_BY_BATCH).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import triton
import triton.language as tl

from problem.reference import attn_output_proj_backward_ref


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def _outputs(go: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor] | None):
    if out is not None:
        return out
    b, s, _ = go.shape
    return (
        torch.empty(b, 32, s, 64, dtype=go.dtype, device=go.device),
        torch.empty(2048, 2048, dtype=go.dtype, device=go.device),
    )


def good(go, x, w, *, out=None):
    """Correct: the fp32 reference written into out."""
    ga, gw = _outputs(go, out)
    ref_a, ref_w = attn_output_proj_backward_ref(go, x, w)
    ga.copy_(ref_a)
    gw.copy_(ref_w)
    return ga, gw


def raises(go, x, w, *, out=None):
    raise RuntimeError("fake kernel failure")


def hangs(go, x, w, *, out=None):
    time.sleep(3600)


def exits(go, x, w, *, out=None):
    os._exit(7)


def segfaults(go, x, w, *, out=None):
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(60)


def wrong(go, x, w, *, out=None):
    """Finite, nonzero, wrong values."""
    ga, gw = good(go, x, w, out=out)
    ga.mul_(1.5)
    gw.add_(1.0)
    return ga, gw


def unwritten(go, x, w, *, out=None):
    """Correct except one element of grad_attn_output that is never written (the poison must catch it)."""
    ga, gw = _outputs(go, out)
    ref_a, ref_w = attn_output_proj_backward_ref(go, x, w)
    flat_ref = ref_a.reshape(-1)
    ga.reshape(-1)[1:].copy_(flat_ref[1:])
    gw.copy_(ref_w)
    return ga, gw


def mutates(go, x, w, *, out=None):
    """Correct outputs, but one element of an input is overwritten."""
    res = good(go, x, w, out=out)
    x.view(-1)[0] = x.view(-1)[0] + 1
    return res


def illegal_address(go, x, w, *, out=None):
    """A store far outside any allocation: on a GPU, an illegal address that breaks the CUDA context."""
    import triton
    import triton.language as tl

    @triton.jit
    def _bad_store(ptr):
        tl.store(ptr + (1 << 40), 1.0)

    ga, gw = _outputs(go, out)
    _bad_store[(1,)](gw)
    return ga, gw


_CACHE: dict[tuple, tuple[torch.Tensor, ...]] = {}


def _called_by_the_timer() -> bool:
    """Whether the caller is the harness's timed loop (ci/harness/timing.py), found through the caller's frame."""
    return os.path.basename(sys._getframe(2).f_code.co_filename) == "timing.py"


def caches(go, x, w, *, out=None):
    """Correct wherever it is checked; inside a timed loop it computes honestly on its first call only and
    afterwards copies its cached outputs into ``out=`` (fast, and right only while the inputs never change)."""
    if not _called_by_the_timer():
        return good(go, x, w, out=out)
    ga, gw = _outputs(go, out)
    key = ("outputs", tuple(go.shape))
    if key not in _CACHE:
        _CACHE[key] = tuple(t.clone() for t in good(go, x, w, out=(ga, gw)))
    else:
        ga.copy_(_CACHE[key][0])
        gw.copy_(_CACHE[key][1])
    return ga, gw


def caches_inputs_too(go, x, w, *, out=None):
    """As ``caches``, and it also overwrites each later call's inputs with the first call's, so its outputs
    match the inputs it leaves behind."""
    if not _called_by_the_timer():
        return good(go, x, w, out=out)
    ga, gw = _outputs(go, out)
    key = ("inputs", tuple(go.shape))
    if key not in _CACHE:
        _CACHE[key] = tuple(t.clone() for t in (go, x, w, *good(go, x, w, out=(ga, gw))))
    else:
        for dst, src in zip((go, x, w, ga, gw), _CACHE[key], strict=True):
            dst.copy_(src)
    return ga, gw


def gpu_mixed(go, x, w, *, out=None):
    """Batch 1: illegal address; otherwise the project's kernel (its own launches: replayable)."""
    from kernel import attn_output_proj_backward

    fn = illegal_address if go.shape[0] == 1 else attn_output_proj_backward
    return fn(go, x, w, out=out)


_CALLS = [0]


def alternates(go, x, w, *, out=None):
    """The project's kernel, launched once on even calls and twice on odd ones: a launch sequence that differs
    between calls (not replayable)."""
    from kernel import attn_output_proj_backward

    _CALLS[0] += 1
    res = attn_output_proj_backward(go, x, w, out=out)
    if _CALLS[0] % 2:
        res = attn_output_proj_backward(go, x, w, out=out)
    return res


def reads_back(go, x, w, *, out=None):
    """The project's kernel, after reading one element of grad_output back to the host (a copy to the host
    during the call: not replayable)."""
    from kernel import attn_output_proj_backward

    if float(go[0, 0, 0].item()) > 1e30:
        raise AssertionError("unreachable")
    return attn_output_proj_backward(go, x, w, out=out)


def own_scratch(go, x, w, *, out=None):
    """The project's kernel on a copy of grad_output the kernel makes with its own Triton launch into a buffer it
    allocates (scratch the plan must describe and the replay allocate)."""
    from kernel import attn_output_proj_backward

    tmp = torch.empty_like(go)
    n = go.numel()
    _copy[(triton.cdiv(n, 1024),)](go, tmp, n, BLOCK=1024)
    return attn_output_proj_backward(tmp, x, w, out=out)


def floods_stderr(go, x, w, *, out=None):
    """Prints without end (bounded here at 64 MiB, past the worker's file limit the test sets)."""
    chunk = "x" * (1 << 20) + "\n"
    for _ in range(64):
        sys.stderr.write(chunk)
    sys.stderr.flush()
    return good(go, x, w, out=out)


def _message_streams() -> list:
    """The worker's message stream(s), found among the process's objects as a hostile kernel would."""
    import gc
    import io

    return [
        obj
        for obj in gc.get_objects()
        if isinstance(obj, io.TextIOWrapper)
        and obj not in (sys.stdin, sys.stderr, sys.__stderr__)
        and obj.writable()
        and not obj.closed
    ]


def floods_messages(go, x, w, *, out=None):
    """Writes 4 MiB without a newline to its process's message stream, then computes correctly."""
    for stream in _message_streams():
        stream.write("x" * (4 << 20))
        stream.flush()
    return good(go, x, w, out=out)


def floods_message_lines(go, x, w, *, out=None):
    """Writes 40 lines of 100 KiB (each shorter than a line limit, 4 MiB in all) to its message stream."""
    for stream in _message_streams():
        for _ in range(40):
            stream.write("y" * (100 << 10) + "\n")
        stream.flush()
    return good(go, x, w, out=out)


BEHAVIOUR_BY_BATCH = {1: raises, 2: wrong, 3: unwritten, 4: mutates, 5: segfaults, 6: good, 7: hangs, 8: good, 9: exits}


def mixed(go, x, w, *, out=None):
    fn = BEHAVIOUR_BY_BATCH.get(go.shape[0], good)
    return fn(go, x, w, out=out)
