"""Counting the w8a8 ops a forward runs (the fusion tests' measure of quantizations and GEMMs)."""
from __future__ import annotations

from collections import Counter
from unittest import mock

from w8a8 import ops


class OpCount:
    """Counts, in ``calls``, the w8a8 ops called inside the block: quantizers, fused producers,
    layers on their own (w8a8.linear, which quantizes inside) and GEMMs on codes (scaled_mm)."""

    NAMES = ("quantize_per_token", "rms_norm_quant", "silu_mul_quant", "linear", "scaled_mm")

    def __enter__(self):
        self.calls = Counter()
        self._patches = [mock.patch.object(ops, n, side_effect=self._wrap(n, getattr(ops, n))) for n in self.NAMES]
        for p in self._patches:
            p.start()
        return self

    def _wrap(self, name, fn):
        def call(*args, **kwargs):
            self.calls[name] += 1
            return fn(*args, **kwargs)
        return call

    def __exit__(self, *exc):
        for p in self._patches:
            p.stop()
