"""save_quantized: write a model holding W8A8Linear layers as a compressed-tensors int8 checkpoint.

A save is atomic: everything (config, generation config, side files, shards,
index) is written to a temporary folder beside the target, ``.OUT.w8a8-tmp-HOST-PID-*``,
which then takes the target's place in one exchange of the two names (Linux
``renameat2(RENAME_EXCHANGE)``). The files of an older checkpoint never survive next
to the new one; a save killed at any point leaves the target as it was, old or new,
never absent or half-written. Where the file system cannot exchange names, the old
folder is first renamed to ``.OUT.w8a8-old-HOST-PID-*``: a kill between the two
renames leaves the previous checkpoint there (``load_quantized`` names it, and the next
save to OUT puts it back first). Temporary and old folders of processes of this host
that no longer run are removed (or put back) by the next save to the same target.
Folders get the permissions any new folder gets (the umask); an existing target keeps its own.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import shutil
import socket

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


def _split(state: dict[str, torch.Tensor], max_bytes: int | str) -> list[list[str]]:
    """The tensor names of each shard: ``huggingface_hub``'s split (the one transformers uses; it reads
    ``"5GB"`` too) where it is installed (the ``hf`` extra), else the same greedy rule on bytes (a tensor
    that would cross ``max_bytes`` starts a new shard; a larger one is a shard of its own)."""
    try:
        from huggingface_hub.serialization import split_state_dict_into_shards_factory
    except ImportError:
        if not isinstance(max_bytes, int):
            raise ValueError(f"{_FN}: max_shard_bytes={max_bytes!r}: a size string needs huggingface_hub "
                             f"(pip install w8a8[hf]); pass a number of bytes") from None
        shards, size = [[]], 0
        for name, t in state.items():
            n = t.numel() * t.element_size()
            if shards[-1] and size + n > max_bytes:
                shards.append([])
                size = 0
            shards[-1].append(name)
            size += n
        return shards
    try:  # tied tensors are already written once (the caller dedups them): no storage grouping here
        split = split_state_dict_into_shards_factory(state, get_storage_size=lambda t: t.numel() * t.element_size(),
                                                     filename_pattern="model{suffix}.safetensors",
                                                     max_shard_size=max_bytes)
    except ValueError as exc:
        raise ValueError(f"{_FN}: max_shard_bytes={max_bytes!r}: {exc}") from None
    return list(split.filename_to_tensors.values())


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_output_folder(source: str, out_dir: str, fn: str = _FN) -> None:
    """The output folder must be neither the source, nor hold it, nor lie inside it (a second run of
    ``quantize SRC SRC/int8`` would otherwise nest ``int8/int8/``); ValueError naming both."""
    if _inside(source, out_dir):
        raise ValueError(f"{fn}: the output folder {out_dir} would replace the source folder {source}; pick another")
    if _inside(out_dir, source):
        raise ValueError(f"{fn}: the output folder {out_dir} is inside the source folder {source} (its files would "
                         f"be copied into the output); pick a folder outside it")


def _side_entries(folder: str, names: list[str]) -> list[str]:
    """What ``_copy_side_files`` leaves out of ``folder`` (for ``shutil.copytree``'s ``ignore``):
    hidden entries and weight files, at any depth."""
    return [n for n in names if n.startswith(".") or (is_weight_file(n) and not os.path.isdir(os.path.join(folder, n)))]


def _copy_side_files(src: str, dst: str) -> None:
    """Every non-weight file and folder of ``src`` (tokenizer, chat template, sentence-transformers
    modules), at any depth, except the top ``config.json`` (merged by the caller), hidden entries
    and weight files of any format (Meta's ``original/consolidated.00.pth`` is never carried).
    Links (a Hugging Face cache snapshot's) are copied as the files they point to."""
    skipped = set(_side_entries(src, os.listdir(src))) | {"config.json"}
    for name in sorted(set(os.listdir(src)) - skipped):
        path = os.path.join(src, name)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(dst, name), ignore=_side_entries, dirs_exist_ok=True)
        elif os.path.isfile(path):
            shutil.copy2(path, os.path.join(dst, name))


def checkpoint_config(model: nn.Module) -> dict:
    """The ``quantization_config`` entry of ``model``'s checkpoint: its W8A8Linear layers grouped by
    scheme, the float Linears by exact name in ``ignore`` (read the same way by every tool)."""
    groups: dict[LayerScheme, list[str]] = {}
    for name, layer in model.named_modules():
        if isinstance(layer, W8A8Linear):
            scheme = LayerScheme("channel", layer.act_quant, layer.input_zero_point is not None)
            groups.setdefault(scheme, []).append(name)
    return build_config(groups, [n for n, m in model.named_modules() if isinstance(m, nn.Linear)])


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


_HOST = socket.gethostname().replace(os.sep, "_")


def _sibling(out_dir: str, kind: str) -> str:
    """A fresh name beside ``out_dir``: ``.BASE.w8a8-KIND-HOST-PID-RANDOM``."""
    parent, base = os.path.split(os.path.abspath(out_dir))
    return os.path.join(parent, f".{base}.w8a8-{kind}-{_HOST}-{os.getpid()}-{secrets.token_hex(4)}")


def _new_folder(out_dir: str) -> str:
    """The temporary folder of a save, made with the mode any new folder gets (0o777 less the umask),
    or the target's own mode when it exists."""
    tmp = _sibling(out_dir, "tmp")
    os.mkdir(tmp)
    if os.path.isdir(out_dir):
        os.chmod(tmp, os.stat(out_dir).st_mode & 0o7777)
    return tmp


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def stale_siblings(out_dir: str) -> dict[str, list[str]]:
    """``{"tmp": [...], "old": [...]}``: the folders beside ``out_dir`` left by saves of this host's
    processes that no longer run (killed mid-save)."""
    parent, base = os.path.split(os.path.abspath(out_dir))
    found = {"tmp": [], "old": []}
    if not os.path.isdir(parent):
        return found
    for name in sorted(os.listdir(parent)):
        for kind in found:
            prefix = f".{base}.w8a8-{kind}-{_HOST}-"
            pid = name[len(prefix):].split("-")[0] if name.startswith(prefix) else ""
            if pid.isdigit() and not _alive(int(pid)):
                found[kind].append(os.path.join(parent, name))
    return found


def _clean_stale(out_dir: str) -> None:
    """Put back the previous checkpoint a killed save left renamed (where ``out_dir`` is absent) and
    remove every other stale temporary folder."""
    stale = stale_siblings(out_dir)
    for old in stale["old"]:
        if not os.path.lexists(out_dir):
            os.rename(old, out_dir)
        else:
            shutil.rmtree(old, ignore_errors=True)
    for tmp in stale["tmp"]:
        shutil.rmtree(tmp, ignore_errors=True)


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100
_renameat2 = []  # [the libc function, or None]: looked up once


def exchange(a: str, b: str) -> bool:
    """Swap the names ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where
    the system or the file system cannot (the caller then renames twice)."""
    if not _renameat2:
        try:
            _renameat2.append(getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None))
        except OSError:
            _renameat2.append(None)
    fn = _renameat2[0]
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(err, f"{_FN}: cannot exchange {a} and {b}: {os.strerror(err)}")


def _replace(tmp: str, out_dir: str) -> None:
    """Put the complete folder ``tmp`` at ``out_dir``; the old folder is removed only after the swap."""
    if not os.path.lexists(out_dir):
        os.rename(tmp, out_dir)
        return
    if exchange(tmp, out_dir):  # out_dir is now the new checkpoint, tmp the old one
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = _sibling(out_dir, "old")
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
    max_shard_bytes: int | str = 5 * 2**30,
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
    max_shard_bytes : shard size limit in bytes, or a size as transformers' ``max_shard_size`` takes it
        (``'5GB'``, read by ``huggingface_hub``) (``model-0000i-of-0000n.safetensors`` + index).
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
        check_output_folder(source, out_dir, _FN)
    layers = {n: m for n, m in model.named_modules() if isinstance(m, W8A8Linear)}
    if not layers:
        raise ValueError(f"{_FN}: the model holds no W8A8Linear (run w8a8.quantize_model first)")
    _refuse_shards(layers)
    _refuse_nested(model)
    sdtype = scale_dtype or model_dtype(model)
    config = _base_config(model, out_dir, source)
    config["quantization_config"] = checkpoint_config(model)

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
    shards = [{k: state[k] for k in keys} for keys in _split(state, max_shard_bytes)]
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]

    os.makedirs(os.path.dirname(os.path.abspath(out_dir)), exist_ok=True)
    _clean_stale(out_dir)
    tmp = _new_folder(out_dir)
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
        # safetensors writes 0o600 files; they get the mode of any new file (config.json's: 0o666 less the umask).
        file_mode = os.stat(os.path.join(tmp, "config.json")).st_mode & 0o777
        for fname, shard in tqdm(list(zip(names, shards)), desc="w8a8: saving", unit="shard", disable=not progress):
            save_file(shard, os.path.join(tmp, fname), metadata={"format": "pt"})
            os.chmod(os.path.join(tmp, fname), file_mode)
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
        save_quantized(self, save_directory, max_shard_bytes=max_shard_size, progress=False)


