"""w8a8: fast int8 weight x int8 activation linear layers for PyTorch.

The math (stated once, in ``w8a8.reference``)::

    out = a_scale * (b_scale^T * (a_q @ b_q^T in int32)) + bias     (epilogue in fp32)

The top level holds what a user of a model needs: quantize it (``quantize_model`` with a
``W8A8Config``, or ``from_pretrained``), save and load it, generate with it. Everything
else is reached through its module (docs/API.md lists them): the ops (``w8a8.ops``:
``scaled_mm``, ``linear``, the quantizers and fused producers), calibration
(``w8a8.calibrate``), fusion (``w8a8.fusion``), kernel choice (``w8a8.dispatch``), tensor
parallelism (``w8a8.parallel``).

``import w8a8`` costs little beyond ``import torch``: triton, torch._dynamo, transformers
and safetensors are imported where they are used (tests/repository/test_packaging.py checks it).
"""
from w8a8 import calibrate, dispatch, fusion, ops  # modules: w8a8.ops.scaled_mm, w8a8.calibrate.smooth, ...
from w8a8._version import __version__
from w8a8.checkpoint import CheckpointError, from_pretrained, load_quantized, save_quantized
from w8a8.config import W8A8Config
from w8a8.generation import Generator
from w8a8.linear import W8A8Linear
from w8a8.quantize_model import quantize_model

__all__ = [
    "CheckpointError",
    "Generator",
    "W8A8Config",
    "W8A8Linear",
    "__version__",
    "from_pretrained",
    "load_quantized",
    "ops",
    "quantize_model",
    "save_quantized",
]
