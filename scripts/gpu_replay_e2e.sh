#!/usr/bin/env bash
# The H200 end-to-end check of issue 18 (record and replay), one device call: planted commits pushed to a bare
# repository and measured by `solci watch --once` (the runner, the local executor in its bubblewrap sandbox, the
# recording process and the judge, judging with confirmation):
#   push 1: base, neutral, messages rewritten in place (x0.85), forged reply lines on every descriptor
#           -> baseline, pass, pass (not improved, no record), broken or rejected (never passed)
#   push 2: PyTorch ops instead of launches, a launch sequence that changes, an honest 5 % slowdown (a Triton
#           spin kernel after the real one), the project's kernel unchanged on top
#           -> rejected, rejected, regressed, pass
# E2E_ONLY_PUSH1=1 stops after push 1 (then the verdict and record tables).
# Cases: one per M (6 of the 16), the benchmark's protocol. Needs .whl and .sandbox (bwrap). Logs go to $OUT.
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
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
CASES=${E2E_CASES:-"1,256;4,128;8,128;16,128;4,1024;8,1024"}
rm -rf /tmp/e2e /tmp/e2e.git && mkdir -p /tmp/e2e && git init -q --bare -b main /tmp/e2e.git
tar --exclude=./.whl --exclude=./.sandbox --exclude=./.git --exclude=./.solci -cf - . | tar -C /tmp/e2e -xf -
cd /tmp/e2e && git init -q -b main && git remote add origin /tmp/e2e.git
g() { git -c user.name=e2e -c user.email=e2e@local "$@"; }
L=kernel/backward.py
cp $L /tmp/launcher.orig
planted() {  # planted NAME CODE: the project's kernel with CODE appended, committed as NAME
  cp /tmp/launcher.orig $L && printf '%s\n' "$2" >> $L && g commit -qam "$1"
}
forgery() { python3 -c "import sys; sys.path.insert(0, '$here'); from tests.support import hostile; print(hostile.$1)"; }
g add -A && g commit -qm "base: the project as it is"
echo "# neutral" >> README.md && g commit -qam "neutral"
planted "forgery: messages rewritten in place" "$(forgery FORGE_MESSAGES)"
planted "forgery: reply lines on every descriptor" "$(forgery FORGE_FD)"
g push -q origin main
export SOLCI_DB=/tmp/e2e.duckdb SOLCI_WORK=/tmp/e2e-work SOLCI_EXECUTOR=local
watch() {
  local tag=$1; shift
  s=$(date +%s)
  # shellcheck disable=SC2086
  timeout 400 python3 -m ci.cli watch /tmp/e2e.git --once --cases "$CASES" ${E2E_ARGS:-} "$@" \
    >"$OUT/$tag.out" 2>"$OUT/$tag.err"
  echo "$tag: exit $? ($(( $(date +%s) - s )) s)"; cat "$OUT/$tag.out"
}
watch push1 --backfill 4
if [ -n "${E2E_ONLY_PUSH1:-}" ]; then  # push 1 alone (a shorter call), then the tables below
  cd "$here"
else

planted "torch ops instead of launches" '
_planted_orig = attn_output_proj_backward


def attn_output_proj_backward(grad_output, reshaped, weight, *, out=None, config=None):
    from problem.reference import attn_output_proj_backward_eager

    ga, gw = attn_output_proj_backward_eager(grad_output, reshaped, weight)
    out[0].copy_(ga)
    out[1].copy_(gw)
    return out'
planted "a launch sequence that changes between calls" '
_planted_orig = attn_output_proj_backward
_planted_calls = [0]


def attn_output_proj_backward(*args, **kwargs):
    _planted_calls[0] += 1
    res = _planted_orig(*args, **kwargs)
    if _planted_calls[0] % 2:
        res = _planted_orig(*args, **kwargs)
    return res'
planted "slow: every case +5 % (a spin kernel after the real one)" '
from triton.language.extra.cuda import globaltimer as _planted_timer

_planted_orig = attn_output_proj_backward
_PLANTED_US = {256: 14.1, 512: 18.1, 1024: 27.1, 2048: 48.0, 4096: 94.5, 8192: 180.8}


@triton.jit
def _planted_spin(ns):
    start = _planted_timer()
    now = start
    while now - start < ns:
        now = _planted_timer()


def attn_output_proj_backward(grad_output, reshaped, weight, *, out=None, config=None):
    result = _planted_orig(grad_output, reshaped, weight, out=out, config=config)
    m = grad_output.shape[0] * grad_output.shape[1]
    _planted_spin[(1,)](int(0.05 * _PLANTED_US.get(m, 50.0) * 1000))
    return result'
cp /tmp/launcher.orig $L && g commit -qam "fix: the project's kernel unchanged"
g push -q origin main
watch push2
cd "$here"
fi
python3 -m ci.cli sql "SELECT substr(v.\"commit\", 1, 10) AS c, verdict, round(suite_change * 100, 2) AS suite_pct, message FROM verdicts v JOIN runs r USING (run_id) WHERE purpose = 'measure' ORDER BY started_at" --max-colwidth 160 > "$OUT/verdicts.txt" 2>&1
python3 -m ci.cli sql "SELECT case_name, substr(\"commit\", 1, 10) AS c, round(latency_us, 2) AS us FROM records WHERE kind = 'project' ORDER BY case_name" > "$OUT/records.txt" 2>&1
cp /tmp/e2e.duckdb "$OUT/e2e.duckdb" 2>/dev/null
cat "$OUT/verdicts.txt" "$OUT/records.txt"
