"""How w8a8/triton/_launch.py describes a compiled Triton kernel's parameters to the C++ launcher
(``_parameter_layout``), on stand-ins of Triton's compiled-kernel metadata, so it runs on every
machine: which arguments are passed and how, the scratch pointers appended, and every launch it
must refuse (those then stay on Python's path). The launches themselves are tested on the GPU
(test_producers_from_cxx.py).
"""
from __future__ import annotations

from types import SimpleNamespace

from w8a8.triton._launch import _parameter_layout

NAMES = ["x_ptr", "q_ptr", "R", "K", "stride", "eps", "ROWS", "BLOCK_K"]


def compiled(signature: dict, constants=None, **meta):
    """A stand-in for Triton's CompiledKernel: its source's signature and constants, its metadata."""
    metadata = dict(num_warps=4, shared=1024, num_ctas=1, global_scratch_size=0, profile_scratch_size=0)
    metadata.update(meta)
    src = SimpleNamespace(signature=signature, constants=constants or {})
    return SimpleNamespace(src=src, metadata=SimpleNamespace(**metadata))


KERNEL = SimpleNamespace(arg_names=NAMES)
SIGNATURE = {"x_ptr": "*bf16", "q_ptr": "*i8", "R": "i32", "K": "i32", "stride": "i64", "eps": "fp32",
             "ROWS": "constexpr", "BLOCK_K": "constexpr"}


def test_pointers_ints_floats_and_scratch():
    assert _parameter_layout(KERNEL, compiled(SIGNATURE), 6) == ("PPiilf", 128, 1024, 2)


def test_specialized_arguments_are_not_parameters():
    # Triton makes an int equal to 1 a constant: marked in the signature (3.3+) or listed in constants.
    by_type = {**SIGNATURE, "R": "constexpr"}
    assert _parameter_layout(KERNEL, compiled(by_type), 6)[0] == "PP-ilf"
    by_constants = compiled(SIGNATURE, constants={(3,): 1})
    assert _parameter_layout(KERNEL, by_constants, 6)[0] == "PPi-lf"


def test_scratch_pointers_counted_where_the_metadata_has_them():
    older = compiled(SIGNATURE)
    del older.metadata.profile_scratch_size
    assert _parameter_layout(KERNEL, older, 6)[3] == 1


def test_refused_launches():
    assert _parameter_layout(KERNEL, compiled(SIGNATURE), 5) is None  # a parameter after the passed arguments
    assert _parameter_layout(KERNEL, compiled({**SIGNATURE, "eps": "fp16"}), 6) is None  # a type C++ does not pass
    assert _parameter_layout(KERNEL, compiled(SIGNATURE, global_scratch_size=64), 6) is None
    assert _parameter_layout(KERNEL, compiled(SIGNATURE, profile_scratch_size=8), 6) is None
    assert _parameter_layout(KERNEL, compiled(SIGNATURE, num_ctas=2), 6) is None
    assert _parameter_layout(KERNEL, compiled(SIGNATURE, launch_pdl=True), 6) is None
    assert _parameter_layout(KERNEL, compiled(SIGNATURE, launch_cooperative_grid=True), 6) is None
