"""Safetensors files read by hand: headers checked against the file, tensors memory-mapped.

Never unpickles. A file is ``u64 header_len | JSON header | data``; the header
maps each name to ``{dtype, shape, data_offsets: [begin, end]}`` relative to
the data. The header is checked as strictly as the ``safetensors`` library
does (an object of well-formed entries, a known dtype, byte length = numel *
itemsize, the entries tiling the data with no gap, overlap or trailing byte)
before any tensor is made, so a damaged file is a ``CheckpointError`` that
names the file and the tensor, never a raw ``KeyError`` or a silent alias.
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
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's limit
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


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _entry(path: str, name: str, entry) -> tuple[torch.dtype, tuple[int, ...], int, int]:
    """(dtype, shape, begin, end) of one header entry; CheckpointError naming the tensor otherwise."""
    where = f"{_FN}: {path}: tensor {name!r}"
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise CheckpointError(f"{where}: expected an entry with keys ['data_offsets', 'dtype', 'shape'], got {keys}")
    dtype = DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
    if dtype is None:
        raise CheckpointError(f"{where} has unsupported dtype {entry['dtype']!r} (supported: {sorted(DTYPES)})")
    shape, offsets = entry["shape"], entry["data_offsets"]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise CheckpointError(f"{where}: shape must be a list of non-negative integers, got {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) and o >= 0 for o in offsets)):
        raise CheckpointError(f"{where}: data_offsets must be two non-negative integers, got {offsets!r}")
    begin, end = offsets
    nbytes = math.prod(shape) * dtype.itemsize
    if end < begin or end - begin != nbytes:
        raise CheckpointError(
            f"{where} {entry['dtype']} {shape} needs {nbytes} bytes, its offsets [{begin}, {end}] span {end - begin}"
        )
    return dtype, tuple(shape), begin, end


def read_header(path: str) -> dict[str, TensorInfo]:
    """Parse and check the header of ``path``: name -> TensorInfo (absolute byte offsets).

    Raises CheckpointError for a short file, a header that is not a JSON object of
    well-formed entries, an unknown dtype, a tensor whose bytes do not match its
    shape, and offsets that overlap, leave gaps or do not end at the end of the file.
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{_FN}: {path} is truncated ({size} bytes, no header)")
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER or 8 + n > size:
                raise CheckpointError(
                    f"{_FN}: {path} is truncated or not a safetensors file (header length {n} bytes, file {size})"
                )
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointError(f"{_FN}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CheckpointError(f"{_FN}: {path} is not a safetensors file (its header is not UTF-8 text)") from None
    except json.JSONDecodeError as exc:  # msg and position only: never the file's bytes
        raise CheckpointError(f"{_FN}: {path} has a malformed header (JSON: {exc.msg} at byte {exc.pos})") from None
    except RecursionError:
        raise CheckpointError(f"{_FN}: {path} has a malformed header (JSON nested too deeply)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{_FN}: {path} has a malformed header: expected a JSON object, got {type(header).__name__}")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CheckpointError(f"{_FN}: {path}: __metadata__ must map strings to strings")
    data_start, data_size = 8 + n, size - 8 - n
    entries = sorted(
        ((name, *_entry(path, name, e)) for name, e in header.items() if name != "__metadata__"),
        key=lambda e: (e[3], e[4]),
    )
    out, expected_begin, previous = {}, 0, None
    for name, dtype, shape, begin, end in entries:
        if begin != expected_begin:
            what = f"overlaps tensor {previous!r}" if begin < expected_begin else "leaves a gap"
            raise CheckpointError(
                f"{_FN}: {path}: tensor {name!r} starts at data byte {begin}, expected {expected_begin} ({what})"
            )
        out[name] = TensorInfo(path, name, dtype, shape, data_start + begin, data_start + end)
        expected_begin, previous = end, name
    if expected_begin != data_size:
        if expected_begin > data_size:
            raise CheckpointError(
                f"{_FN}: {path} is truncated: tensor {previous!r} ends at data byte {expected_begin}, the file holds {data_size}"
            )
        raise CheckpointError(
            f"{_FN}: {path}: the tensors end at data byte {expected_begin}, the file holds {data_size} (trailing bytes)"
        )
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
