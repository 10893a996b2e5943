"""``solci measure``: statuses and isolation with fake kernels, score arithmetic, the real kernel end to end."""

from __future__ import annotations

import json

import pytest
import torch

from ci.cli.main import main
from ci.harness.measure import CaseProcessPool, Isolation, assemble_case, case_score, resolve_cases, suite_summary
from ci.harness.timing import Protocol, make_protocols
from problem.correctness import check_rounds as check_correctness
from problem.workload import CASES, SMOKE_CASES, Case, t_sol_us
from storage.result import validate
from tests.support import PROJECT
from tests.support import fake_kernels as fk
from tests.support.hostile import FORGE_FD, forging_kernel
from tests.support.measure import FAKES, run_measure

# ------------------------------------------------------------------------------------------------ fake kernels
# Batch sizes of tests/support/fake_kernels.py's BEHAVIOUR_BY_BATCH, in run order; each crash/hang is followed by a
# good case, which must still pass in a fresh worker.
MIXED_EXPECTED = {
    1: "error",
    2: "incorrect",
    3: "incorrect",
    4: "incorrect",
    5: "error",
    6: "pass",
    7: "timeout",
    8: "pass",
    9: "error",
    10: "pass",
}


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixed")
    # seq_len 1 keeps each case's bf16 baselines (eager, cuBLAS: a 2048x2048 weight on the CPU) near a second,
    # so the good cases stay well inside the case timeout on a slow 2-core machine; the hang uses all of it
    cases = " ".join(f"{b},1" for b in MIXED_EXPECTED)
    return run_measure(
        tmp,
        "--mode",
        "cpu-interpreter",
        "--cases",
        cases,
        "--impl",
        f"{FAKES}:mixed",
        "--case-timeout",
        "20",
        "--commit",
        "abc123",
        "--branch",
        "feature",
        "--repo",
        "example/repo",
    )


def test_mixed_run_document_is_valid(mixed_run):
    rc, doc, err = mixed_run
    assert rc == 1, err
    validate(doc)
    assert (doc["commit"], doc["branch"], doc["repo"]) == ("abc123", "feature", "example/repo")
    assert doc["mode"] == "cpu-interpreter" and doc["hardware"]["label"] == "cpu-interpreter"
    assert doc["suite"]["status"] == "error" and doc["suite"]["n_pass"] == 3
    assert doc["suite"]["geomean_us"] is None and doc["suite"]["score"] is None


def _case(doc: dict, b: int) -> dict:
    return next(c for c in doc["cases"] if c["batch_size"] == b)


def test_every_status(mixed_run):
    _, doc, _ = mixed_run
    assert {c["batch_size"]: c["status"] for c in doc["cases"]} == MIXED_EXPECTED


def test_raise_is_error_with_message(mixed_run):
    c = _case(mixed_run[1], 1)
    assert "fake kernel failure" in c["error"] and c["median_us"] is None


def test_wrong_values_incorrect(mixed_run):
    c = _case(mixed_run[1], 2)
    assert "match" in c["error"] and c["correctness"]["outputs"]["grad_weight"]["match_fraction"] < 0.99
    assert c["timings"] and {t["impl"] for t in c["timings"]} == {"eager", "cublas"}  # baselines still timed


def test_unwritten_element_incorrect(mixed_run):
    c = _case(mixed_run[1], 3)
    assert c["correctness"]["outputs"]["grad_attn_output"]["nonfinite"] == 1
    assert c["correctness"]["outputs"]["grad_weight"]["nonfinite"] == 0
    assert "NaN" in c["error"]


def test_mutated_input_incorrect(mixed_run):
    c = _case(mixed_run[1], 4)
    assert c["correctness"]["inputs_unchanged"] is False and "reshaped was modified" in c["error"]


def test_crash_is_isolated(mixed_run):
    _, doc, _ = mixed_run
    assert "SIGSEGV" in _case(doc, 5)["error"] and "correctness" in _case(doc, 5)["error"]
    assert "exit code 7" in _case(doc, 9)["error"]
    assert _case(doc, 6)["status"] == "pass" and _case(doc, 10)["status"] == "pass"
    # the judge once; the recording process first, then again after each crash and after the hang
    assert doc["worker_starts"] == 5


