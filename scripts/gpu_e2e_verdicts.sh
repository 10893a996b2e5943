#!/usr/bin/env bash
# The H200 end-to-end check of the verdicts (issue 8) and of the trusted harness (issue 9), one device call:
#   1. the GPU tests (kernel, timing, measure);
#   2. bubblewrap on this machine (carried in .sandbox/): the sandbox the local executor measures in;
#   3. a repository with planted commits, pushed in five pushes to a bare repository and measured by
#      `solci watch --once` (the runner, the local executor, the trusted harness, judging with confirmation):
#        push 1: base, neutral, neutral           -> baseline, pass, pass
#        push 2: slowdown of every case (+4 %), a neutral commit on top -> regressed, pass (not blamed again)
#        push 3: the fix (undoes the slowdown)    -> improved, the open step fixed
#        push 4: a slowdown of one case (B8_S128, +8 %) -> regressed, that case only
#        push 5: incorrect (grad_weight x 1.5), broken (syntax error) -> incorrect, crashed
#   Cases: one per M (6 of the 16), the benchmark's protocol (10 warm-up, 50 timed, CUPTI span + CUDA events).
# Needs .whl (duckdb, ruptures, nvidia-ml-py, tqdm for Python 3.12) and .sandbox (bwrap + its libraries).
# Length: about 11 minutes on the H200 (2026-12-01; the pushes take 105, 190, 175, 125, 45 s), past one device
# call's 10-minute limit; fewer E2E_CASES do not shorten it (each run's fixed costs dominate). The logs of pushes
# that finished come back under $OUT even when the call is cut.
# Usage (GPU machine, repo root): bash scripts/gpu_e2e_verdicts.sh; the logs go to $OUT (default /tmp/out).
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$PWD
if [ -z "${E2E_NO_WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
fi
export PYTHONPATH=$here:/tmp/site
export PATH=$here/.sandbox/bin:$PATH LD_LIBRARY_PATH=$here/.sandbox/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

echo "== 1. GPU tests"
[ -n "${E2E_SKIP_TESTS:-}" ] || timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernel/test_kernel_gpu.py \
  tests/harness/test_timing.py tests/harness/test_measure.py -m gpu 2>&1 | tail -5 | tee "$OUT/gpu_tests.log"

echo "== 2. bubblewrap"
if bwrap --ro-bind / / --unshare-all --die-with-parent true 2>"$OUT/bwrap.err"; then
  echo "bwrap works here"; TRUST=""
else
  echo "bwrap does not work here: $(tail -1 "$OUT/bwrap.err"); measuring with --trusted"; TRUST="--trusted"
fi

echo "== 3. planted commits through solci watch"
CASES=${E2E_CASES:-"1,256;4,128;8,128;16,128;4,1024;8,1024"}  # E2E_CASES=1,7 E2E_ARGS="--iters 2" for a CPU dry run
rm -rf /tmp/e2e /tmp/e2e.git && mkdir -p /tmp/e2e && git init -q --bare -b main /tmp/e2e.git
tar --exclude=./.whl --exclude=./.sandbox --exclude=./.git --exclude=./.solci -cf - . | tar -C /tmp/e2e -xf -
cd /tmp/e2e && git init -q -b main && git remote add origin /tmp/e2e.git
g() { git -c user.name=e2e -c user.email=e2e@local "$@"; }
L=kernel/backward.py
cp $L /tmp/launcher.orig
g add -A && g commit -qm "base: the project as it is"
echo "# neutral 1" >> README.md && g commit -qam "neutral 1"
echo "# neutral 2" >> README.md && g commit -qam "neutral 2"
g push -q origin main
export SOLCI_DB=/tmp/e2e.duckdb SOLCI_WORK=/tmp/e2e-work SOLCI_EXECUTOR=local
watch() {
  local tag=$1; shift
  s=$(date +%s)
  # shellcheck disable=SC2086
  timeout 560 python3 -m ci.cli watch /tmp/e2e.git --once --cases "$CASES" $TRUST ${E2E_ARGS:-} "$@" \
    >"$OUT/$tag.out" 2>"$OUT/$tag.err"
  echo "$tag: exit $? ($(( $(date +%s) - s )) s)"; cat "$OUT/$tag.out"
}
watch push1 --backfill 3

SLOW='
# --- planted: every case about 4 % slower (a sleep kernel after the real one, inside the CUPTI span) ---
import torch as _planted_torch

_planted_orig = attn_output_proj_backward
_PLANTED_US = {256: 14.4, 512: 19.2, 1024: 26.8, 2048: 47.6, 4096: 92.8, 8192: 178.2}


def attn_output_proj_backward(grad_output, reshaped, weight, *, out=None, config=None):
    result = _planted_orig(grad_output, reshaped, weight, out=out, config=config)
    m = grad_output.shape[0] * grad_output.shape[1]
    if grad_output.is_cuda and PLANTED_WHEN:
        _planted_torch.cuda._sleep(int(PLANTED_SHARE * _PLANTED_US.get(m, 50.0) * 1980))
    return result
'
echo "${SLOW//PLANTED_WHEN/True}" | sed 's/PLANTED_SHARE/0.04/' >> $L
g commit -qam "slow: every case +4 %"
echo "# neutral 3" >> README.md && g commit -qam "neutral 3 (on the slow level)"
g push -q origin main
watch push2

cp /tmp/launcher.orig $L && g commit -qam "fix: undo the slowdown"
g push -q origin main
watch push3

echo "${SLOW//PLANTED_WHEN/(grad_output.shape[0], grad_output.shape[1]) == (8, 128)}" | sed 's/PLANTED_SHARE/0.08/' >> $L
g commit -qam "one case: B8_S128 +8 %"
g push -q origin main
watch push4

cp /tmp/launcher.orig $L
cat >> $L <<'EOF'

# --- planted: wrong ---
_wrong_orig = attn_output_proj_backward


def attn_output_proj_backward(*args, **kwargs):
    ga, gw = _wrong_orig(*args, **kwargs)
    gw.mul_(1.5)
    return ga, gw
EOF
g commit -qam "incorrect: grad_weight x 1.5"
cp /tmp/launcher.orig $L && printf '\ndef attn_output_proj_backward(:\n' >> $L && g commit -qam "broken: a syntax error"
g push -q origin main
watch push5

cd "$here"
python3 -m ci.cli flags --cases > "$OUT/flags.txt" 2>&1
python3 -m ci.cli sql "SELECT substr(v.\"commit\", 1, 10) AS c, verdict, cases_moved AS moved, round(suite_change * 100, 2) AS suite_pct, drift, clock, message FROM verdicts v JOIN runs r USING (run_id) WHERE purpose = 'measure' ORDER BY started_at" --max-colwidth 200 > "$OUT/verdicts.txt" 2>&1
python3 -m ci.cli sql "SELECT purpose, count(*) AS runs FROM runs GROUP BY 1" >> "$OUT/verdicts.txt" 2>&1
python3 -m ci.cli sql "SELECT case_name, round(sigma_screen*100,3) AS screen_pct, round(sigma_pair*100,3) AS pair_pct, n_pair FROM noise ORDER BY case_name" >> "$OUT/verdicts.txt" 2>&1
cp /tmp/e2e.duckdb "$OUT/e2e.duckdb" 2>/dev/null
cat "$OUT/flags.txt"; cat "$OUT/verdicts.txt"
