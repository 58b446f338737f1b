"""Triton kernels of w8a8: int8 quantization and the int8 x int8 scaled matmul.

Plain functions on tensors (the ``torch.library`` ops in ``w8a8.ops`` wrap them);
the math they implement is ``w8a8.reference``. On the CPU they run only in Triton's
interpreter: ``TRITON_INTERPRET=1`` must be set before this package is imported.

* ``quant.py``     - ``quantize_per_token``, ``quantize_static`` (bit-identical to the reference)
* ``scaled_mm.py`` - ``scaled_mm`` and its tile-config table ``SCALED_MM_CONFIGS``
* ``norm_quant.py`` - ``rms_norm_quant`` (with or without the residual add): the per-token
  quantizer behind RMSNorm
* ``silu_quant.py`` - ``silu_mul_quant``: the per-token quantizer behind SiLU(gate) * up
* ``fused_common.py`` - what those two share
"""
from w8a8.triton.norm_quant import rms_norm_quant
from w8a8.triton.quant import (
    PerTokenConfig,
    StaticConfig,
    per_token_config,
    quantize_per_token,
    quantize_per_token_out,
    quantize_static,
    quantize_static_out,
    static_config,
)
from w8a8.triton.scaled_mm import (
    SCALED_MM_CONFIGS,
    ScaledMMConfig,
    scaled_mm,
    scaled_mm_out,
    select_config,
)
from w8a8.triton.silu_quant import silu_mul_quant

__all__ = [
    "PerTokenConfig",
    "SCALED_MM_CONFIGS",
    "ScaledMMConfig",
    "StaticConfig",
    "per_token_config",
    "quantize_per_token",
    "quantize_per_token_out",
    "quantize_static",
    "quantize_static_out",
    "rms_norm_quant",
    "scaled_mm",
    "scaled_mm_out",
    "select_config",
    "silu_mul_quant",
    "static_config",
]
