"""save_quantized: write a model holding W8A8Linear layers as a compressed-tensors int8 checkpoint.

A save is atomic: everything (config, generation config, side files, shards,
index) is written to a temporary folder beside the target, which replaces the
target only once complete. The files of an older checkpoint never survive next
to the new one; an interrupted save leaves the old folder as it was (or nothing,
when there was none).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import types

import torch
from torch import nn

from w8a8.checkpoint.format import LayerScheme, build_config
from w8a8.checkpoint.load import INDEX_NAME, local_folder, read_json
from w8a8.checkpoint.safetensors_io import CheckpointError
from w8a8.linear import W8A8Linear

_FN = "w8a8.save_quantized"
# Weight files of any format: never carried from an older checkpoint or a source folder.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".index.json")


def is_weight_file(name: str) -> bool:
    return name.endswith(_WEIGHT_SUFFIXES)


def model_dtype(model: nn.Module) -> torch.dtype:
    """The float dtype of the model's float parameters (biases of W8A8Linear included); fp32 if none."""
    for name, t in model.state_dict().items():
        if t.dtype.is_floating_point and not name.endswith(("weight_scale", "input_scale")):
            return t.dtype
    return torch.float32


def _is_transformers_model(model: nn.Module) -> bool:
    return any(c.__name__ == "PreTrainedModel" for c in type(model).__mro__) and hasattr(model, "config")


def _shards(state: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards, cur, size = [], {}, 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if cur and size + nbytes > max_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = t
        size += nbytes
    return shards + [cur]


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _copy_side_files(src: str, dst: str) -> None:
    """Every non-weight file and folder of ``src`` (tokenizer, chat template, sentence-transformers
    modules), except ``config.json`` (merged by the caller) and hidden entries."""
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name.startswith(".") or name == "config.json" or (os.path.isfile(path) and is_weight_file(name)):
            continue
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(dst, name), dirs_exist_ok=True)
        elif os.path.isfile(path):
            shutil.copy2(path, os.path.join(dst, name))


def _base_config(model: nn.Module, out_dir: str, source: str | None) -> dict:
    """The config the checkpoint's ``quantization_config`` is merged into, read (and checked) before anything is written.

    A transformers model: its own full config (``architectures`` and ``dtype`` set as
    ``save_pretrained`` sets them). Otherwise the ``config.json`` already in ``out_dir``,
    else the source folder's, else an empty one.
    """
    existing = os.path.join(out_dir, "config.json")
    candidates = [existing] + ([os.path.join(source, "config.json")] if source else [])
    found = [read_json(p, "config", _FN) for p in candidates if os.path.exists(p)]  # a bad one is named now
    if _is_transformers_model(model):
        config = json.loads(model.config.to_json_string(use_diff=False))
        config["architectures"] = [type(model).__name__]
        config["dtype"] = str(model_dtype(model)).removeprefix("torch.")
    else:
        config = dict(found[0]) if found else {}
    config.pop("compression_config", None)
    config.pop("quantization_config", None)
    return config


def _replace(tmp: str, out_dir: str) -> None:
    """Put the complete folder ``tmp`` at ``out_dir``; the old folder is removed only after the swap."""
    if not os.path.lexists(out_dir):
        os.rename(tmp, out_dir)
        return
    parent, base = os.path.split(os.path.abspath(out_dir))
    old = tempfile.mkdtemp(prefix=f".{base}.w8a8-old-", dir=parent)
    os.rmdir(old)
    os.rename(out_dir, old)
    try:
        os.rename(tmp, out_dir)
    except BaseException:
        os.rename(old, out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)


