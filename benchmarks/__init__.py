"""The w8a8 benchmarks: the lab beside the package, run from a checkout, never installed.

    python -m benchmarks --suites product --out benchmarks/results    # the product grid
    python -m benchmarks.report                                       # docs/PERFORMANCE.md and docs/EVIDENCE.md

``python -m benchmarks --help`` lists the suites and their options. The sweeps that tune a
heuristic (``--configs``, ``--sweep``, and the scripts ``stream``, ``decode_attention``,
``fused_quant``, ``tp``) write files of their own; what a rule keeps of them goes into the
evidence table (``benchmarks/results/evidence.json``).
"""
