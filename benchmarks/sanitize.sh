#!/usr/bin/env bash
# compute-sanitizer over w8a8's kernels: the CUTLASS sm90 (and sm80, where
# built) GEMMs, the CUDA quantizers, W8A8Linear's single op and the Triton kernels, on the cases
# of benchmarks/sanitize_cases.py.
#
#   bash benchmarks/sanitize.sh [TOOL ...]     TOOL: memcheck synccheck racecheck initcheck (default: all four)
#
# Needs w8a8._C: `bash benchmarks/gpu_session.sh build` first, in the same shell with
# `export PYTHONPATH=/tmp/site` where that build installed nvidia-cutlass there.
# Writes to $OUT/sanitize (OUT defaults to /tmp/out):
#   <tool>.log    compute-sanitizer's report         <tool>.out   the driver's output (ok / FAIL per case)
#   summary.txt   one line per tool: set, sanitizer errors, result mismatches, exit status, seconds
#   warmup.out    the run without a sanitizer that fills Triton's cache
# Exit status 0 when every tool reports 0 errors and every case matches the reference.
#
# Settings, and why:
#   * memcheck and synccheck run the full case set; racecheck and initcheck (10-100x slower)
#     the small one (sanitize_cases.py --set small). Each tool run is capped (memcheck 150 s,
#     synccheck, racecheck 120 s, initcheck 90 s: 8 minutes for the four; SANITIZE_TIMEOUT=S
#     sets one cap for all); a capped run says "timed out" in the summary and fails.
#   * PYTORCH_NO_CUDA_MEMORY_CACHING=1: with PyTorch's caching allocator an overrun that lands
#     in the same cached segment is a valid address to memcheck, and memory an earlier tensor
#     wrote reads as initialised to initcheck; without it every tensor is its own cudaMalloc.
#     (CUDA graphs need the caching allocator: the cases capture none.)
#   * Triton compiles a kernel on its first launch (ptxas, and its launcher with the host
#     compiler, in child processes): the warm-up run fills TRITON_CACHE_DIR outside the
#     sanitizer, so the sanitized runs only load cubins.
#   * initcheck runs in two parts. initcheck does not record TMA stores (cp.async.bulk.tensor,
#     the sm90 CUTLASS epilogue's only way of writing D) as writes: copying such an output to the
#     host reads, to the tool, as copying uninitialised memory (measured: every byte of every
#     sm90 output, and nothing else). So "initcheck" runs the cases whose output other kernels
#     write (sm80 CUTLASS, CUDA quantizers, Triton) with every check, and "initcheck-tma" runs the
#     sm90 cases with --check-api-memory-access no: their kernels' loads of A, B, scales, bias
#     and workspace are still checked; that every byte of D is written is the reference
#     comparison's job, which every case does (a byte left unwritten would hold whatever the fresh
#     cudaMalloc held, and differ from the reference).
#   * Both initcheck parts leave out the single-op cases at a padded token count (--written-inputs):
#     by the padding contract (w8a8/padding.py) the quantizer writes the first M rows of codes and
#     scales and the GEMM's last token tile reads the pad rows too, for outputs it drops, so
#     initcheck reports each pad scale the epilogue loads. memcheck, synccheck and racecheck run them.
#   * --report-api-errors no: PyTorch and Triton probe the driver with calls that are allowed
#     to fail; only kernel errors are counted (a failed launch fails its case anyway).
#   * The inputs are built on the CPU and copied, and the references run on the CPU, so few
#     kernels besides w8a8's own are sanitized.
set -uo pipefail

OUT=${OUT:-/tmp/out}
DIR="$OUT/sanitize"
mkdir -p "$DIR"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRIVER="$ROOT/benchmarks/sanitize_cases.py"
PY=${PYTHON:-python3}

SANITIZER=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || ls -1 /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)}
if [ -z "$SANITIZER" ] || [ ! -x "$SANITIZER" ]; then
  echo "sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/compute-sanitizer)"
  exit 2
fi