def save_quantized(
    model: nn.Module,
    out_dir: str,
    scale_dtype: torch.dtype | None = None,
    max_shard_bytes: int = 5 * 2**30,
    progress: bool = True,
    source: str | None = None,
    tokenizer=None,
) -> list[str]:
    """Write ``model`` (its Linears swapped for ``W8A8Linear``) in the compressed-tensors int8 layout.

    Parameters
    ----------
    model : holds at least one ``W8A8Linear``; every other tensor is written as it is.
    out_dir : the checkpoint folder, replaced atomically (written beside it, then swapped in).
        Non-weight files already there are kept; its weight files never survive.
    scale_dtype : dtype of ``weight_scale`` / ``input_scale`` on disk; None: the
        model's float dtype, as the format has it (bf16 rounds the fp32 scales:
        pass ``torch.float32`` for a bit-exact round trip of a bf16 model).
    max_shard_bytes : shard size limit (``model-0000i-of-0000n.safetensors`` + index).
    progress : a tqdm bar over the shards.
    source : the float model's folder: every non-weight file of it (tokenizer files,
        chat template, ``generation_config.json``, sentence-transformers ``modules.json``
        and ``1_Pooling/``, ...) is copied. Must not be ``out_dir`` nor inside it.
    tokenizer : written with its ``save_pretrained``.

    Returns
    -------
    The paths of the safetensors files written.

    ``config.json``: a transformers model's full config (``architectures``, ``dtype``)
    with ``quantization_config`` merged in, so that ``w8a8.from_pretrained``,
    transformers with compressed-tensors and vLLM load the folder; other models:
    the config already in ``out_dir`` (or in ``source``), else one holding only
    ``quantization_config``. A transformers model's generation config is written too.

    Per layer ``P`` the file holds ``P.weight`` int8 [N, K], ``P.weight_scale``
    [N, 1], ``P.input_scale`` [1] (static), ``P.input_zero_point`` int8 [1]
    (static asymmetric), ``P.bias``.

    Raises
    ------
    ValueError (CheckpointError for a bad ``config.json`` already in ``out_dir`` or
    ``source``, naming it) before anything is written.
    """
    from safetensors.torch import save_file
    from tqdm.auto import tqdm

    out_dir = os.fspath(out_dir)
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"{_FN}: {out_dir} exists and is not a folder")
    if source is not None:
        source = local_folder(source, _FN)
        if _inside(source, out_dir):
            raise ValueError(f"{_FN}: the output folder {out_dir} would replace the source folder {source}; pick another")
    layers = {n: m for n, m in model.named_modules() if isinstance(m, W8A8Linear)}
    if not layers:
        raise ValueError(f"{_FN}: the model holds no W8A8Linear (run w8a8.quantize_model first)")
    sdtype = scale_dtype or model_dtype(model)
    groups: dict[LayerScheme, list[str]] = {}
    for name, layer in layers.items():
        scheme = LayerScheme("channel", layer.act_quant, layer.input_zero_point is not None)
        groups.setdefault(scheme, []).append(name)
    ignore = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    config = _base_config(model, out_dir, source)
    config["quantization_config"] = build_config(groups, ignore)

    state, seen = {}, set()
    for name, t in model.state_dict().items():
        if t.is_meta:
            raise ValueError(f"{_FN}: tensor {name!r} is on the meta device")
        prefix, _, leaf = name.rpartition(".")
        if prefix in layers and leaf == "weight_scale":
            t = t.reshape(-1, 1).to(sdtype)
        elif prefix in layers and leaf == "input_scale":
            t = t.reshape(1).to(sdtype)
        t = t.detach().cpu().contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
        if t.numel() and key in seen:  # a tied tensor: written once, the loader fills its aliases
            continue
        seen.add(key)
        state[name] = t
    shards = _shards(state, max_shard_bytes)
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]

    parent, base = os.path.split(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{base}.w8a8-tmp-", dir=parent)
    try:
        if os.path.isdir(out_dir):
            _copy_side_files(out_dir, tmp)
        if source is not None:
            _copy_side_files(source, tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if _is_transformers_model(model) and getattr(model, "generation_config", None) is not None:
            if not hasattr(model, "can_generate") or model.can_generate():
                model.generation_config.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
        for fname, shard in tqdm(list(zip(names, shards)), desc="w8a8: saving", unit="shard", disable=not progress):
            save_file(shard, os.path.join(tmp, fname), metadata={"format": "pt"})
        if n > 1:
            weight_map = {k: fname for fname, shard in zip(names, shards) for k in shard}
            total = sum(t.numel() * t.element_size() for t in state.values())
            with open(os.path.join(tmp, INDEX_NAME), "w") as f:
                json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        _replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [os.path.join(out_dir, fname) for fname in names]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)\s*$", re.IGNORECASE)


def _shard_bytes(size) -> int:
    if isinstance(size, int):
        return size
    m = _SIZE.match(str(size))
    if not m:
        raise ValueError(f"save_pretrained: max_shard_size must be an int or like '5GB', got {size!r}")
    unit = m.group(2).upper()
    base = 1024 if "I" in unit else 1000
    return int(float(m.group(1)) * base ** "BKMGT".index(unit[0]))


def _save_pretrained(self, save_directory, is_main_process: bool = True, max_shard_size="5GB",
                     safe_serialization: bool = True, **kwargs):
    """``save_pretrained`` of a transformers model holding W8A8Linear layers: ``w8a8.save_quantized``.

    (transformers' own would write the int8 codes as float weights without a
    ``quantization_config``.) Options that change the format are refused.
    """
    refused = {k: v for k, v in kwargs.items() if v not in (None, False)}
    if refused or not safe_serialization:
        what = sorted(refused) if refused else ["safe_serialization=False"]
        raise ValueError(
            f"save_pretrained of a w8a8-quantized model writes its checkpoint with w8a8.save_quantized "
            f"(compressed-tensors int8, safetensors), which does not take {what}; call "
            f"w8a8.save_quantized(model, out_dir, source=..., tokenizer=...) directly"
        )
    if is_main_process:
        save_quantized(self, save_directory, max_shard_bytes=_shard_bytes(max_shard_size), progress=False)


def install_save_pretrained(model: nn.Module) -> None:
    """Make ``model.save_pretrained`` write the int8 checkpoint (a transformers model holding W8A8Linear)."""
    if _is_transformers_model(model) and any(isinstance(m, W8A8Linear) for m in model.modules()):
        model.save_pretrained = types.MethodType(_save_pretrained, model)