def test_hang_is_timeout_and_next_case_runs(mixed_run):
    _, doc, _ = mixed_run
    assert "timed out after 20 s" in _case(doc, 7)["error"]
    ok = _case(doc, 8)
    assert ok["status"] == "pass" and ok["median_us"] > 0
    assert {t["impl"] for t in ok["timings"]} == {"kernel", "eager", "cublas"}


def test_good_case_figures(mixed_run):
    _, doc, _ = mixed_run
    c = _case(doc, 6)
    (proto,) = doc["protocols"]
    assert all(t["protocol"] == proto["hash"] == doc["protocol"] for t in c["timings"])
    kernel = next(t for t in c["timings"] if t["impl"] == "kernel")
    assert len(kernel["samples_us"]) == proto["iters"] and c["median_us"] == kernel["median_us"]
    assert c["t_sol_us"] is None and c["score"] is None  # no T_SOL without a GPU
    assert c["correctness"]["rounds_run"] == proto["rounds"]


# ------------------------------------------------------------------------------------------------ in-process checks
def test_correctness_check_directly():
    cpu = torch.device("cpu")
    assert check_correctness(fk.good, 1, 3, cpu, rounds=2, seed=0).ok
    bad = check_correctness(fk.unwritten, 1, 3, cpu, rounds=2, seed=0)
    assert not bad.ok and bad.doc["rounds_run"] == 1 and bad.doc["outputs"]["grad_attn_output"]["nonfinite"] == 1
    assert not check_correctness(fk.mutates, 1, 3, cpu, rounds=1, seed=0).ok

    def not_into_out(go, x, w, *, out):
        return fk.good(go, x, w)

    res = check_correctness(not_into_out, 1, 3, cpu, rounds=1, seed=0)
    assert not res.ok and "not written into the out= tensor" in res.reason


# ------------------------------------------------------------------------------------------------ scores
def test_case_score_arithmetic():
    # S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)): T_SOL 10, T_b 30, T_k 20 -> 1 / (1 + 10/20) = 2/3
    assert case_score("pass", 20.0, 10.0, 30.0) == pytest.approx(2 / 3)
    assert case_score("pass", 30.0, 10.0, 30.0) == pytest.approx(0.5)  # the baseline scores 0.5
    assert case_score("pass", 10.0, 10.0, 30.0) == pytest.approx(1.0)  # T_SOL scores 1
    assert case_score("incorrect", 20.0, 10.0, 30.0) == 0.0
    assert case_score("timeout", None, 10.0, 30.0) == 0.0
    assert case_score("pass", 20.0, None, 30.0) is None  # no T_SOL (interpreter / unknown GPU)
    assert case_score("pass", 20.0, 10.0, None) is None  # no baseline


def test_t_sol_and_score_in_a_case_record():
    p = Protocol("cuda_events", 10, 10, 1, l2_flush=True)  # one timed iteration: one sample
    timings = [
        {"impl": i, "protocol": p.hash, "samples_us": [v], "median_us": v}
        for i, v in (("kernel", 20.0), ("eager", 30.0), ("cublas", 18.0))
    ]
    rec = assemble_case(Case(1, 256), {"status": "pass", "timings": timings}, [p], "H200", "gpu", 1.0)
    # H200: max(4*256*2048^2 / 989e12, 2*(3*256*2048 + 2*2048^2) / 4.8e12) s = max(4.3429, 4.1506) us
    t_sol = 4 * 256 * 2048**2 / 989e12 * 1e6
    assert rec["t_sol_us"] == pytest.approx(t_sol) == pytest.approx(t_sol_us(256, "H200"))
    assert rec["score"] == pytest.approx(1 / (1 + (20 - t_sol) / (30 - t_sol)))
    assert (rec["median_us"], rec["eager_us"], rec["cublas_us"]) == (20.0, 30.0, 18.0)
    failed = assemble_case(Case(1, 256), {"status": "incorrect", "timings": timings}, [p], "H200", "gpu", 1.0)
    assert failed["median_us"] is None and failed["score"] == 0.0


