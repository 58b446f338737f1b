"""Split-K / stream-K benchmark of the CUTLASS kernel (each K decomposition vs data-parallel).

    python benchmarks/bench_split_k.py --out benchmarks/results [--sweep]
Same options as ``python -m w8a8 bench``; the code is in ``w8a8/bench/split_k.py``.
"""
import sys

from w8a8.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], suites="split_k"))
