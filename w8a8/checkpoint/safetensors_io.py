"""Safetensors files: checked by the ``safetensors`` library, tensors memory-mapped.

Never unpickles. ``read_header`` opens each file with ``safetensors.safe_open``, which checks
it as the library checks every file (a JSON header of well-formed entries, known dtypes,
byte lengths matching the shapes, the entries tiling the data with no gap, overlap or
trailing byte); its refusal becomes a ``CheckpointError`` naming the file. The tensors are
then views of the file's pages (``MappedFile``), placed by the offsets of the header the
library has just accepted: ``safe_open(...).get_tensor`` copies each tensor into memory,
where a view costs nothing until read.
"""
from __future__ import annotations

import json
import os
import struct

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
    """One tensor of a safetensors file, not yet read: ``dtype``, ``shape``, and where it lies."""

    __slots__ = ("path", "name", "dtype", "shape", "begin", "end")

    def __init__(self, path, name, dtype, shape, begin, end):
        self.path, self.name, self.dtype, self.shape, self.begin, self.end = path, name, dtype, shape, begin, end


def read_header(path: str) -> dict[str, TensorInfo]:
    """The tensors of the safetensors file ``path``: name -> TensorInfo (absolute byte offsets).

    Raises CheckpointError naming the file for anything the ``safetensors`` library refuses
    (with its reason), and naming the tensor for a dtype torch has no type for.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            dtypes = {name: f.get_slice(name).get_dtype() for name in f.keys()}
    except SafetensorError as exc:
        raise CheckpointError(f"{_FN}: {path} is not a valid safetensors file (safetensors: {exc})") from None
    except OSError as exc:
        raise CheckpointError(f"{_FN}: cannot read {path}: {exc.strerror or exc}") from None
    with open(path, "rb") as f:  # the header safe_open accepted: only the offsets are read from it
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    out = {}
    for name, code in dtypes.items():
        if code not in DTYPES:
            raise CheckpointError(f"{_FN}: {path}: tensor {name!r} has dtype {code}, which w8a8 does not read "
                                  f"(supported: {sorted(DTYPES)})")
        begin, end = header[name]["data_offsets"]
        out[name] = TensorInfo(path, name, DTYPES[code], tuple(header[name]["shape"]), 8 + n + begin, 8 + n + end)
    return out


class MappedFile:
    """A safetensors file memory-mapped copy-on-write: tensors view the file's pages."""

    def __init__(self, path: str) -> None:
        size = os.path.getsize(path)
        storage = torch.UntypedStorage.from_file(path, shared=False, nbytes=size)
        self.bytes = torch.empty(0, dtype=torch.uint8).set_(storage)

    def tensor(self, info: TensorInfo) -> torch.Tensor:
        raw = self.bytes[info.begin : info.end]
        if info.begin % info.dtype.itemsize:  # misaligned for a view: copy
            raw = raw.clone()
        return raw.view(info.dtype).reshape(info.shape)
