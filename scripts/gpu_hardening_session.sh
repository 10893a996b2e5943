#!/usr/bin/env bash
# The H200 checks of issue 19's write budget, one device call: the 16 cases measured through the local
# executor's path (recorded in the bubblewrap sandbox, its scratch a tmpfs of the budget, then replayed) twice
# with one kept Triton cache (the second run compiles nothing), then a kernel that fills its temporary folder
# (rejected: over budget). Needs .sandbox (bwrap + its libraries, see shared/PLATFORM.md). Logs go to $OUT.
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$PWD
export PYTHONPATH=$here
export PATH=$here/.sandbox/bin:$PATH LD_LIBRARY_PATH=$here/.sandbox/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
tree=/tmp/candidate; rm -rf "$tree"; mkdir -p "$tree"; cp -r kernel "$tree/"
fill=/tmp/filling; rm -rf "$fill"; mkdir -p "$fill"; cp -r kernel "$fill/"
python3 -c "from tests.support.hostile import FILL_DISK; print(FILL_DISK)" >> "$fill/kernel/backward.py"
run() {
  local tag=$1 cand=$2; shift 2
  s=$(date +%s)
  # shellcheck disable=SC2086
  timeout 400 python3 -m ci.harness.measure --sandbox bwrap --candidate "$cand" --triton-cache /tmp/tc-$tag \
    --out "$OUT/$tag.json" "$@" 2>"$OUT/$tag.err"
  echo "$tag: exit $? ($(( $(date +%s) - s )) s); Triton cache kept: $(du -sh /tmp/tc-$tag 2>/dev/null | cut -f1)"
  grep -i "budget\|not kept" "$OUT/$tag.err" | head -3
  python3 - "$OUT/$tag.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("   no document:", exc); sys.exit()
s = d["suite"]
print("   measured_by", d.get("measured_by"), "suite", s["status"], s["geomean_us"], "cublas", s["geomean_cublas_us"],
      "wall", d["wall_s"], "starts", d["worker_starts"])
for c in d["cases"]:
    err = (c["error"] or "").strip().splitlines()
    print(f"   {c['case']:>10} {c['status']:<6} {c['median_us']} ({c['wall_s']} s) {err[0][:200] if err else ''}")
PY
}
run first "$tree" --cases all
cp -r /tmp/tc-first /tmp/tc-second
run second "$tree" --cases all
SOLCI_WRITE_BUDGET_MB=128 run filling "$fill" --cases 1,256
ls /tmp | head -30