if [ "$#" -gt 0 ]; then REQUESTED=("$@"); else REQUESTED=(memcheck synccheck racecheck initcheck); fi
TOOLS=()
for tool in "${REQUESTED[@]}"; do
  case "$tool" in
    memcheck|synccheck|racecheck) TOOLS+=("$tool") ;;
    initcheck) TOOLS+=(initcheck initcheck-tma) ;;  # the two parts (see above)
    *) echo "sanitize.sh: unknown tool '$tool' (memcheck, synccheck, racecheck, initcheck)"; exit 2 ;;
  esac
done

export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$DIR/triton-cache}
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
export PYTHONUNBUFFERED=1

"$SANITIZER" --version | tail -1
echo "warm-up (no sanitizer): fills $TRITON_CACHE_DIR and checks every case against the reference"
start=$(date +%s)
"$PY" "$DRIVER" --set full > "$DIR/warmup.out" 2>&1
rc=$?
echo "warm-up: exit $rc, $(( $(date +%s) - start )) s: $(tail -1 "$DIR/warmup.out")"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
  tail -30 "$DIR/warmup.out"
  exit 1
fi

: > "$DIR/summary.txt"
status=0
for tool in "${TOOLS[@]}"; do
  outputs=all; written=()
  case "$tool" in
    memcheck)      set=full;  cap=150; extra=(--leak-check no) ;;
    synccheck)     set=full;  cap=120; extra=() ;;
    racecheck)     set=small; cap=120; extra=(--racecheck-report all) ;;
    initcheck)     set=small; cap=90;  extra=(); outputs=other; written=(--written-inputs) ;;
    initcheck-tma) set=small; cap=90;  extra=(--check-api-memory-access no); outputs=tma; written=(--written-inputs) ;;
  esac
  LIMIT=${SANITIZE_TIMEOUT:-$cap}
  log="$DIR/$tool.log"
  start=$(date +%s)
  timeout "$LIMIT" "$SANITIZER" --tool "${tool%-tma}" ${extra[@]+"${extra[@]}"} \
    --error-exitcode 1 --target-processes all --report-api-errors no --print-limit 50 \
    --show-backtrace device --log-file "$log" \
    "$PY" "$DRIVER" --set "$set" --outputs "$outputs" ${written[@]+"${written[@]}"} > "$DIR/$tool.out" 2>&1
  rc=$?
  seconds=$(( $(date +%s) - start ))
  # "ERROR SUMMARY: N errors" (every tool); racecheck also "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)".
  errors=$(grep -Eo "ERROR SUMMARY: [0-9]+" "$log" 2>/dev/null | awk '{s += $3} END {print s + 0}')
  hazards=$(grep -Eo "RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)" "$log" 2>/dev/null \
            | sed -E 's/.*\(([0-9]+) errors?, ([0-9]+) warnings?\)/\1 \2/' | awk '{e += $1; w += $2} END {print e + 0, w + 0}')
  mismatches=$(grep -c "^FAIL " "$DIR/$tool.out" 2>/dev/null)
  mismatches=${mismatches:-0}
  race_errors=${hazards%% *}
  cases=$(grep -Eo "^sanitize_cases: [0-9]+ cases" "$DIR/$tool.out" | grep -Eo "[0-9]+" || echo "?")
  note=""
  [ "$rc" -eq 124 ] && note=" (timed out after $LIMIT s)"
  [ "$tool" = racecheck ] && note="$note racecheck errors/warnings: ${hazards:-0 0}"
  line="$tool: set=$set outputs=$outputs cases=$cases sanitizer_errors=$errors result_mismatches=$mismatches exit=$rc seconds=$seconds$note"
  echo "$line" | tee -a "$DIR/summary.txt"
  if [ "$rc" -ne 0 ] || [ "$errors" -ne 0 ] || [ "$mismatches" -ne 0 ] || [ "${race_errors:-0}" -ne 0 ]; then
    status=1
    grep -m 20 -E "^========= (Invalid|Race|Barrier|Uninitialized|Error|Program hit|Warning)" "$log" 2>/dev/null
    grep -m 10 "^FAIL " "$DIR/$tool.out"
    tail -5 "$DIR/$tool.out"
  fi
done
echo "summary: $DIR/summary.txt"
exit $status