def _rec(status, k, e, c, score, t_sol=10.0):
    return {
        "status": status,
        "median_us": k,
        "eager_us": e,
        "cublas_us": c,
        "score": score,
        "t_sol_us": t_sol,
        "timings": [],
    }


def test_suite_summary_arithmetic():
    cases = [_rec("pass", 20.0, 40.0, 10.0, 0.6), _rec("pass", 80.0, 160.0, 40.0, 0.8)]
    s = suite_summary(cases, "h")
    assert s["status"] == "pass" and (s["n_cases"], s["n_pass"]) == (2, 2)
    assert s["geomean_us"] == pytest.approx(40.0)  # sqrt(20*80)
    assert s["geomean_eager_us"] == pytest.approx(80.0) and s["geomean_cublas_us"] == pytest.approx(20.0)
    assert s["ratio_vs_cublas"] == pytest.approx(2.0) and s["ratio_vs_eager"] == pytest.approx(0.5)
    assert s["score"] == pytest.approx(0.7)
    failed = suite_summary([*cases, _rec("incorrect", None, 90.0, 30.0, 0.0)], "h")
    assert failed["status"] == "incorrect" and failed["geomean_us"] is None
    assert failed["score"] == pytest.approx((0.6 + 0.8 + 0.0) / 3)  # a failed case scores 0 in the mean
    assert suite_summary([*cases, _rec("timeout", None, None, None, 0.0)], "h")["status"] == "error"


# ------------------------------------------------------------------------------------------------ usage
def test_resolve_cases():
    assert resolve_cases(None, "gpu", False) == list(CASES)
    assert resolve_cases(None, "cpu-interpreter", False) == list(SMOKE_CASES)
    assert resolve_cases([[Case(1, 7)], ["smoke"]], "cpu-interpreter", False) == list(SMOKE_CASES)
    with pytest.raises(ValueError, match="--force"):
        resolve_cases([["all"]], "cpu-interpreter", False)
    assert len(resolve_cases([["all"]], "cpu-interpreter", True)) == len(CASES)


@pytest.mark.parametrize(
    "argv",
    [
        ["measure", "--cases", "four,128"],
        ["measure", "--cases", "1;2"],
        ["measure", "--iters", "0"],
        ["measure", "--impl", "no_colon"],
    ],
)
def test_bad_usage_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_all_cases_refused_without_gpu(capsys):
    assert main(["measure", "--mode", "cpu-interpreter", "--cases", "all"]) == 2
    assert "--force" in capsys.readouterr().err


def test_protocol_settings_reach_the_document(tmp_path):
    rc, doc, err = run_measure(
        tmp_path,
        "--mode",
        "cpu-interpreter",
        "--cases",
        "1,2",
        "--impl",
        f"{FAKES}:good",
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--iters",
        "3",
        "--no-baselines",
    )
    assert rc == 0, err
    validate(doc)
    (expected,) = make_protocols("cpu-interpreter", rounds=1, warmup=0, iters=3)
    assert doc["protocol"] == expected.hash != make_protocols("cpu-interpreter")[0].hash
    c = doc["cases"][0]
    assert [t["impl"] for t in c["timings"]] == ["kernel"] and len(c["timings"][0]["samples_us"]) == 3


# ------------------------------------------------------------------------------------------------ real kernel
def test_real_kernel_under_the_interpreter(tmp_path):
    rc, doc, err = run_measure(tmp_path, "--mode", "cpu-interpreter", "--cases", "1,7")
    assert rc == 0, err
    validate(doc)
    (c,) = doc["cases"]
    assert c["status"] == "pass" and c["case"] == "B1_S7" and c["median_us"] > 0
    assert doc["hardware"]["label"] == "cpu-interpreter" and doc["protocols"][0]["timer"] == "wall_clock"
    assert {t["impl"] for t in c["timings"]} == {"kernel", "eager", "cublas"}
    assert c["config"] is not None and c["t_sol_us"] is None
    assert doc["suite"]["geomean_us"] == pytest.approx(c["median_us"])
    assert doc["measured_by"] == "interpreter"  # recorded by the kernel's process, judged by the harness's


