"""from_pretrained: a Hugging Face transformers model from a compressed-tensors int8 folder."""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from w8a8.checkpoint.load import load_quantized


@contextlib.contextmanager
def params_on_meta():
    """Create every nn.Parameter on the meta device; buffers (e.g. rotary ``inv_freq``) stay real."""
    original = nn.Module.register_parameter

    def register(module, name, param):
        original(module, name, param)
        if param is not None and not param.is_meta:
            p = module._parameters[name]
            module._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = register
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def _config_dtype(config) -> torch.dtype:
    d = getattr(config, "dtype", None) or config.to_dict().get("torch_dtype")
    if isinstance(d, str):
        d = getattr(torch, d, None)
    return d if isinstance(d, torch.dtype) else torch.float32


def from_pretrained(
    path: str,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    model_class=None,
    progress: bool = True,
) -> nn.Module:
    """Build a transformers model from ``path/config.json`` on the meta device and load it int8.

    Parameters
    ----------
    path : a folder written by ``w8a8.save_quantized`` or compressed-tensors (int-quantized).
    device : where the tensors go (None: memory-mapped on the CPU).
    dtype : float dtype of the non-quantized tensors (None: the config's ``dtype``, else fp32).
    model_class : a transformers class with ``from_config`` (default ``AutoModelForCausalLM``).
    progress : tqdm bar while loading.

    Returns
    -------
    The model in eval mode, its quantized Linears ``W8A8Linear`` (see ``w8a8.load_quantized``).
    """
    try:
        import transformers
    except ImportError as exc:
        raise ImportError(
            "w8a8.from_pretrained needs Hugging Face transformers: pip install w8a8[hf]"
        ) from exc
    config = transformers.AutoConfig.from_pretrained(path)
    dtype = dtype or _config_dtype(config)
    # The model is built from its config alone; the checkpoint's quantization is applied by w8a8.
    qc = getattr(config, "quantization_config", None)
    if qc is not None:
        del config.quantization_config
    model_class = model_class or transformers.AutoModelForCausalLM
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with params_on_meta():
            model = model_class.from_config(config)
    finally:
        torch.set_default_dtype(previous)
    if qc is not None:
        config.quantization_config = qc
    load_quantized(model, path, device=device, dtype=dtype, progress=progress)
    return model.eval()
