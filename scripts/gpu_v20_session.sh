#!/usr/bin/env bash
# One device-tool call for issue 21's v20 (GPU machine, repository root): v19's untimed variants (hyb7 at M = 512,
# pp7d2 at M = 1024-2048) and v20's held stage released later (hold7r2, hold7r3 at M = 512-2048) beside v18, the
# tile-language kernel and cuBLAS; the per-bucket winners into GLUON_TABLE; the GPU tests and the 16-case bench:
# scripts/gpu_v19_session.sh's steps with v20's variants, shapes, timeouts and log names (v20_*).
# Usage: bash scripts/gpu_v20_session.sh [sweep] [apply] [tests] [bench]   (no step named: all four; ~560 s at most)
# SWEEP_ARGS (environment): the sweep's variants and shapes (default: v20's --only and --timed below).
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
# v18's entries first (each shape times v18, the variants, v18 again); the first timed shape carries the timing
# process's start-up (v19 run b: ~90 s), so M = 512, the shape v20 is about, comes first
ONLY="v18_512 v18_1024 v18_2048 hyb7_512 pp7d2_1024 pp7d2_2048"
ONLY="$ONLY hold7r2_512 hold7r3_512 hold7r2_1024 hold7r3_1024 hold7r2_2048 hold7r3_2048"
ONLY="$ONLY hold7r3_256"  # checked only (M = 64-192: tiles shorter than the release step), (1,256) is not timed
export SWEEP_ARGS=${SWEEP_ARGS:---only $ONLY --timed 4,128 1,1024 8,128 2,1024 16,128}
export TAG=v20 SWEEP_TIMEOUT=280 TESTS_TIMEOUT=100
exec bash "$(dirname "$0")/gpu_v19_session.sh" "$@"
