#!/usr/bin/env bash
# One device call: build the extensions (or reuse carried ones), run GPU tests, benchmark.
#   bash benchmarks/gpu_session.sh build pack test-kernels          (first call)
#   bash benchmarks/gpu_session.sh unpack test-system bench decode   (later calls, .so carried in .out/)
# Steps:
#   build         pip install -e . (nvidia-cutlass headers from a carried .whl/), ptxas report
#   pack          the built .so files as $OUT/ext.tar.xz (bring back, unpack into .out/, carry .out)
#   unpack        reuse .out/ext.tar.xz instead of building (no pip install: the repo is on PYTHONPATH)
#   test          the whole suite; test-kernels / test-system: tests/ without / only tests/system;
#                 test-<file>: one file
#   bench         python -m w8a8 bench (default suites) into $OUT/results
#   decode        benchmarks/bench_decode.py into $OUT/results
# Logs and results go to $OUT (the device tool brings them back).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then  # nvidia-cutlass (headers) is not installed on the device machine
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
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
    pack)
      tar -cJf "$OUT/ext.tar.xz" w8a8/_C*.so && ls -la "$OUT/ext.tar.xz" ;;
    unpack)
      tar -xJf .out/ext.tar.xz && python3 -m w8a8 info ;;
    test)
      python3 -m pytest -q tests 2>&1 | tee "$OUT/tests.log" | tail -30 ;;
    test-kernels)
      python3 -m pytest -q tests --ignore=tests/system 2>&1 | tee "$OUT/tests-kernels.log" | tail -30 ;;
    test-system)
      python3 -m pytest -q tests/system 2>&1 | tee "$OUT/tests-system.log" | tail -30 ;;
    test-*)
      python3 -m pytest -q tests/"${step#test-}" 2>&1 | tee "$OUT/tests-${step#test-}.log" | tail -30 ;;
    bench)
      python3 -m w8a8 bench --out "$OUT/results" 2>&1 | grep -v "it/s\]" | tail -25 ;;
    decode)
      mkdir -p "$OUT/results" && python3 benchmarks/bench_decode.py --out "$OUT/results/decode_h100.json" 2>&1 | tail -20 ;;
    *)
      echo "unknown step $step"; exit 2 ;;
  esac
done