# ------------------------------------------------------------------------------------------------ issue 18
def test_a_kernel_that_raises_but_forges_its_replies_is_an_error_not_a_pass(tmp_path):
    """Issue 18 (seen on the CPU): a kernel raising on every call wrote one made-up PASSED result line to the pipe
    at import, and the parent took it. Now the parent takes only replies with its request's id (the forgery
    finds that id too), believes no figure or verdict of the kernel's process, and the judge finds no outputs."""
    impl = forging_kernel(tmp_path / "forge", FORGE_FD)
    rc, doc, err = run_measure(tmp_path, "--mode", "cpu-interpreter", "--cases", "1,3", "--impl", impl)
    assert rc == 1, err
    (c,) = doc["cases"]
    assert c["status"] == "error" and "left no outputs" in c["error"], c["error"]
    assert c["median_us"] is None and not [t for t in c["timings"] if t["impl"] == "kernel"]


def test_the_judge_refuses_to_import_a_kernel(tmp_path):
    """A judging process is given a plan or recorded outputs, never a kernel to import."""
    pool = CaseProcessPool("cpu-interpreter", Isolation(role="judge"))
    try:
        pool.start()
        proto = make_protocols("cpu-interpreter", rounds=1, warmup=0, iters=1)[0]
        request = {
            "type": "case",
            "batch_size": 1,
            "seq_len": 1,
            "impl": "kernel:attn_output_proj_backward",
            "protocols": [proto.definition()],
            "baselines": False,
        }
        fields, failed = pool.run_case(request, 120)
    finally:
        pool.stop()
    assert failed is None and fields["status"] == "error"
    assert "never a kernel to import" in fields["error"]


def test_direct_measurements_are_labelled_so(tmp_path):
    rc, doc, err = run_measure(
        tmp_path, "--mode", "cpu-interpreter", "--cases", "1,1", "--impl", f"{FAKES}:good", "--direct"
    )
    assert rc == 0, err
    assert doc["measured_by"] == "direct" and doc["worker_starts"] == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_kernel_on_the_gpu(tmp_path):
    rc, doc, err = run_measure(tmp_path, "--cases", "1,256", "--rounds", "2", "--warmup", "2", "--iters", "5")
    assert rc == 0, err
    validate(doc)
    assert doc["mode"] == "gpu" and len(doc["protocols"]) == 2
    (c,) = doc["cases"]
    assert c["status"] == "pass"
    assert c["score"] is not None or c["t_sol_us"] is None  # a score wherever the GPU's T_SOL is known
    by = {(t["impl"], t["protocol"]) for t in c["timings"]}
    assert {(i, p["hash"]) for i in ("kernel", "eager", "cublas") for p in doc["protocols"]} <= by


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_illegal_address_is_isolated_on_the_gpu(tmp_path):
    rc, doc, err = run_measure(
        tmp_path, "--cases", "1,3 2,3", "--impl", f"{FAKES}:gpu_mixed", "--rounds", "1", "--warmup", "1", "--iters", "3"
    )
    assert rc == 1, err
    validate(doc)
    assert [c["status"] for c in doc["cases"]] == ["error", "pass"]
    assert "illegal" in doc["cases"][0]["error"]
    assert doc["worker_starts"] == 3  # the judge, and the recording process twice (the crash, then the next case)


def test_the_parent_makes_every_statistic_from_raw_samples():
    """The worker runs the commit's code: its figures are believed only as raw samples, counted against the
    protocol; the medians are computed here (a forged median is ignored, a wrong sample count is an error)."""
    p = Protocol("cuda_events", 1, 0, 3, l2_flush=True)
    forged = [{"impl": "kernel", "protocol": p.hash, "samples_us": [30.0, 10.0, 20.0], "median_us": 1.0}]
    rec = assemble_case(Case(1, 256), {"status": "pass", "timings": forged}, [p], "H200", "gpu", 1.0)
    assert rec["median_us"] == 20.0 and rec["timings"][0]["median_us"] == 20.0
    short = [{"impl": "kernel", "protocol": p.hash, "samples_us": [30.0, 10.0]}]
    rec = assemble_case(Case(1, 256), {"status": "pass", "timings": short}, [p], "H200", "gpu", 1.0)
    assert rec["status"] == "error" and "invalid timing" in rec["error"] and rec["median_us"] is None
    for bad in ([float("nan")] * 3, [-1.0, 2.0, 3.0], ["1", 2.0, 3.0]):
        rec = assemble_case(
            Case(1, 256),
            {"status": "pass", "timings": [{"impl": "kernel", "protocol": p.hash, "samples_us": bad}]},
            [p],
            "H200",
            "gpu",
            1.0,
        )
        assert rec["status"] == "error", bad


