"""The kernel under Triton's interpreter on the CPU: small shapes, the benchmark's tolerances, bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ci.harness.bench import load_configs, sweep_candidates
from kernel import attn_output_proj_backward, kernel_config
from kernel.configs import M_BUCKETS, bucket_for, config_for, interpreter_active
from problem.correctness import check_output, poisoned_outputs
from problem.reference import attn_output_proj_backward_ref, make_inputs
from tests.support import PROJECT
from tests.support.kernel_checks import run_and_check

pytestmark = pytest.mark.skipif(not interpreter_active(), reason="CPU tests run under TRITON_INTERPRET=1")


# M = 1, 7, 100, 130, 256; seq_len not a multiple of any block.
@pytest.mark.parametrize(("b", "s"), [(1, 1), (1, 7), (4, 25), (2, 65), (2, 128)])
def test_matches_reference_poisoned_outputs(b: int, s: int) -> None:
    run_and_check(b, s, "cpu", seed=1000 * b + s)


def test_returns_new_tensors_in_bhsd_layout() -> None:
    go, x, w = make_inputs(3, 5, "cpu")
    ga, gw = attn_output_proj_backward(go, x, w)
    assert ga.shape == (3, 32, 5, 64) and ga.is_contiguous() and ga.dtype == torch.bfloat16
    assert gw.shape == (2048, 2048) and gw.dtype == torch.bfloat16
    # Element (b, h, s, d) is row b*S+s, column h*64+d of grad_output @ weight.
    full = go.float().reshape(-1, 2048) @ w.float()
    assert torch.allclose(ga[2, 7, 4].float(), full[2 * 5 + 4, 7 * 64 : (7 + 1) * 64], rtol=0.02, atol=0.02)


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return make_inputs(1, 4, "cpu")


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda g, x, w: (g.float(), x, w), "grad_output: dtype"),
        (lambda g, x, w: (g, x.half(), w), "reshaped: dtype"),
        (lambda g, x, w: (g, x, w.float()), "weight: dtype"),
        (lambda g, x, w: (g[0], x, w), "grad_output: expected rank 3"),
        (lambda g, x, w: (g, x[0], w), "reshaped: expected rank 3"),
        (lambda g, x, w: (g[..., :1024], x[..., :1024], w), "grad_output: hidden size"),
        (lambda g, x, w: (g, x[:, :2], w), "reshaped: shape"),
        (lambda g, x, w: (g, x, w[:1024]), "weight: expected shape"),
        (lambda g, x, w: (g, x, w[None]), "weight: expected shape"),
        (lambda g, x, w: (g[:, :0], x[:, :0], w), "grad_output: batch_size and seq_len"),
        (lambda g, x, w: (g, x.to("meta"), w), "reshaped: on meta"),
        (lambda g, x, w: (g, x, w.to("meta")), "weight: on meta"),
        (lambda g, x, w: ("no", x, w), "grad_output: expected a torch.Tensor"),
    ],
)
def test_bad_input_raises_value_error_naming_argument(mutate, match: str) -> None:
    g, x, w = mutate(*_inputs())
    with pytest.raises(ValueError, match=match):
        attn_output_proj_backward(g, x, w)


def test_bad_out_raises() -> None:
    g, x, w = _inputs()
    ga = torch.empty(1, 32, 4, 64, dtype=torch.bfloat16)
    gw = torch.empty(2048, 2048, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out\[0\] \(grad_attn_output\): expected shape"):
        attn_output_proj_backward(g, x, w, out=(ga[:, :16], gw))
    with pytest.raises(ValueError, match=r"out\[1\] \(grad_weight\): dtype"):
        attn_output_proj_backward(g, x, w, out=(ga, gw.float()))
    with pytest.raises(ValueError, match=r"out\[1\] \(grad_weight\): must be contiguous"):
        attn_output_proj_backward(g, x, w, out=(ga, gw.t()))
    with pytest.raises(ValueError, match="out: expected a pair"):
        attn_output_proj_backward(g, x, w, out=(ga,))
    # Outputs that alias inputs: grad_weight written over weight, grad_attn_output over grad_output.
    with pytest.raises(ValueError, match=r"out\[1\] \(grad_weight\): aliases the input weight"):
        attn_output_proj_backward(g, x, w, out=(ga, w))
    with pytest.raises(ValueError, match=r"out\[0\] \(grad_attn_output\): aliases the input grad_output"):
        attn_output_proj_backward(g, x, w, out=(g.view(1, 32, 4, 64), gw))
    shared = torch.empty(2048 * 2048 + 32 * 4 * 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="share memory"):
        attn_output_proj_backward(
            g, x, w, out=(shared[: 32 * 4 * 64].view(1, 32, 4, 64), shared[128 : 128 + 2048 * 2048].view(2048, 2048))
        )
    loose = torch.empty(2048 * 2048 + 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out\[1\] \(grad_weight\): must be 16-byte aligned"):
        attn_output_proj_backward(g, x, w, out=(ga, loose[1 : 1 + 2048 * 2048].view(2048, 2048)))


def test_misaligned_input_views_are_copied_not_rejected() -> None:
    g, x, w = make_inputs(1, 3, "cpu")
    buf = torch.empty(g.numel() + 1, dtype=torch.bfloat16)
    g_odd = buf[1:].view_as(g)
    g_odd.copy_(g)
    ga1, gw1 = attn_output_proj_backward(g, x, w)
    ga2, gw2 = attn_output_proj_backward(g_odd, x, w)
    assert torch.equal(ga1, ga2) and torch.equal(gw1, gw2)


def test_noncontiguous_inputs_are_not_modified_and_give_same_result() -> None:
    g, x, w = make_inputs(1, 3, "cpu")
    w_t = w.t().contiguous().t()  # same values, transposed strides
    ga1, gw1 = attn_output_proj_backward(g, x, w)
    ga2, gw2 = attn_output_proj_backward(g, x, w_t)
    assert torch.equal(ga1, ga2) and torch.equal(gw1, gw2)


def test_configs_are_keyed_by_bucket_not_by_m() -> None:
    hopper = (9, 0)
    assert {bucket_for(m) for m in range(1, 20000, 37)} <= set(M_BUCKETS)
    assert config_for(300, hopper) == config_for(500, hopper)
    assert config_for(9000, hopper) == config_for(8192, hopper)
    assert config_for(1024, (8, 0)).use_tma is False  # generic (pre-Hopper) GPUs: pointer loads
    assert config_for(1024, (10, 0)).arch == "blackwell"
    assert kernel_config(7, "cpu").arch == "interpreter"
    with pytest.raises(ValueError):
        bucket_for(0)


@pytest.mark.parametrize(
    "overrides",
    [
        {"schedule": "partitioned"},
        {"schedule": "shared", "tma_store": False},
        {"use_tma": False},
        {"device_desc": True},
        {"schedule": "partitioned", "use_tma": False},
    ],
    ids=["partitioned", "shared-ptrstore", "pointers", "device-desc", "partitioned-pointers"],
)
def test_kernel_variants_match_reference_twice(overrides: dict) -> None:
    """Both schedules, pointer loads/stores, device descriptors; twice, so no state leaks between calls."""
    from dataclasses import replace

    b, s = 2, 37
    go, x, w = make_inputs(b, s, "cpu", generator=torch.Generator().manual_seed(5))
    rga, rgw = attn_output_proj_backward_ref(go, x, w)
    cfg = replace(kernel_config(b * s, "cpu"), **overrides)
    for _ in range(2):
        ga, gw = poisoned_outputs(b, s, "cpu")
        attn_output_proj_backward(go, x, w, out=(ga, gw), config=cfg)
        assert check_output(ga, rga, b * s).ok and check_output(gw, rgw, b * s).ok


def test_sweep_candidates_are_valid_configs() -> None:
    for bucket, cands in sweep_candidates().items():
        assert bucket in M_BUCKETS
        for c in cands:
            assert 2048 % c.ga_bn == 0 and 2048 % c.gw_bm == 0 and 2048 % c.gw_bn == 0
            assert 2048 % c.bk == 0 and c.schedule in ("auto", "shared", "partitioned"), c


@pytest.mark.parametrize(
    "overrides",
    [{"ga_bn": 32}, {"bk": 48}, {"gw_bn": 96}, {"schedule": "round-robin"}, {"warp_specialize": "yes"}],
    ids=["ga_bn-not-heads", "bk", "gw_bn", "schedule", "warp_specialize"],
)
def test_bad_configs_are_refused_before_launch(overrides: dict) -> None:
    """A configuration the kernel cannot run (grad_attn tiles must cover whole heads) is a ValueError."""
    from dataclasses import replace

    go, x, w = make_inputs(1, 8, "cpu", generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="config"):
        attn_output_proj_backward(go, x, w, config=replace(kernel_config(8, "cpu"), **overrides))


@pytest.mark.parametrize("b, s", [(2, 64), (1, 128), (3, 65)], ids=["tma-2x64", "tma-1x128", "fallback-3x65"])
def test_grad_attn_tma_store_and_its_fallback(b: int, s: int) -> None:
    """grad_attn tiles stored through a (B*H, S, D) TMA descriptor when S is a multiple of the tile's rows,
    by the masked vector store otherwise; both against the reference with poisoned outputs."""
    from dataclasses import replace

    cfg = replace(kernel_config(b * s, "cpu"), ga_tma_store=True)
    go, x, w = make_inputs(b, s, "cpu", generator=torch.Generator().manual_seed(b * 1000 + s))
    rga, rgw = attn_output_proj_backward_ref(go, x, w)
    ga, gw = poisoned_outputs(b, s, "cpu")
    attn_output_proj_backward(go, x, w, out=(ga, gw), config=cfg)
    assert check_output(ga, rga, b * s).ok and check_output(gw, rgw, b * s).ok


def test_bench_configs_file_round_trips_and_bad_files_are_named(tmp_path) -> None:
    """`solci bench --configs F` reads what `--sweep --save F` writes; anything else is a ValueError naming F."""
    import json

    good = tmp_path / "best.json"
    want = {b: config_for(b, (9, 0)) for b in (256, 8192)}
    good.write_text(json.dumps({str(b): c.as_dict() for b, c in want.items()}))
    assert load_configs(str(good)) == want
    cases = {
        "missing.json": None,
        "notjson.json": "{",
        "badkey.json": '{"256": {"no_such_field": 1}}',
        "badbucket.json": json.dumps({"300": want[256].as_dict()}),
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(ValueError, match=name):
            load_configs(str(path))


def test_importing_the_kernel_module_first_keeps_the_public_function() -> None:
    """``import kernel.backward`` (the launcher's module) before ``from kernel import attn_output_proj_backward``
    gives the function, not a module (the module was once named like the function, and the package's attribute
    of that name became the module: 'module' object is not callable, in the harness as in the tests)."""
    code = (
        "import importlib, types\n"
        "from kernel.backward import launch_arguments\n"
        "from kernel import attn_output_proj_backward as f, kernel_config\n"
        "assert callable(f) and not isinstance(f, types.ModuleType), f\n"
        "mod = importlib.import_module('kernel.backward')\n"
        "assert isinstance(mod, types.ModuleType) and mod.attn_output_proj_backward is f\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
