"""Safetensors files read by hand: headers checked against the file, tensors memory-mapped.

Never unpickles. A file is ``u64 header_len | JSON header | data``; the header
maps each name to ``{dtype, shape, data_offsets: [begin, end]}`` relative to
the data. Every entry is checked (dtype known, byte length = numel * itemsize,
inside the file) before any tensor is made, so a truncated file is an error
that names the file and the tensor.
"""
from __future__ import annotations

import json
import math
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
_MAX_HEADER = 100 * 1024 * 1024


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: missing, malformed, inconsistent or unsupported."""


class TensorInfo:
    """One tensor of a safetensors file, not yet read: ``dtype``, ``shape``, and where it lies."""

    __slots__ = ("path", "name", "dtype", "shape", "begin", "end")

    def __init__(self, path, name, dtype, shape, begin, end):
        self.path, self.name, self.dtype, self.shape, self.begin, self.end = path, name, dtype, shape, begin, end


def read_header(path: str) -> dict[str, TensorInfo]:
    """Parse and check the header of ``path``: name -> TensorInfo (absolute byte offsets).

    Raises CheckpointError for a short file, a bad header, an unknown dtype, or a
    tensor whose bytes do not match its shape or lie past the end of the file.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"w8a8.load_quantized: {path} is truncated ({size} bytes, no header)")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER or 8 + n > size:
            raise CheckpointError(f"w8a8.load_quantized: {path} is truncated or corrupt (header of {n} bytes, file {size})")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"w8a8.load_quantized: {path} has a malformed header ({exc})") from None
    data_start = 8 + n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise CheckpointError(f"w8a8.load_quantized: {path}: tensor {name!r} has unsupported dtype {entry.get('dtype')!r}")
        shape = tuple(int(d) for d in entry["shape"])
        begin, end = (int(o) for o in entry["data_offsets"])
        nbytes = math.prod(shape) * dtype.itemsize
        if end - begin != nbytes or begin < 0:
            raise CheckpointError(
                f"w8a8.load_quantized: {path}: tensor {name!r} {entry['dtype']} {list(shape)} needs {nbytes} bytes, "
                f"its offsets span {end - begin}"
            )
        if data_start + end > size:
            raise CheckpointError(
                f"w8a8.load_quantized: {path} is truncated: tensor {name!r} ends at byte {data_start + end}, "
                f"the file has {size}"
            )
        out[name] = TensorInfo(path, name, dtype, shape, data_start + begin, data_start + end)
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
