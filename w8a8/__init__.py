"""w8a8: fast int8 weight x int8 activation linear layers for PyTorch.

The math (stated once, in ``w8a8.reference``)::

    out = a_scale * (b_scale^T * (a_q @ b_q^T in int32)) + bias     (epilogue in fp32)

``import w8a8`` costs little beyond ``import torch``: triton, torch._dynamo, transformers
and safetensors are imported where they are used (tests/test_packaging.py checks it).
"""
from w8a8._version import __version__
from w8a8.dispatch import BACKENDS
from w8a8.calibrate import calibrate, llama_mappings, smooth
from w8a8.checkpoint import CheckpointError, from_pretrained, load_quantized, save_quantized
from w8a8.config import W8A8Config
from w8a8.fuse import FusionReport, fuse_model, unfuse_model
from w8a8.generation import Generator
from w8a8.linear import QuantizedActivation, W8A8Linear
from w8a8.ops import linear, quantize_per_token, quantize_static, rms_norm_quant, scaled_mm, silu_mul_quant
from w8a8.quantize_model import QuantizationReport, quantize_model

__all__ = [
    "BACKENDS",
    "CheckpointError",
    "FusionReport",
    "Generator",
    "QuantizationReport",
    "QuantizedActivation",
    "W8A8Config",
    "W8A8Linear",
    "calibrate",
    "from_pretrained",
    "fuse_model",
    "linear",
    "llama_mappings",
    "load_quantized",
    "quantize_model",
    "quantize_per_token",
    "quantize_static",
    "rms_norm_quant",
    "save_quantized",
    "scaled_mm",
    "silu_mul_quant",
    "smooth",
    "unfuse_model",
]
