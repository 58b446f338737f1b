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


def first_line(exc: BaseException) -> str:
    """An exception's first line (transformers' messages run to many), or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
        raise CheckpointError(f"{fn}: {cfg_path}: transformers cannot read it ({first_line(exc)})") from None


def from_pretrained(
    path: str,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    model_class=None,
    progress: bool = True,
    quantize=None,
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
    quantize : a ``w8a8.W8A8Config``: ``path`` is then a float folder (config.json without
        quantization_config, ``*.safetensors``), quantized while loading, layer by layer:
        each selected Linear's float weight is read from the memory-mapped file, moved to
        ``device`` in ``dtype``, quantized there and dropped before the next, so the float
        Linear weights never sit on the device together. The same int8 model as loading
        the float model and calling ``quantize_model(model, quantize)``. Calibration
        (``calibration``, SmoothQuant) needs the float model run, so it is refused here;
        static scales can come as ``input_scales``. The QuantizationReport is
        ``model.w8a8_report``.

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
    if quantize is not None:
        return _from_float_folder(path, config, raw, quantize, device, dtype, model_class, progress, transformers)
    parse_config(raw, os.path.join(path, "config.json"))  # not quantized / unsupported: said before building
    dtype = dtype or _config_dtype(config)
    # The model is built from its config alone; the checkpoint's quantization is applied by w8a8.
    qc = getattr(config, "quantization_config", None)
    if qc is not None:
        del config.quantization_config
    model, origin = _build_on_meta(config, model_class, dtype, transformers)
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


def _build_on_meta(config, model_class, dtype, transformers) -> tuple[nn.Module, str]:
    """(the model built from ``config`` with its parameters on the meta device in ``dtype``,
    where its class came from): ``model_class`` if given, else ``model_class_for``."""
    if model_class is None:
        model_class, origin = model_class_for(config, transformers)
    else:
        origin = "model_class="
    build = getattr(model_class, "from_config", None) or model_class._from_config
    with params_on_meta(dtype):
        return build(config), origin


def _from_float_folder(path, config, raw, quantize, device, dtype, model_class, progress, transformers) -> nn.Module:
    """``from_pretrained(float_folder, quantize=W8A8Config(...))``: quantize while loading."""
    from w8a8.config import W8A8Config

    if not isinstance(quantize, W8A8Config):
        raise TypeError(f"{_FN}: quantize must be a w8a8.W8A8Config or None, got {type(quantize).__name__}")
    if quantize.calibration is not None:
        raise ValueError(
            f"{_FN}: quantize= with calibration (static scales or SmoothQuant) needs the float model run on the "
            "batches; load it (transformers from_pretrained) and call w8a8.quantize_model(model, config), "
            "or pass input_scales= for static scales"
        )
    cfg_path = os.path.join(path, "config.json")
    if raw.get("quantization_config") or raw.get("compression_config"):
        raise CheckpointError(f"{_FN}: {cfg_path} holds a quantization_config: {path} is already quantized; drop quantize=")
    dtype = dtype or _config_dtype(config)
    model, origin = _build_on_meta(config, model_class, dtype, transformers)
    model.w8a8_report = load_float_quantized(
        model, path, quantize, device=device, dtype=dtype, progress=progress, origin=origin
    )
    return model.eval()


def load_float_quantized(model: nn.Module, path: str, config, device=None, dtype=None, progress: bool = False,
                         origin: str = ""):
    """Fill the meta ``model`` from the float safetensors of ``path``, quantizing the Linears
    ``config`` selects one at a time on ``device``; returns the QuantizationReport.

    Every tensor is checked present (aliases, i.e. tied weights, count once), float where the
    model's is, and of the model's shape, before any is read: CheckpointError naming the file, the
    tensor, the expected and the actual shape.
    """
    from tqdm.auto import tqdm

    from w8a8.checkpoint.load import checkpoint_files, read_headers
    from w8a8.checkpoint.safetensors_io import MappedFile
    from w8a8.quantize_model import (QuantizationReport, check_static_scales, quantize_layer, select_layers,
                                     warn_if_empty)

    report = QuantizationReport()
    layers = select_layers(model, config, report, allow_meta=True)
    if config.act_quant == "static":
        check_static_scales(layers, config.input_scales, _FN)
    infos = read_headers(checkpoint_files(path))
    tensors = model.state_dict(keep_vars=True)
    groups: dict[int, list[str]] = {}
    for name, t in tensors.items():
        groups.setdefault(id(t), []).append(name)
    source = {}
    missing = []
    for names in groups.values():
        present = next((n for n in names if n in infos), None)
        for n in names:
            source[n] = present
        if present is None:
            missing += names
    if missing:
        raise CheckpointError(
            f"{_FN}: {path} does not hold {len(missing)} weights of {type(model).__name__}"
            + (f" (from {origin})" if origin else "") + f": {missing[:5]}; they would be random"
        )
    problems = []
    for name, info in ((n, infos[source[n]]) for n in source):
        if not info.dtype.is_floating_point and tensors[name].is_floating_point():
            problems.append(f"{info.path}: {source[name]} is {info.dtype}, expected a float tensor")
        if info.shape != tuple(tensors[name].shape):
            problems.append(f"{info.path}: {source[name]} has shape {list(info.shape)}, expected "
                            f"{list(tensors[name].shape)} ({name} of {type(model).__name__})")
    if problems:
        raise CheckpointError(
            f"{_FN}: {path} does not match {type(model).__name__}" + (f" (from {origin})" if origin else "")
            + ":\n  " + "\n  ".join(dict.fromkeys(problems))
        )
    files = {p: MappedFile(p) for p in {infos[s].path for s in source.values()}}

    def read(name: str) -> torch.Tensor:
        info = infos[source[name]]
        t = files[info.path].tensor(info)
        want = dtype if t.is_floating_point() else t.dtype
        return t.to(device=device if device is not None else t.device, dtype=want)

    state = {n: read(n) for n in source if n.rpartition(".")[0] not in layers}
    new = {}
    for lname in tqdm(layers, desc="w8a8: loading and quantizing", unit="layer", disable=not progress):
        meta = model.get_submodule(lname)
        with torch.device("meta"):
            linear = nn.Linear(meta.in_features, meta.out_features, bias=meta.bias is not None)
        linear.weight = nn.Parameter(read(f"{lname}.weight"), requires_grad=False)
        if meta.bias is not None:
            linear.bias = nn.Parameter(read(f"{lname}.bias"), requires_grad=False)
        new[lname] = quantize_layer(lname, linear, config, config.input_scales, report, _FN)
        del linear  # the float weight goes before the next layer's is read
    for lname, layer in new.items():
        parent_name, _, child = lname.rpartition(".")
        setattr(model.get_submodule(parent_name), child, layer)
        report.replaced.append(lname)
    model.load_state_dict(state, strict=False, assign=True)
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if left:
        raise CheckpointError(f"{_FN}: {len(left)} tensors were not loaded from {path}: {left[:5]}")
    warn_if_empty(report, _FN, stacklevel=4)
    if report.replaced:
        from w8a8.checkpoint.save import install_save_pretrained
        from w8a8.quantize_model import apply_fusion

        install_save_pretrained(model)
        if config.fuse:
            report.fusion = apply_fusion(model, merge=config.merge)
    return report
