"""Decode-step times (eager / compile / CUDA graph, bf16 vs W8A8) and host time per layer call.

    python benchmarks/bench_decode.py --out benchmarks/results/decode_h100.json
The code is in ``w8a8/bench/decode.py``.
"""
import sys

from w8a8.bench.decode import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
