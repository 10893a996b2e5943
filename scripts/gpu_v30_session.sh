#!/usr/bin/env bash
# One device-tool call for issue 21's v30 (kernel/NOTES.md item 30; GPU machine, repository root): stream-K on one
# program an SM (stream_k: one kind of tile whole, the other kind's K-steps split evenly over the 132 programs, a
# split tile joined through an fp32 workspace and a flag) first checked alone with a short timeout (a wrong flag
# protocol hangs: v30_smoke.log), then its GPU tests (v30_gpu_tests.log), then swept beside the table's entries at
# M = 1024-8192 (v30_sweep.log, v30_select.json; no table change here: the selection is read first).
# Runs b and c were scripts/diag_stream_k.py (item 30). Run d (after runs a-c: no inline PTX in the partitions reads
# %tid / %laneid any more, which had cost every TMA of the loader a waterfall loop, v29's multicast kernels too): the
# sweep of v29's multicast (mc) beside the entries and v18's eager ring (the fixed stream-K's was run c's), the GPU
# tests of both, and the trace of mc beside v18 (per K-step time, data waits, the loader's lead: item 29's
# columns; M = 1024), logs v30d_*; with v31's 128x256 tiles in K-steps of 32 (w256b32s6, w256b32s8h: 6 or 8
# stages of 24 KB) beside each entry, and in the trace.
# Usage: bash scripts/gpu_v30_session.sh [d]   (a: ~400 s, d: ~400 s at most with the machine warm; logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "${1:-}" in
  "" | d) ;;
  *) echo "gpu_v30_session.sh: unknown run '$1' (d; none: run a; -h says what each runs)" >&2; exit 2 ;;
esac
T=v30
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if [ "${1:-}" = d ]; then
  ONLY="lz_1024 v18_1024 mc_1024 w256b32s6_1024 w256b32s8h_1024 lz_2048 v18_2048 mc_2048 w256b32s8h_2048"
  ONLY="$ONLY w256s3_4096 w256b32s8h_4096 w256s3_8192 w256b32s8h_8192"
  export SWEEP_ARGS="--only $ONLY --budget-s 170 --timed 8,128 16,128 4,1024 2,4096 --margin 0.005 \
--check-timeout-s 90" TAG=v30d SWEEP_TIMEOUT=240
  bash "$(dirname "$0")/gpu_v19_session.sh" sweep
  cp "$OUT/select.json" "$OUT/v30d_select.json" 2>/dev/null
  timeout 80 python3 -m pytest --noconftest -q -m gpu tests/kernel/test_gluon.py -k "stream_k or multicast" 2>&1 \
    | tee "$OUT/v30d_gpu_tests.log" | tail -n 5
  timeout 70 python3 scripts/diag_gluon_timeline.py --ms 1024 --variants eager,mc,w256b32s8h --kinds both \
    --reps 10 2>&1 \
    | grep -v -i warn | tee "$OUT/v30d_trace.log" | tail -n 30
  exit 0
fi
timeout 120 python3 - <<'PY' 2>&1 | grep -v -i warn | tee "$OUT/${T}_smoke.log"
from dataclasses import replace

import torch

from kernel import gluon_backward as gb
from kernel.configs import bucket_for
from problem.correctness import check_rounds
from tests.kernel.test_gluon import _gluon_fn

for b, s in ((8, 128), (16, 128), (4, 1024), (2, 4096)):
    cfg = replace(gb.GLUON_TABLE[bucket_for(b * s)][0], stream_k=True)
    res = check_rounds(_gluon_fn(cfg), b, s, torch.device("cuda"), rounds=1)
    torch.cuda.synchronize()
    print(f"smoke ({b},{s}) M={b * s}: {'ok' if res.ok else 'INCORRECT ' + str(res.reason)}", flush=True)
PY
if ! grep -q "smoke (2,4096) M=8192: ok" "$OUT/${T}_smoke.log"; then
  echo "$T: the smoke check did not pass; no sweep" | tee -a "$OUT/${T}_smoke.log"
  exit 1
fi
timeout 120 python3 -m pytest --noconftest -q -m gpu tests/kernel/test_gluon.py -k stream_k 2>&1 \
  | tee "$OUT/${T}_gpu_tests.log" | tail -n 5
ONLY="lz_1024 sk_1024 ske_1024 lz_2048 sk_2048 ske_2048 w256s3_4096 sk_4096 w256s3_8192 sk_8192"
export SWEEP_ARGS="--only $ONLY --budget-s 200 --timed 8,128 1,1024 4,256 16,128 2,1024 4,1024 16,256 2,4096 \
--margin 0.005 --check-timeout-s 90" TAG=$T
export SWEEP_TIMEOUT=280
bash "$(dirname "$0")/gpu_v19_session.sh" sweep
cp "$OUT/select.json" "$OUT/${T}_select.json" 2>/dev/null
