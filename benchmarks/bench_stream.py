"""The read ceiling at M <= 128: the fastest kernel that only reads a layer's int8 weights,
beside bf16 F.linear and the sm90 GEMM in the same run (GPU only).

    python benchmarks/bench_stream.py --out benchmarks/results/stream_h100.json

The code is in ``w8a8/bench/stream.py``.
"""
import sys

from w8a8.bench.stream import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
