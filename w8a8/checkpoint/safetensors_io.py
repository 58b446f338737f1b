"""Safetensors files, read with the ``safetensors`` library: checked, then memory-mapped.

Never unpickles. ``read_header`` opens each file with ``safetensors.safe_open``, which checks
it as the library checks every file (a JSON header of well-formed entries, known dtypes,
byte lengths matching the shapes, the entries tiling the data with no gap, overlap or
trailing byte); its refusal becomes a ``CheckpointError`` naming the file, with the
library's reason. ``MappedFile.tensor`` is ``safe_open(...).get_tensor``: a view of the
file's pages mapped copy-on-write (nothing is read until used; writing to it never
reaches the file).
"""
from __future__ import annotations

import torch

DTYPES = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
_FN = "w8a8.load_quantized"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: missing, malformed, inconsistent or unsupported.

    A ``ValueError``, so ``except ValueError`` keeps catching it. The message names
    the file and, where it applies, the tensor, the expected and the actual value.
    """


class TensorInfo:
    """One tensor of a safetensors file, not yet read: ``dtype`` and ``shape``."""

    __slots__ = ("path", "name", "dtype", "shape")

    def __init__(self, path, name, dtype, shape):
        self.path, self.name, self.dtype, self.shape = path, name, dtype, shape


def read_header(path: str) -> dict[str, TensorInfo]:
    """The tensors of the safetensors file ``path``: name -> TensorInfo.

    Raises CheckpointError naming the file for anything the ``safetensors`` library refuses
    (with its reason), and naming the tensor for a dtype torch has no type for.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            slices = {name: f.get_slice(name) for name in f.keys()}
            found = {name: (sl.get_dtype(), tuple(sl.get_shape())) for name, sl in slices.items()}
    except SafetensorError as exc:
        raise CheckpointError(f"{_FN}: {path} is not a valid safetensors file (safetensors: {exc})") from None
    except OSError as exc:
        raise CheckpointError(f"{_FN}: cannot read {path}: {exc.strerror or exc}") from None
    out = {}
    for name, (code, shape) in found.items():
        if code not in DTYPES:
            raise CheckpointError(f"{_FN}: {path}: tensor {name!r} has dtype {code}, which w8a8 does not read "
                                  f"(supported: {sorted(DTYPES)})")
        out[name] = TensorInfo(path, name, DTYPES[code], shape)
    return out


class MappedFile:
    """A safetensors file opened once; ``tensor`` gives a copy-on-write view of its pages."""

    def __init__(self, path: str) -> None:
        from safetensors import safe_open

        self.file = safe_open(path, framework="pt")

    def tensor(self, info: TensorInfo) -> torch.Tensor:
        return self.file.get_tensor(info.name)
