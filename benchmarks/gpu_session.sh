#!/usr/bin/env bash
# One call on a GPU machine without network: build the extensions (or reuse carried ones), run
# GPU tests, benchmark. Logs and results go to $OUT.
#   bash benchmarks/gpu_session.sh build pack test-ops          (first call; .whl/ holds nvidia-cutlass)
#   bash benchmarks/gpu_session.sh unpack test product          (later calls, the .so carried in .out/)
# Steps:
#   build         pip install -e . (the nvidia-cutlass headers from a carried .whl/); fails on ptxas C7510
#   pack          the built .so files as $OUT/ext.tar.xz (bring back, put in .out/, carry .out)
#   unpack        reuse .out/ext.tar.xz instead of building (the repository on PYTHONPATH)
#   test          the whole suite; test-<folder or file under tests/>[,<another>...]: those parts, in one
#                 pytest run (WORKERS=8 xdist workers)
#   product       python -m benchmarks --suites product (the product grid) into $OUT/results
#   bench-<suite> one suite of python -m benchmarks into $OUT/results
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Tests in parallel workers where pytest-xdist is installed (the device image has it): WORKERS=0 runs them in one process.
XDIST=""
if [ "${WORKERS:-8}" != 0 ] && python3 -c "import xdist" 2>/dev/null; then XDIST="-n ${WORKERS:-8}"; fi
export W8A8_FAILURE_LOG="$OUT/failures.log"  # each failure as it happens (tests/conftest.py)
# Carried wheels (the device machine has no network): .whl/*.whl is nvidia-cutlass (headers, for the
# build); .whl/hf/*.whl the test extra's versions (transformers in the hf extra's range, compressed-tensors
# and what they need), which the image lacks or has older. Both go into /tmp/site, ahead of the image's.
wheels=$(ls .whl/*.whl .whl/hf/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
for step in "$@"; do
  case "$step" in
    build)
      start=$(date +%s)
      python3 -m pip install -v --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { grep -E " error|Error" "$OUT/build.log" | head -30; exit 1; }
      echo "build: $(( $(date +%s) - start )) s"
      if grep -n "C7510" "$OUT/build.log"; then echo "build: ptxas C7510 (wgmma serialized) - treated as failure"; exit 1; fi
      grep -E "spill" "$OUT/build.log" | sort | uniq -c | sort -rn | head -5
      python3 -m w8a8 info | tail -2 ;;
    pack)
      tar -cJf "$OUT/ext.tar.xz" w8a8/_C*.so && ls -la "$OUT/ext.tar.xz" ;;
    unpack)
      tar -xJf .out/ext.tar.xz && python3 -m w8a8 info | tail -1 ;;
    test)
      python3 -m pytest -q -p no:cacheprovider $XDIST tests 2>&1 | tee "$OUT/tests.log" | tail -25 ;;
    test-*)  # test-<path>[,<path>...]: one pytest run (one set of xdist workers) over them
      log="$OUT/tests-$(echo "${step#test-}" | tr '/,' '_-').log"
      paths=$(echo "${step#test-}" | tr ',' '\n' | sed 's#^#tests/#')
      python3 -m pytest -q -p no:cacheprovider $XDIST $paths 2>&1 | tee "$log" | tail -25 ;;
    product)
      python3 -m benchmarks --suites product --out "$OUT/results" 2>&1 | grep -v "it/s\]" | tail -40 ;;
    bench-*)
      python3 -m benchmarks --suites "${step#bench-}" --out "$OUT/results" 2>&1 | grep -v "it/s\]" | tail -40 ;;
    *)
      echo "unknown step $step"; exit 2 ;;
  esac
done
