"""load_quantized: swap the Linears a compressed-tensors checkpoint names and load it, all or nothing.

Order of work, so that a bad file leaves the model as it was:
``plan`` (which Linears, which scheme) -> ``expected`` (every tensor's dtype
and shape) -> ``check`` (presence, unexpected keys, dtypes, shapes, scales
finite and > 0) -> ``convert`` (memory-mapped tensors, scales to fp32) ->
only then swap the modules and ``load_state_dict(assign=True)``.
"""
from __future__ import annotations

import json
import os
import warnings

import torch
from torch import nn

from w8a8.checkpoint.format import CheckpointConfig, LayerScheme, parse_config
from w8a8.checkpoint.safetensors_io import CheckpointError, MappedFile, TensorInfo, read_header
from w8a8.linear import W8A8Linear

INDEX_NAME = "model.safetensors.index.json"
_FN = "w8a8.load_quantized"


def local_folder(path, fn: str = _FN) -> str:
    """``path`` as a str if it is an existing local folder; CheckpointError naming it otherwise.

    Never touches the network: a string that looks like a Hub id ``org/name`` is
    refused with how to download it first.
    """
    try:
        path = os.fspath(path)
    except TypeError:
        raise CheckpointError(f"{fn}: expected a folder path, got {type(path).__name__}") from None
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise CheckpointError(f"{fn}: {path} is a file, expected a checkpoint folder")
    hub_like = path.count("/") == 1 and not path.startswith((".", "/", "~")) and all(path.split("/"))
    if hub_like:
        raise CheckpointError(
            f"{fn}: {path!r} is not a local folder; Hugging Face Hub ids are not downloaded (w8a8 never uses "
            f"the network): download it first (huggingface-cli download {path} --local-dir DIR) and pass DIR"
        )
    from w8a8.checkpoint.save import stale_siblings

    left = stale_siblings(path)["old"]
    if left:
        raise CheckpointError(
            f"{fn}: {path} does not exist; a save killed while swapping folders left the previous checkpoint at "
            f"{left[-1]}: rename it to {path} (the next save_quantized to {path} does it)"
        )
    raise CheckpointError(f"{fn}: {path} does not exist")


