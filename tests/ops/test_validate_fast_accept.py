"""w8a8.validate's fast accept of the fused producers' operands (``_plain_rows``, ``_plain_like``,
``_plain_norm``): over a grid of good and bad operands, the public check raises exactly where the
rules alone raise, with the same message, and whatever the fast expression accepts the rules accept.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from w8a8 import validate


def _rules_rms(x, weight, eps):
    validate._norm_operands("rms_norm_quant", x, weight, eps)
    validate._same_device("rms_norm_quant", x.device, "x", (("weight", weight),))


def _rules_add(x, residual, weight, eps):
    op = "add_rms_norm_quant"
    validate._norm_operands(op, x, weight, eps)
    validate._like(op, "residual", residual, "x", x, "K")
    validate._same_device(op, x.device, "x", (("residual", residual), ("weight", weight)))


def _rules_silu(gate, up):
    op = "silu_mul_quant"
    validate._rows_input(op, gate, "gate", "F")
    validate._like(op, "up", up, "gate", gate, "F")
    validate._same_device(op, gate.device, "gate", (("up", up),))


def _outcome(fn, *args):
    try:
        fn(*args)
    except ValueError as e:
        return str(e)
    return None


def _inputs(k=8):
    """Float rows of several shapes, dtypes and layouts, and things that are not."""
    base = torch.randn(6, 2 * k)
    return [
        torch.randn(3, k), torch.randn(3, k, dtype=torch.bfloat16), torch.randn(2, 3, k, dtype=torch.float16),
        torch.randn(k), torch.randn(0, k), torch.randn(3, 0), torch.randn(3, 1), torch.randn(3, 1)[:, :1].expand(3, 1),
        torch.randn(k, 3).t(), base[:, ::2], base[:3, :k], torch.randn(3, 1).expand(3, k),
        torch.zeros(3, k, dtype=torch.int8), torch.tensor(1.0), torch.randn(3, k, device="meta"), None, [1.0],
    ]


def _weights(k=8):
    return [torch.randn(k), torch.randn(k, dtype=torch.bfloat16), torch.randn(k, dtype=torch.float16),
            torch.randn(2 * k)[::2], torch.randn(k + 1), torch.randn(1, k), torch.randn(1), torch.randn(k, device="meta"),
            torch.zeros(k, dtype=torch.int8), None]


EPS = [1e-5, 0.0, 1, -1e-6, math.nan, math.inf, True, "1e-5", torch.tensor(1e-5)]


@pytest.mark.parametrize("x", _inputs(), ids=lambda t: "x")
def test_rms_norm_quant_raises_exactly_as_the_rules(x):
    for weight, eps in itertools.product(_weights(), EPS):
        expected = _outcome(_rules_rms, x, weight, eps)
        assert _outcome(validate.rms_norm_quant, x, weight, eps) == expected
        if validate._plain_norm(x, weight, eps):
            assert expected is None


@pytest.mark.parametrize("x", _inputs(), ids=lambda t: "x")
def test_add_rms_norm_quant_raises_exactly_as_the_rules(x):
    for residual, weight in itertools.product(_inputs(), _weights()[:4] + [None]):
        for eps in (1e-5, -1.0):
            expected = _outcome(_rules_add, x, residual, weight, eps)
            assert _outcome(validate.add_rms_norm_quant, x, residual, weight, eps) == expected
            if validate._plain_norm(x, weight, eps) and validate._plain_like(residual, x):
                assert expected is None


@pytest.mark.parametrize("gate", _inputs(), ids=lambda t: "gate")
def test_silu_mul_quant_raises_exactly_as_the_rules(gate):
    for up in _inputs():
        expected = _outcome(_rules_silu, gate, up)
        assert _outcome(validate.silu_mul_quant, gate, up) == expected
        if validate._plain_rows(gate) and validate._plain_like(up, gate):
            assert expected is None


def test_the_fast_expression_accepts_the_common_case():
    x, w = torch.randn(4, 64, dtype=torch.bfloat16), torch.randn(64, dtype=torch.bfloat16)
    assert validate._plain_norm(x, w, 1e-6) and validate._plain_like(x.clone(), x)
    assert validate._plain_rows(torch.randn(8, 128)[:, :64])  # leading strides free
