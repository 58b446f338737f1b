"""Kernel-level benchmark (scaled_mm backends vs bf16 F.linear and torch._int_mm).

    python benchmarks/bench_scaled_mm.py --out benchmarks/results
Same options as ``python -m w8a8 bench``; the code is in ``w8a8/bench/``.
"""
import sys

from w8a8.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], suites="scaled_mm"))