def test_a_kernel_printing_without_end_cannot_fill_the_runners_disk(tmp_path):
    """Audit (stop 16): the worker's stderr goes to a file on the runner's disk, unbounded: a kernel printing in
    a loop for the whole case timeout could fill it. The worker caps every file it writes (RLIMIT_FSIZE, soft and
    hard, before the kernel is imported); past it the kernel's writes fail and the case is an error."""
    rc, doc, _ = run_measure(
        tmp_path,
        *("--mode", "cpu-interpreter", "--cases", "1,3", "--impl", f"{FAKES}:floods_stderr", "--case-timeout", "60"),
        env={"SOLCI_WORKER_FILE_LIMIT_MB": "4"},
    )
    case = doc["cases"][0]
    assert case["status"] == "error", case
    assert "File too large" in (case.get("error") or ""), case.get("error")
    assert rc != 0


@pytest.mark.parametrize(
    ("fake", "env", "match"),
    [
        ("floods_messages", {"SOLCI_MESSAGE_LINE_LIMIT_MB": "1"}, "a message line longer than 1048576 characters"),
        ("floods_message_lines", {"SOLCI_MESSAGE_TOTAL_LIMIT_MB": "1"}, "more than 1048576 characters of messages"),
    ],
)
def test_a_worker_flooding_its_message_stream_is_killed_not_read(tmp_path, fake, env, match):
    """Issue 19, finding 2: 800 MB written to the message pipe without a newline made the harness (outside the
    sandbox) grow to 1.5 GB in 2 s. The parent reads a line, and a request's messages, up to a limit; past it the
    worker is killed and the case is an error naming the limit."""
    rc, doc, err = run_measure(
        tmp_path,
        *("--mode", "cpu-interpreter", "--cases", "1,1", "--impl", f"{FAKES}:{fake}", "--case-timeout", "120"),
        env=env,
    )
    (case,) = doc["cases"]
    assert case["status"] == "error" and match in (case["error"] or ""), case["error"]
    assert rc == 1, err


def test_a_kernel_describing_itself_at_length_is_not_stored_at_length(tmp_path):
    """Issue 19, finding 3: a kernel whose configuration described itself as ~50 MB of small strings was stored
    per case. What the kernel says of its configuration is kept only within the plan contract's bounds."""
    path = tmp_path / "verbose.py"
    path.write_text(
        "from tests.support.fake_kernels import good as attn_output_proj_backward  # noqa: F401\n\n\n"
        "class _Config:\n"
        "    def as_dict(self):\n"
        "        return {f'k{i}': 'x' * 50 for i in range(100_000)}\n\n\n"
        "def kernel_config(m, device):\n"
        "    return _Config()\n"
    )
    rc, doc, err = run_measure(
        tmp_path, "--mode", "cpu-interpreter", "--cases", "1,1", "--impl", f"{path}:attn_output_proj_backward"
    )
    assert rc == 0, err
    (case,) = doc["cases"]
    assert case["status"] == "pass" and case["config"] is None
    assert any("configuration was not kept" in w for w in case["warnings"]), case.get("warnings")
    assert len(json.dumps(doc)) < 200_000


def test_a_kernel_file_in_a_sandbox_is_refused_with_one_line(tmp_path):
    """On the H200, ``--impl FILE.py:FUNCTION`` with the sandbox failed case by case with a path error from
    inside it (the file is not in the sandbox). It is a usage error, said once, before any worker starts."""
    rc, doc, err = run_measure(
        tmp_path, "--mode", "cpu-interpreter", "--cases", "1,1", "--impl", f"{FAKES}:good", "--candidate", str(PROJECT)
    )
    assert rc == 2 and doc is None
    assert "a kernel given as a file runs only unsandboxed" in err and "Traceback" not in err
