"""save_quantized: write a model holding W8A8Linear layers as a compressed-tensors int8 checkpoint."""
from __future__ import annotations

import json
import os

import torch
from torch import nn

from w8a8.checkpoint.format import LayerScheme, build_config
from w8a8.checkpoint.load import INDEX_NAME
from w8a8.linear import W8A8Linear


def model_dtype(model: nn.Module) -> torch.dtype:
    """The float dtype of the model's float parameters (biases of W8A8Linear included); fp32 if none."""
    for name, t in model.state_dict().items():
        if t.dtype.is_floating_point and not name.endswith(("weight_scale", "input_scale")):
            return t.dtype
    return torch.float32


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


def save_quantized(
    model: nn.Module,
    out_dir: str,
    scale_dtype: torch.dtype | None = None,
    max_shard_bytes: int = 5 * 2**30,
    progress: bool = True,
) -> list[str]:
    """Write ``model`` (its Linears swapped for ``W8A8Linear``) in the compressed-tensors int8 layout.

    Parameters
    ----------
    model : holds at least one ``W8A8Linear``; every other tensor is written as it is.
    out_dir : created if needed. ``config.json`` there gains (or replaces) its
        ``quantization_config``; without one, a config.json holding only that is written.
    scale_dtype : dtype of ``weight_scale`` / ``input_scale`` on disk; None: the
        model's float dtype, as the format has it (bf16 rounds the fp32 scales:
        pass ``torch.float32`` for a bit-exact round trip of a bf16 model).
    max_shard_bytes : shard size limit (``model-0000i-of-0000n.safetensors`` + index).
    progress : a tqdm bar over the shards.

    Returns
    -------
    The paths of the safetensors files written.

    Per layer ``P`` the file holds ``P.weight`` int8 [N, K], ``P.weight_scale``
    [N, 1], ``P.input_scale`` [1] (static), ``P.input_zero_point`` int8 [1]
    (static asymmetric), ``P.bias``.
    """
    from safetensors.torch import save_file
    from tqdm.auto import tqdm

    layers = {n: m for n, m in model.named_modules() if isinstance(m, W8A8Linear)}
    if not layers:
        raise ValueError("w8a8.save_quantized: the model holds no W8A8Linear (run w8a8.quantize_model first)")
    sdtype = scale_dtype or model_dtype(model)
    groups: dict[LayerScheme, list[str]] = {}
    for name, layer in layers.items():
        scheme = LayerScheme("channel", layer.act_quant, layer.input_zero_point is not None)
        groups.setdefault(scheme, []).append(name)
    ignore = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]

    state, seen = {}, set()
    for name, t in model.state_dict().items():
        if t.is_meta:
            raise ValueError(f"w8a8.save_quantized: tensor {name!r} is on the meta device")
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

    os.makedirs(out_dir, exist_ok=True)
    shards = _shards(state, max_shard_bytes)
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    paths = []
    for fname, shard in tqdm(list(zip(names, shards)), desc="w8a8: saving", unit="shard", disable=not progress):
        path = os.path.join(out_dir, fname)
        save_file(shard, path, metadata={"format": "pt"})
        paths.append(path)
    index = os.path.join(out_dir, INDEX_NAME)
    if n > 1:
        weight_map = {k: fname for fname, shard in zip(names, shards) for k in shard}
        total = sum(t.numel() * t.element_size() for t in state.values())
        with open(index, "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    elif os.path.exists(index):
        os.remove(index)  # a stale index would point the loader at other files

    cfg_path = os.path.join(out_dir, "config.json")
    config = {}
    if os.path.exists(cfg_path):
        with open(cfg_path) as f:
            config = json.load(f)
        config.pop("compression_config", None)
    config["quantization_config"] = build_config(groups, ignore)
    with open(cfg_path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return paths
