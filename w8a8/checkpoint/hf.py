"""from_pretrained: a Hugging Face transformers model from a compressed-tensors int8 folder.

Local folders only (no network use). The model class comes from the folder's
``config.json`` (``architectures``), the causal-LM class only as a fallback. The
model is built with its parameters on the meta device, in the loading thread
only: other threads constructing modules meanwhile get ordinary tensors.
"""
from __future__ import annotations

import contextlib
import os
import threading

import torch
from torch import nn

from w8a8.checkpoint.format import parse_config
from w8a8.checkpoint.load import float_dtype, load_quantized, local_folder, read_json
from w8a8.checkpoint.safetensors_io import CheckpointError

_FN = "w8a8.from_pretrained"
_local = threading.local()  # .dtype: set while this thread builds a model on the meta device
_lock = threading.Lock()
_installed = {"users": 0, "original": None}


def _register_parameter(module, name, param):
    _installed["original"](module, name, param)
    if param is None or not hasattr(_local, "dtype"):
        return
    p = module._parameters[name]
    dtype = _local.dtype if p.is_floating_point() else p.dtype
    if not p.is_meta or p.dtype != dtype:
        module._parameters[name] = type(p)(p.to("meta", dtype=dtype), requires_grad=p.requires_grad)


@contextlib.contextmanager
def params_on_meta(dtype: torch.dtype):
    """In this thread only: every nn.Parameter created is a meta tensor, float ones in ``dtype``.

    Buffers (e.g. rotary ``inv_freq``) stay real. ``nn.Module.register_parameter`` is
    wrapped while at least one thread is inside; the wrapper does nothing in other threads.
    """
    with _lock:
        if _installed["users"] == 0:
            _installed["original"] = nn.Module.register_parameter
            nn.Module.register_parameter = _register_parameter
        _installed["users"] += 1
    _local.dtype = dtype
    try:
        yield
    finally:
        del _local.dtype
        with _lock:
            _installed["users"] -= 1
            if _installed["users"] == 0:
                if nn.Module.register_parameter is _register_parameter:
                    nn.Module.register_parameter = _installed["original"]
                _installed["original"] = None


def _config_dtype(config) -> torch.dtype:
    d = getattr(config, "dtype", None) or config.to_dict().get("torch_dtype")
    if isinstance(d, str):
        d = getattr(torch, d, None)
    return d if isinstance(d, torch.dtype) and d.is_floating_point else torch.float32


def model_class_for(config, transformers) -> tuple[type, str]:
    """(class, where it came from): the first of ``config.architectures`` that transformers has,
    else ``AutoModelForCausalLM`` when it knows the model type, else ``AutoModel``."""
    for arch in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, arch, None) if isinstance(arch, str) else None
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            return cls, f"config.json architectures {arch!r}"
    causal = transformers.AutoModelForCausalLM
    if type(config) in causal._model_mapping:
        return causal, "AutoModelForCausalLM (config.json names no known architectures)"
    return transformers.AutoModel, "AutoModel (config.json names no known architectures and it is not a causal LM)"


def read_transformers_config(path: str, transformers, fn: str = _FN):
    """AutoConfig of the local folder ``path``; CheckpointError naming ``config.json`` when it is not one."""
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise CheckpointError(f"{fn}: {path} has no config.json (not a model folder)")
    raw = read_json(cfg_path, "config", fn)
    if not isinstance(raw.get("model_type"), str):
        raise CheckpointError(f"{fn}: {cfg_path} has no model_type: not a transformers model config")
    try:
        return transformers.AutoConfig.from_pretrained(path, local_files_only=True), raw
    except (ValueError, KeyError, TypeError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{fn}: {cfg_path}: transformers cannot read it ({first})") from None


def from_pretrained(
    path: str,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    model_class=None,
    progress: bool = True,
) -> nn.Module:
    """Build a transformers model from ``path/config.json`` on the meta device and load it int8.

    Parameters
    ----------
    path : a local folder written by ``w8a8.save_quantized`` or compressed-tensors
        (int-quantized). Hub ids are refused (no network use): download first.
    device : where the tensors go (None: memory-mapped on the CPU).
    dtype : float dtype of the non-quantized tensors, a torch.dtype or its name
        (``"bfloat16"``; None or ``"auto"``: the config's ``dtype``, else fp32).
    model_class : a transformers class (default: from ``architectures`` in config.json,
        else ``AutoModelForCausalLM``, else ``AutoModel``).
    progress : tqdm bar while loading.

    Returns
    -------
    The model in eval mode, its quantized Linears ``W8A8Linear`` (see ``w8a8.load_quantized``);
    its ``save_pretrained`` writes the int8 checkpoint (``w8a8.save_quantized``).

    Raises
    ------
    CheckpointError (a ValueError) for a path that is not a local folder, a folder
    without a transformers config or quantization_config, and everything
    ``load_quantized`` refuses; the model class is named when the tensors do not fit it.
    """
    try:
        import transformers
    except ImportError as exc:
        raise ImportError(
            "w8a8.from_pretrained needs Hugging Face transformers: pip install w8a8[hf]"
        ) from exc
    path = local_folder(path, _FN)
    dtype = float_dtype(dtype, _FN)
    config, raw = read_transformers_config(path, transformers)
    parse_config(raw, os.path.join(path, "config.json"))  # not quantized / unsupported: said before building
    dtype = dtype or _config_dtype(config)
    if model_class is None:
        model_class, origin = model_class_for(config, transformers)
    else:
        origin = "model_class="
    # The model is built from its config alone; the checkpoint's quantization is applied by w8a8.
    qc = getattr(config, "quantization_config", None)
    if qc is not None:
        del config.quantization_config
    build = getattr(model_class, "from_config", None) or model_class._from_config
    with params_on_meta(dtype):
        model = build(config)
    if qc is not None:
        config.quantization_config = qc
    try:
        load_quantized(model, path, device=device, dtype=dtype, progress=progress)
    except CheckpointError as exc:
        if "does not match the model" not in str(exc):
            raise
        raise CheckpointError(
            f"{exc}\n  (model class {type(model).__name__}, from {origin}; pass model_class= for another)"
        ) from None
    return model.eval()
