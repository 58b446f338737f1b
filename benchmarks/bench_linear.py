"""End-to-end benchmark (W8A8Linear, quantization included, vs bf16 F.linear).

    python benchmarks/bench_linear.py --out benchmarks/results
Same options as ``python -m w8a8 bench``; the code is in ``w8a8/bench/``.
"""
import sys

from w8a8.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], suites="linear"))
