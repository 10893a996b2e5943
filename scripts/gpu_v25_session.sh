#!/usr/bin/env bash
# One device-tool call for issue 21's v25 (kernel/NOTES.md item 26; GPU machine, repository root): on every bucket's
# table entry, the TMA descriptors prefetched into the TMA unit's cache at each program's entry (tmap_prefetch, "tp")
# and, with it, the next tile's first K-steps asked of L2 by tensor prefetches a few steps before the loader ends a
# tile (next_prefetch / np_distance, "np{n}d{d}"); bk 32 and the held-stage epilogue again beside the lazy init; the
# per-bucket winners into GLUON_TABLE (selected at a 0.5 % margin), the GPU tests and the 16 cases only where that
# changed the table (scripts/gpu_v19_session.sh's steps, logs v25_*); then the trace of the entry, tp and the next-tile
# prefetches at M = 1024 / 2048 (v25_trace.log). Run b (v26): the epilogue deferred beside the next tile's first
# MMA (epi_defer), alone and with run a's prefetches, at M = 512-2048; the trace, with the loader's issue of each
# tile's first stage, of the entry and the next-tile prefetch (logs v25b_*). Run c: only the deferred epilogue's
# TMA stores beside the next tile's first MMA (epi_defer 2), beside run b's whole deferral, no trace (v25c_*).
# Run d: every other tile of a program walked from its last K-step back (serpentine: its first loads read the rows
# the tile before read last) on every bucket's entry, alone and with tmap_prefetch, then its trace (v25d_*).
# Usage: bash scripts/gpu_v25_session.sh [b|c|d]   (~450 s at most with the machine warm; logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "${1:-}" in
  "" | b | c | d) ;;
  *) echo "gpu_v25_session.sh: unknown run '$1' (b, c or d; none: run a; -h says what each runs)" >&2; exit 2 ;;
esac
ONLY="pp7lz_256 pp7lztp_256 pp7lztpnp2d4_256"
for m in 512 1024 2048; do
  ONLY="$ONLY lz_$m lztp_$m lztpnp2d4_$m lztpnp3d8_$m bk32lztp_$m hold7lztp_$m"
done
ONLY="$ONLY w256s3_4096 w256s3tp_4096 w256s3tpnp1d2_4096 w256s3_8192 w256s3tp_8192 w256s3tpnp1d2_8192"
TIMED="8,128 1,1024 4,256 4,128 1,256 16,128 2,1024 2,2048 2,4096"
TAG=v25 TRACED=coop,tp,tpnp2,tpnp3
if [ "${1:-}" = b ]; then
  ONLY=""
  for m in 512 1024 2048; do ONLY="$ONLY lz_$m dfr_$m dfrtpnp2_$m lztpnp2d4_$m"; done
  TIMED="8,128 1,1024 4,256 4,128 16,128 2,1024" TAG=v25b TRACED=coop,tpnp2
fi
if [ "${1:-}" = c ]; then
  ONLY=""
  for m in 512 1024 2048; do ONLY="$ONLY lz_$m dfs_$m dfr_$m"; done
  TIMED="8,128 4,256 4,128 16,128" TAG=v25c TRACED=""
fi
if [ "${1:-}" = d ]; then
  ONLY="pp7lz_256 pp7lzsrp_256"
  for m in 512 1024 2048; do ONLY="$ONLY lz_$m srp_$m srptp_$m"; done
  ONLY="$ONLY w256s3_4096 w256s3srp_4096 w256s3_8192 w256s3srp_8192" TAG=v25d TRACED=coop,srp
fi
ONLY=${V25_ONLY:-$ONLY} TIMED=${V25_TIMED:-$TIMED}
export SWEEP_ARGS="--only $ONLY --budget-s 220 --timed $TIMED --margin 0.005" TAG SWEEP_TIMEOUT=300 TESTS_TIMEOUT=100
bash "$(dirname "$0")/gpu_v19_session.sh" sweep apply confirm  # the GPU tests and the 16 cases if the table moved
OUT=${OUT:-/tmp/out}
[ -n "$TRACED" ] || exit 0
export PYTHONPATH=$PWD  # the variants traced: each kind's loop per 64-deep step, first wait, epilogue, handoffs
timeout 80 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants $TRACED --kinds both \
  --reps 10 2>&1 | grep -v -i warn | tee "$OUT/${TAG}_trace.log" | tail -n 24