def transformers_models(model: nn.Module) -> dict[str, nn.Module]:
    """The outermost transformers models in ``model`` by name (``""``: the model itself), e.g.
    ``{"0.auto_model": BertModel}`` for a sentence-transformers model."""
    found: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        if _is_transformers_model(module) and not any(name.startswith(f"{outer}.") or outer == "" for outer in found):
            found[name] = module
    return found


def install_save_pretrained(model: nn.Module) -> None:
    """Make ``save_pretrained`` write the int8 checkpoint, on every outermost transformers model
    in ``model`` that holds W8A8Linear layers: the model itself, or one it holds (the ``auto_model``
    of a sentence-transformers model, whose ``save`` calls it)."""
    for inner in transformers_models(model).values():
        if any(isinstance(m, W8A8Linear) for m in inner.modules()):
            inner.save_pretrained = _SavePretrained(inner)


class _SavePretrained:
    """A quantized transformers model's ``save_pretrained``: the int8 checkpoint. An object, not a
    bound method, so that the model still pickles (``torch.save(model)``) and deep-copies."""

    __slots__ = ("model",)

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __call__(self, *args, **kwargs):
        return _save_pretrained(self.model, *args, **kwargs)

    def __getstate__(self):
        return self.model

    def __setstate__(self, model) -> None:
        self.model = model