def read_json(path: str, what: str, fn: str = _FN) -> dict:
    """A JSON object from ``path``; CheckpointError naming the file for anything else."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as exc:
        raise CheckpointError(f"{fn}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{fn}: {path} is not a JSON {what} (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{fn}: {path} is not a valid JSON {what} ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise CheckpointError(f"{fn}: {path} is not a valid JSON {what} (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{fn}: {path} must hold a JSON object ({what}), got {type(obj).__name__}")
    return obj


def read_config(ckpt_dir: str) -> dict:
    path = os.path.join(ckpt_dir, "config.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"{_FN}: {ckpt_dir} has no config.json")
    return read_json(path, "config")


def _index_entries(ckpt_dir: str, index: str) -> dict[str, str]:
    """weight_map of the index, each file name checked to be a plain ``.safetensors`` name in the folder.

    The name may be a link (a Hugging Face cache snapshot links each file to ``../../blobs/``):
    what is checked is the name the index gives, never where its link points.
    """
    weight_map = read_json(index, "index").get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise CheckpointError(f"{_FN}: {index}: weight_map must map tensor names to file names, got {type(weight_map).__name__}")
    for name, fname in weight_map.items():
        if os.path.basename(fname) != fname or fname in ("", ".", "..") or (os.altsep and os.altsep in fname):
            raise CheckpointError(f"{_FN}: {index}: tensor {name!r} maps to {fname!r}, which is not a file of {ckpt_dir}")
        if not fname.endswith(".safetensors"):
            raise CheckpointError(f"{_FN}: {index}: tensor {name!r} maps to {fname!r}; only .safetensors files are read")
    return weight_map


def checkpoint_files(ckpt_dir: str) -> list[str]:
    """The safetensors files of a folder: those of its index, else all ``*.safetensors``."""
    index = os.path.join(ckpt_dir, INDEX_NAME)
    if os.path.isfile(index):
        names = sorted(set(_index_entries(ckpt_dir, index).values()))
    else:
        names = sorted(n for n in os.listdir(ckpt_dir) if n.endswith(".safetensors"))
    if not names:
        found = [n for n in os.listdir(ckpt_dir) if n.endswith((".bin", ".pt", ".pth"))]
        raise CheckpointError(
            f"{_FN}: {ckpt_dir} holds no .safetensors files"
            + (f" (found {found}: pickle files are never loaded)" if found else "")
        )
    paths = [os.path.join(ckpt_dir, n) for n in names]
    for p in paths:
        if not os.path.isfile(p):
            raise CheckpointError(f"{_FN}: {index} names {p}, which does not exist")
    return paths


def read_headers(paths: list[str]) -> dict[str, TensorInfo]:
    infos: dict[str, TensorInfo] = {}
    for path in paths:
        for name, info in read_header(path).items():
            if name in infos:
                raise CheckpointError(f"{_FN}: tensor {name!r} is in both {infos[name].path} and {path}")
            infos[name] = info
    index = os.path.join(os.path.dirname(paths[0]), INDEX_NAME)
    if os.path.isfile(index):
        weight_map = _index_entries(os.path.dirname(paths[0]), index)
        for name, fname in weight_map.items():
            if name not in infos or os.path.basename(infos[name].path) != fname:
                actual = os.path.basename(infos[name].path) if name in infos else "no file"
                raise CheckpointError(f"{_FN}: {index}: tensor {name!r} maps to {fname}, but it is in {actual}")
        unlisted = sorted(set(infos) - set(weight_map))
        if unlisted:
            raise CheckpointError(f"{_FN}: {index} does not list {len(unlisted)} tensors of its files: {unlisted[:8]}")
    return infos


def float_dtype(dtype, fn: str = _FN) -> torch.dtype | None:
    """None, a floating torch.dtype, or its name (``"bfloat16"``, ``"torch.float16"``); anything else is refused."""
    if dtype is None or dtype == "auto":
        return None
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."), dtype)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise CheckpointError(f"{fn}: dtype must be a float dtype (e.g. torch.bfloat16 or 'bfloat16'), got {dtype!r}")
    return dtype


def plan(model: nn.Module, config: CheckpointConfig) -> dict[str, LayerScheme]:
    """Layer name -> scheme for every Linear the config quantizes (errors name unsupported schemes)."""
    out = {}
    for name, module in model.named_modules():
        scheme = config.scheme_for(name, module)
        if scheme is not None:
            out[name] = scheme
    if not out:
        raise CheckpointError(f"{_FN}: no Linear of the model matches the checkpoint's targets {[g.targets for g in config.groups]}")
    return out


class _Spec:
    """What one tensor must be.

    kind : ``"int8"`` (weights), ``"scale"`` (any float dtype, upcast to fp32),
        ``"zero_point"`` (int8 or int32, kept int8), ``"zero"`` (optional: a
        zero point of a symmetric scheme, which older files hold; must be all
        zeros and is dropped), ``"float"`` (any float dtype,
        cast to ``dtype``) or ``"exact"`` (exactly ``dtype``: integer buffers).
    shapes : the shapes accepted.
    """

    def __init__(self, kind, shapes, dtype=None):
        self.kind, self.shapes, self.dtype = kind, shapes, dtype


def _layer_specs(prefix: str, linear: nn.Linear, scheme: LayerScheme, dtype) -> dict[str, _Spec]:
    n, k = linear.out_features, linear.in_features
    scale_shapes = [(n, 1), (n,)] if scheme.weight_strategy == "channel" else [(1,), ()]
    specs = {f"{prefix}weight": _Spec("int8", [(n, k)]), f"{prefix}weight_scale": _Spec("scale", scale_shapes)}
    if scheme.act_quant == "static":
        specs[f"{prefix}input_scale"] = _Spec("scale", [(1,), ()])
    if scheme.input_zero_point:
        specs[f"{prefix}input_zero_point"] = _Spec("zero_point", [(1,), ()])
    elif scheme.act_quant == "static":
        specs[f"{prefix}input_zero_point"] = _Spec("zero", [(1,), ()])
    specs[f"{prefix}weight_zero_point"] = _Spec("zero", scale_shapes)
    if linear.bias is not None:
        specs[f"{prefix}bias"] = _Spec("float", [(n,)], dtype or linear.bias.dtype)
    return specs


def expected_tensors(model: nn.Module, layers: dict[str, LayerScheme], dtype=None):
    """(name -> _Spec, alias groups): every tensor the checkpoint must hold once the layers are swapped."""
    specs: dict[str, _Spec] = {}
    by_id: dict[int, list[str]] = {}
    for name, t in model.state_dict(keep_vars=True).items():
        prefix, _, _ = name.rpartition(".")
        if prefix in layers:
            continue
        by_id.setdefault(id(t), []).append(name)
        if t.dtype.is_floating_point:
            specs[name] = _Spec("float", [tuple(t.shape)], dtype or t.dtype)
        else:
            specs[name] = _Spec("exact", [tuple(t.shape)], t.dtype)
    for lname, scheme in layers.items():
        specs.update(_layer_specs(lname + ".", model.get_submodule(lname), scheme, dtype))
    return specs, [names for names in by_id.values() if len(names) > 1]


def check(infos: dict[str, TensorInfo], specs: dict[str, _Spec], aliases, strict: bool, where: str = "checkpoint") -> None:
    """Presence, unexpected keys, dtype and shape of every tensor; raises CheckpointError listing all problems."""
    aliased = {n: group for group in aliases for n in group}
    problems = []
    missing = [
        n for n, spec in specs.items()
        if spec.kind != "zero" and n not in infos and not any(a in infos for a in aliased.get(n, ()))
    ]
    if missing:
        problems.append(f"missing {len(missing)} tensors: {missing[:8]}" + (" ..." if len(missing) > 8 else ""))
    unexpected = sorted(set(infos) - set(specs))
    if unexpected:
        msg = f"unexpected {len(unexpected)} tensors: {unexpected[:8]}" + (" ..." if len(unexpected) > 8 else "")
        if strict:
            problems.append(msg + " (strict=False ignores them)")
        else:
            warnings.warn(f"{_FN}: {msg}", stacklevel=3)
    for name, spec in specs.items():
        info = infos.get(name)
        if info is None:
            continue
        ok_dtype = {
            "int8": info.dtype == torch.int8,
            "zero_point": info.dtype in (torch.int8, torch.int32),
            "zero": info.dtype in (torch.int8, torch.int32),
            "scale": info.dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64),
            "float": info.dtype.is_floating_point,
            "exact": info.dtype == spec.dtype,
        }[spec.kind]
        if not ok_dtype:
            want = {"int8": "int8", "zero_point": "int8", "zero": "int8", "scale": "a float dtype", "float": "a float dtype"}.get(
                spec.kind, str(spec.dtype)
            )
            problems.append(f"{name}: expected dtype {want}, got {info.dtype}")
        if info.shape not in spec.shapes:
            problems.append(f"{name}: expected shape {' or '.join(str(list(s)) for s in spec.shapes)}, got {list(info.shape)}")
    if problems:
        raise CheckpointError(f"{_FN}: {where} does not match the model:\n  " + "\n  ".join(problems))


def check_scales(name: str, t: torch.Tensor, weight: torch.Tensor | None = None) -> None:
    """Scales must be finite and > 0; a weight scale may be 0 where its rows of ``weight`` are all zero.

    (An all-zero output row quantizes to codes 0 with scale 0; its output is exactly the bias.)
    """
    t = t.float().reshape(-1)
    bad = ~(torch.isfinite(t) & (t > 0))
    if weight is not None and bad.any():
        zero_rows = ~weight.reshape(t.numel(), -1).any(dim=1) if weight.numel() else torch.ones_like(bad)
        bad &= ~((t == 0) & zero_rows)
    if bad.any():
        i = int(bad.nonzero()[0])
        raise CheckpointError(
            f"{_FN}: {name} must be finite and > 0; {int(bad.sum())} of {t.numel()} are not "
            f"(first at flat index {i}: {t[i].item()})"
            + ("; 0 is accepted only for an all-zero weight row" if weight is not None else "")
        )


def load_quantized(
    model: nn.Module,
    ckpt_dir: str,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    strict: bool = True,
    progress: bool = False,
    tp_plan: dict | None = None,
    tp_group=None,
    fuse: bool = True,
) -> nn.Module:
    """Load a compressed-tensors int8 checkpoint into a float model, swapping its Linears, in place.

    Parameters
    ----------
    model : any float model (real or meta tensors); the Linears that the
        checkpoint's ``config_groups`` target (and ``ignore`` spares) become
        ``W8A8Linear``.
    ckpt_dir : a folder with ``config.json`` and ``*.safetensors`` (an index for shards).
    device : where tensors go (None: stay memory-mapped on the CPU).
    dtype : float dtype for the float tensors and biases (None: the model's).
    strict : unexpected checkpoint tensors are an error (False: a warning).
    progress : a tqdm bar over the tensors.
    tp_plan, tp_group : tensor parallelism (``w8a8.parallel``): layer name -> ``Colwise()``
        / ``Rowwise()``; those layers become this rank's shard of ``tp_group`` and only
        their slices are copied out of the memory-mapped files (the checks still see the
        whole tensors' headers).
    fuse : ``w8a8.fusion.fuse_model`` the loaded layers (shared quantization, merged siblings,
        fused producers; see ``W8A8Config.fuse``), recorded at the model's first eager forward.

    Returns
    -------
    The model. ``W8A8Linear`` buffers: ``weight`` int8 [N, K] as stored (bit for
    bit); ``weight_scale`` fp32 [N] (a per-tensor [1] scale expanded);
    ``input_scale`` fp32 [1]; ``input_zero_point`` int8 [1].

    Raises
    ------
    CheckpointError (a ValueError) before anything in the model changes: no
    config or safetensors, unsupported scheme (names the layer), missing,
    unexpected, wrong-dtype or wrong-shape tensors, scales not finite and > 0,
    truncated files.
    """
    from tqdm.auto import tqdm

    ckpt_dir = local_folder(ckpt_dir)
    dtype = float_dtype(dtype)
    config = parse_config(read_config(ckpt_dir), os.path.join(ckpt_dir, "config.json"))
    infos = read_headers(checkpoint_files(ckpt_dir))
    layers = plan(model, config)
    tp_plan = dict(tp_plan or {})
    for lname, style in tp_plan.items():
        if lname not in layers:
            raise CheckpointError(f"{_FN}: tp_plan names {lname!r}, which is not a quantized Linear of this checkpoint")
        linear = model.get_submodule(lname)
        try:
            style.check(lname, linear.out_features, linear.in_features, layers[lname].input_zero_point, tp_group)
        except ValueError as exc:
            raise CheckpointError(f"{_FN}: {exc}") from None
    specs, aliases = expected_tensors(model, layers, dtype)
    check(infos, specs, aliases, strict, f"checkpoint {ckpt_dir}")
    persistent = set(model.state_dict(keep_vars=True))
    for name, buf in model.named_buffers():
        if buf.is_meta and name not in persistent and name.rpartition(".")[0] not in layers:
            raise CheckpointError(f"{_FN}: non-persistent buffer {name!r} is on the meta device; no checkpoint can fill it")

    files = {path: MappedFile(path) for path in {infos[n].path for n in specs if n in infos}}
    raw = {n: files[infos[n].path].tensor(infos[n]) for n in specs if n in infos}
    state: dict[str, torch.Tensor] = {}
    for name in tqdm(list(raw), desc="w8a8: loading", unit="tensor", disable=not progress):
        spec, t = specs[name], raw[name]
        lname, _, buffer = name.rpartition(".")
        if spec.kind == "scale":
            check_scales(name, t, raw.get(f"{lname}.weight") if buffer == "weight_scale" else None)
            t = t.float().reshape(-1)
        elif spec.kind == "zero_point":
            if t.dtype != torch.int8:
                if (t < -128).any() or (t > 127).any():
                    raise CheckpointError(f"{_FN}: {infos[name].path}: {name} = {t.tolist()} is outside int8")
                t = t.to(torch.int8)
            t = t.reshape(1)
        elif spec.kind == "zero":
            if t.any():
                raise CheckpointError(f"{_FN}: {infos[name].path}: {name} is nonzero, but its group's scheme is symmetric")
            continue
        elif spec.kind == "float" and t.dtype != spec.dtype:
            t = t.to(spec.dtype)
        if lname in layers and buffer == "weight_scale":
            n = model.get_submodule(lname).out_features
            if t.numel() == 1 and n != 1:
                t = t.expand(n)  # a per-tensor scale, per channel (sliced below, copied at the end)
        if lname in tp_plan:
            linear = model.get_submodule(lname)
            t = tp_plan[lname].slice(buffer, t, linear.out_features, linear.in_features, tp_group)
        state[name] = t if device is None else t.to(device)
    for key in [f"{lname}.weight_scale" for lname in layers]:
        state[key] = state[key].contiguous()
    for group in aliases:
        present = next(n for n in group if n in state)
        for n in group:
            state.setdefault(n, state[present])

    # Nothing above touched the model. The swap and the load are undone together if either fails.
    saved = [(m, dict(m._parameters), dict(m._buffers), dict(m._modules)) for m in model.modules()]
    try:
        for lname, scheme in layers.items():
            parent_name, _, child = lname.rpartition(".")
            parent = model.get_submodule(parent_name)
            linear = getattr(parent, child)
            bias = state.get(f"{lname}.bias")
            args = dict(in_features=linear.in_features, out_features=linear.out_features, bias=linear.bias is not None,
                        act_quant=scheme.act_quant, dtype=bias.dtype if bias is not None else None,
                        input_zero_point=scheme.input_zero_point)
            with torch.device("meta"):
                layer = tp_plan[lname].empty(args, tp_group) if lname in tp_plan else W8A8Linear(**args)
            setattr(parent, child, layer)
        model.load_state_dict(state, strict=True, assign=True)
    except BaseException:
        for m, params, buffers, modules in saved:
            m._parameters.clear(), m._parameters.update(params)
            m._buffers.clear(), m._buffers.update(buffers)
            m._modules.clear(), m._modules.update(modules)
        raise
    from w8a8.checkpoint.save import install_save_pretrained

    install_save_pretrained(model)
    if fuse:
        from w8a8.quantize_model import apply_fusion

        apply_fusion(model)
    return model
