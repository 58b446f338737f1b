#!/usr/bin/env bash
# One device call: build w8a8._C (and report), run the GPU tests.
#   bash benchmarks/gpu_session.sh build test        (or test-<file> for one test file)
# Results and logs go to $OUT (the device tool brings them back).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
if ls .whl/*.whl >/dev/null 2>&1; then  # nvidia-cutlass (headers) is not installed on the device machine
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
for step in "$@"; do
  case "$step" in
    build)
      start=$(date +%s)
      python3 -m pip install -v --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -80 "$OUT/build.log"; exit 1; }
      echo "build: $(( $(date +%s) - start )) s"
      if grep -n "C7510" "$OUT/build.log"; then echo "build: ptxas C7510 (wgmma serialized) - treated as failure"; exit 1; fi
      grep -E "spill|registers" "$OUT/build.log" | sort | uniq -c | sort -rn | head -20
      python3 -m w8a8 info ;;
    test)
      python3 -m pytest -q -x tests 2>&1 | tee "$OUT/tests.log" | tail -40 ;;
    test-*)
      python3 -m pytest -q tests/"${step#test-}" 2>&1 | tee "$OUT/tests-${step#test-}.log" | tail -40 ;;
    *)
      echo "unknown step $step"; exit 2 ;;
  esac
done
