#!/usr/bin/env bash
# One device-tool call for issue 21's v23 (kernel/NOTES.md item 24; GPU machine, repository root): L2 prefetch
# (GluonConfig.l2_prefetch: 1 grad_output whole at the start, 2 weight and reshaped whole at the start, 4 each
# grad_attn tile's grad_output rows as it starts) on each bucket's table entry, beside that entry, the tile-language
# kernel and cuBLAS at M = 256-8192; the per-bucket winners into GLUON_TABLE, the GPU tests and the 16-case bench
# (scripts/gpu_v19_session.sh's steps, logs v23_*). Run b: the grad_weight tiles first at M = 1024-2048 (gw_first;
# logs v23b_*). Run c: each program's first tile asks L2 for its share of the K-step pf_distance steps ahead
# (l2_prefetch 8; logs v23c_*), the GPU tests and the bench only where the selection changed the table, then the
# trace of the prefetch at M = 1024 / 2048 and the loader alone, cold and warm (scripts/diag_loads_only.py).
# Usage: bash scripts/gpu_v23_session.sh [b|c]   (~400 s at most with the machine warm; logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
ONLY="pp7_256 pp7pf1_256 pp7pf3_256 v18_512 pf1_512 pf3_512 pf4_512 pf5_512 v18_1024 pf1_1024 pf3_1024 pf4_1024"
ONLY="$ONLY pf5_1024 v18_2048 pf1_2048 pf3_2048 pf4_2048 pf5_2048 w256s3_4096 w256s3pf1_4096 w256s3pf4_4096"
ONLY="$ONLY w256s3pf5_4096 w256s3_8192 w256s3pf4_8192"
TIMED="4,128 8,128 16,128 1,256 4,1024 2,4096"
TAG=v23
if [ "${1:-}" = b ]; then
  ONLY="v18_1024 gwf_1024 v18_2048 gwf_2048 w256s3gwf_2048" TIMED="8,128 16,128 1,1024 2,1024" TAG=v23b
fi
STEPS="sweep apply tests bench"
if [ "${1:-}" = c ]; then
  ONLY="v18_512 pfa4_512 v18_1024 pfa4_1024 pfa8_1024 gwfpfa6_1024 v18_2048 pfa4_2048 pfa8_2048 w256s3_8192"
  ONLY="$ONLY w256s3pfa3_8192" TIMED="8,128 16,128 2,4096 4,128" TAG=v23c STEPS="sweep apply"
  ONLY=${C_ONLY:-$ONLY} TIMED=${C_TIMED:-$TIMED}  # a shorter run c: C_ONLY, C_TIMED
fi
export SWEEP_ARGS="--only $ONLY --budget-s 150 --timed $TIMED" TAG SWEEP_TIMEOUT=380 TESTS_TIMEOUT=100
bash "$(dirname "$0")/gpu_v19_session.sh" $STEPS
OUT=${OUT:-/tmp/out}
if [ "${1:-}" = c ] && python3 scripts/bench_gluon_v19.py --table-changed "$OUT/select.json"; then
  bash "$(dirname "$0")/gpu_v19_session.sh" tests bench  # the table changed: its GPU tests and the 16 cases
fi
if [ "${1:-}" = c ]; then  # the first pass traced with the prefetch, and the loader alone cold and warm (Next 2)
  export PYTHONPATH=$PWD
  timeout 90 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants coop,pfa4,pfa8 --kinds both --reps 10 \
    2>&1 | grep -v -i warn | tee "$OUT/v23c_trace.log" | tail -n 20
  timeout 90 python3 scripts/diag_loads_only.py --ms 1024 2048 2>&1 | grep -v -i warn | tee "$OUT/v23c_loads.log"
fi
