"""Activation quantization bandwidth (Triton per-token kernel); see ``w8a8/bench/quant.py``.

    python benchmarks/bench_quant.py --out benchmarks/results/quant_h100.json [--sweep]
"""
import sys

from w8a8.bench.quant import main

if __name__ == "__main__":
    sys.exit(main())