def _refuse_nested(model: nn.Module) -> None:
    """A model that is not a transformers model but holds one is refused: its checkpoint would name the
    tensors under the outer model's names, next to no transformers config (no other tool reads it)."""
    inner = {n: m for n, m in transformers_models(model).items() if n}
    if inner and not _is_transformers_model(model):
        name, module = next(iter(inner.items()))
        raise ValueError(
            f"{_FN}: {type(model).__name__} is not a transformers model but holds one at {name!r} "
            f"({type(module).__name__}); its checkpoint would name the tensors {name}.* under no transformers "
            f"config, which transformers, vLLM and w8a8.from_pretrained cannot read. Save the transformers model: "
            f"w8a8.save_quantized(model.get_submodule({name!r}), out_dir, source=...), or its save_pretrained "
            f"(sentence-transformers: model.save(out_dir) calls it)"
        )


def _refuse_shards(layers: dict[str, W8A8Linear]) -> None:
    """Tensor-parallel layers hold one rank's slice: refused, naming the layer and how to save instead."""
    from w8a8.parallel.layers import ColumnParallelW8A8Linear, RowParallelW8A8Linear

    for name, layer in layers.items():
        if isinstance(layer, (ColumnParallelW8A8Linear, RowParallelW8A8Linear)):
            raise ValueError(
                f"{_FN}: layer {name!r} is a {type(layer).__name__}, one rank's slice of a tensor-parallel layer "
                f"(weight {list(layer.weight.shape)} of the full model's layer); a checkpoint of it would hold one "
                f"rank's slices under the full model's config. Save the unsharded model (before "
                f"w8a8.parallel.shard_model); each rank then reads its slices with "
                f"w8a8.load_quantized(..., tp_plan=..., tp_group=...)"
            )
