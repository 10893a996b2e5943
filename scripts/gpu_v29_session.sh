#!/usr/bin/env bash
# One device-tool call for issue 21's v29 (kernel/NOTES.md item 29; GPU machine, repository root): the 2-CTA
# multicast kernel (multicast: programs 2c and 2c + 1 a cluster, each K-step's B block shared by multicast TMA) first
# checked alone with a short timeout (a wrong barrier protocol hangs: v29_smoke.log), then swept beside the table's
# entries (lz_*: lazy init) and the same ring with eager inits (v18_*, coop_*: what multicast starts from) at
# M = 512-8192 (v29_sweep.log, v29_select.json; no table change: a cluster launch is not yet in the CI's replay),
# the trace of coop / eager / mc at M = 1024 / 2048 (v29_trace.log), and the GPU tests of the multicast kernel
# (v29_gpu_tests.log).
# Run b (after run a: every remote release a cluster-scope fence, 2-2.5x slower): the same steps with the release at
# the arrival's default semantics, logs v29b_*.
# Run c (after run b: 1.19-1.23x v18): the launch counter's add (a fence) moved off the first loads' path, and beside
# mc the diagnostic mcl (multicast 2: the same cluster and coupled rings, every box loaded locally) at M = 1024 / 2048:
# the sweep there, the trace of eager / mc / mcl, logs v29c_*.
# Run d (after run c: mcl slower than mc, so the pair's coupled release is what costs): mc with the loader's waits for
# its empty stages spinning on mbarrier.test_wait (mcs) and the consumers' waits too (mcss), in case a suspended
# try_wait wakes late on a remote arrival, at M = 1024 / 2048, logs v29d_*.
# Usage: bash scripts/gpu_v29_session.sh [b|c|d]   (~420 s at most with the machine warm; logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "${1:-}" in
  "" | b | c | d) ;;
  *) echo "gpu_v29_session.sh: unknown run '$1' (b, c or d; none: run a; -h says what each runs)" >&2; exit 2 ;;
esac
T=v29${1:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 60 python3 - <<'PY' 2>&1 | grep -v -i warn | tee "$OUT/${T}_smoke.log"
from dataclasses import replace

import torch

from kernel import gluon_backward as gb
from problem.correctness import check_rounds
from tests.kernel.test_gluon import _gluon_fn

cfg = replace(gb.GLUON_TABLE[1024][0], lazy_init=False, multicast=True)
for b, s in ((8, 128), (4, 128), (16, 128)):
    res = check_rounds(_gluon_fn(cfg), b, s, torch.device("cuda"), rounds=1)
    torch.cuda.synchronize()
    print(f"smoke ({b},{s}) M={b * s}: {'ok' if res.ok else 'INCORRECT ' + str(res.reason)}", flush=True)
PY
if ! grep -q "smoke (16,128) M=2048: ok" "$OUT/${T}_smoke.log"; then
  echo "$T: the smoke check did not pass; no sweep" | tee -a "$OUT/${T}_smoke.log"
  exit 1
fi
ONLY=""
for m in 512 1024 2048; do ONLY="$ONLY lz_$m v18_$m mc_$m"; done
for m in 4096 8192; do ONLY="$ONLY w256s3_$m coop_$m mc_$m"; done
TIMED="8,128 4,128 1,1024 4,256 16,128 2,1024 4,1024 2,4096"
VARIANTS=coop,eager,mc
if [ "${1:-}" = c ]; then
  ONLY="lz_1024 v18_1024 mc_1024 mcl_1024 lz_2048 v18_2048 mc_2048 mcl_2048" TIMED="8,128 1,1024 16,128"
  VARIANTS=eager,mc,mcl
fi
if [ "${1:-}" = d ]; then
  ONLY="lz_1024 v18_1024 mc_1024 mcs_1024 mcss_1024 lz_2048 v18_2048 mc_2048 mcs_2048 mcss_2048"
  TIMED="8,128 1,1024 16,128" VARIANTS=eager,mc,mcs,mcss
fi
export SWEEP_ARGS="--only $ONLY --budget-s 200 --timed $TIMED --margin 0.005 --check-timeout-s 60" TAG=$T
export SWEEP_TIMEOUT=270
bash "$(dirname "$0")/gpu_v19_session.sh" sweep
cp "$OUT/select.json" "$OUT/${T}_select.json" 2>/dev/null
timeout 60 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants "$VARIANTS" --kinds both --reps 10 \
  2>&1 | grep -v -i warn | tee "$OUT/${T}_trace.log" | tail -n 30
timeout 60 python3 -m pytest --noconftest -q -m gpu tests/kernel/test_gluon.py -k multicast 2>&1 \
  | tee "$OUT/${T}_gpu_tests.log" | tail -n 5
