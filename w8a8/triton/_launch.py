"""How the Triton kernels of w8a8 launch: on their tensors' device, fast after their first launch.

* Triton launches on the *current* CUDA device, not on the device of the tensors it is
  given (``JITFunction.run`` asks the driver for the current device and its stream): with
  tensors on cuda:1 while cuda:0 is current, the kernel would run on cuda:0 with cuda:1's
  pointers. ``launch(t, ...)`` runs the kernel on t's device and its current stream, as the
  C++ ops do with a ``CUDAGuard``.
* A kernel's first launch compiles it, and Triton does not guard its kernel caches against
  two threads doing that at once (triton-lang/triton#5933). In Triton's interpreter (the
  CPU path of the tests) the program id and the patched ``triton.language`` are module
  globals, so two threads interpreting kernels at once corrupt each other. So a launch
  through Triton's own path holds one process-wide lock.
* Host time: ``JITFunction.run`` binds and specializes every argument on every call (tens of
  microseconds of Python, most of a fused quantizer's host cost). Triton's compiled kernel
  is a function of the arguments' types, their 16-byte alignment and the values it
  specializes on (ints, constexprs, options). ``launch`` keys the compiled kernel on
  strictly more than that (every int's value, every tensor's dtype and 16-byte alignment,
  every constexpr and option, the device): a call whose key was seen launches the kernel
  Triton compiled for it directly (``CompiledKernel.run``, as ``JITFunction.run`` ends),
  skipping the binding; any other call takes Triton's own path, which also fills the cache.
  Launch hooks (profilers) and the interpreter always take Triton's path.
* The C++ ops repeat a launch without Python (``csrc/torch/triton_launch.h``): ``launch_for_op``
  hands the compiled kernel, its grid and its parameter layout to ``w8a8._C``'s registry, once per
  key, for the op whose C++ implementation launches the same kernel with the same arguments. The
  op's name, with the arguments' signature, must determine every constexpr and the grid.
"""
from __future__ import annotations

import threading

import torch

_LOCK = threading.Lock()
# (kernel, device index, key of the arguments) -> the compiled kernel Triton launched for them
_COMPILED: dict = {}
# key -> the compiled kernel handed to w8a8._C for an op (or None: one it cannot launch); kept so
# that the function C++ holds stays loaded.
_TOLD: dict = {}


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for a >= 0, b > 0, the grids' arithmetic on the host: ``triton.cdiv`` is a
    constexpr function on recent Triton, whose call costs microseconds of Python."""
    return -(-a // b)


class launching:
    """``with launching(x): kernel[grid](...)``: x's device current, the launch lock held."""

    __slots__ = ("_device",)

    def __init__(self, t: torch.Tensor) -> None:
        self._device = torch.cuda.device(t.device.index) if t.is_cuda else None

    def __enter__(self) -> None:
        _LOCK.acquire()
        if self._device is not None:
            try:
                self._device.__enter__()
            except BaseException:
                _LOCK.release()
                raise

    def __exit__(self, *exc) -> bool:
        try:
            if self._device is not None:
                self._device.__exit__(*exc)
        finally:
            _LOCK.release()
        return False


def launch(t: torch.Tensor, kernel, grid: tuple, *args, **kwargs) -> None:
    """``kernel[grid](*args, **kwargs)`` on ``t``'s device and current stream. ``args`` are the
    kernel's leading parameters, ``kwargs`` the rest of them (its constexprs) and its launch
    options (``num_warps``, ...)."""
    _launch(None, t, kernel, grid, args, kwargs)


def launch_for_op(op: str, t: torch.Tensor, kernel, grid: tuple, *args, **kwargs) -> None:
    """``launch``, as the C++ implementation of the op ``op`` launches it: the kernel it compiled
    is handed to that op, which launches it itself for arguments of the same signature (``args``
    as C++ passes them; ``op`` and their signature fix ``kwargs`` and ``grid``)."""
    _launch(op, t, kernel, grid, args, kwargs)


def forget_told() -> None:
    """Tests: hand every kernel to C++ again (after ``torch.ops.w8a8._forget_triton``)."""
    _TOLD.clear()


def _launch(op, t, kernel, grid, args, kwargs) -> None:
    fast = t.is_cuda and _fast_path_usable()
    compiled = None
    if fast:
        # Tensors by dtype and 16-byte alignment, floats by their type only, ints / bools / None by value.
        key = (kernel, t.device.index,
               tuple([(a.dtype, not a.data_ptr() & 15) if isinstance(a, torch.Tensor) else float if type(a) is float else a
                      for a in args]),
               tuple(kwargs.items()))
        compiled = _COMPILED.get(key)
        if compiled is not None:
            names = kernel.arg_names
            values = args + tuple(kwargs[name] for name in names[len(args):])
            stream = torch._C._cuda_getCurrentRawStream(t.device.index)
            compiled.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                         compiled.function, compiled.packed_metadata, None, None, None, *values)
    if compiled is None:
        with launching(t):
            compiled = kernel[grid](*args, **kwargs)
        if not (fast and all(name in kwargs for name in kernel.arg_names[len(args):])):
            return
        _COMPILED[key] = compiled
    if op is not None and key not in _TOLD:
        _tell(op, key, t, kernel, compiled, grid, args)


def _tell(op: str, key, t: torch.Tensor, kernel, compiled, grid: tuple, args: tuple) -> None:
    """Hands ``compiled`` (launched for ``op`` with ``args`` on ``grid``) to w8a8._C's registry,
    where it is built and the kernel is one it can launch."""
    from w8a8 import dispatch

    layout = _parameter_layout(kernel, compiled, len(args))
    _TOLD[key] = compiled if layout is not None else None
    if layout is None or not dispatch.load("_C")[0]:
        return
    params, threads, shared, scratch = layout
    tensors, ints, floats, kinds = [], [], [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            tensors.append(a)
            kinds.append("t")
        elif type(a) is float:
            floats.append(a)
            kinds.append("f")
        else:
            ints.append(int(a))
            kinds.append("i")
    grid3 = [int(grid[0]), int(grid[1]) if len(grid) > 1 else 1, int(grid[2]) if len(grid) > 2 else 1]
    torch.ops.w8a8._remember_triton(op, tensors, ints, floats, "".join(kinds), params, int(compiled.function), grid3,
                                    threads, shared, scratch)


# Triton's signature types of the parameters C++ passes: pointers, i32, i64, fp32.
_PARAMETER = {"i32": "i", "i64": "l", "fp32": "f"}


def _parameter_layout(kernel, compiled, n_args: int):
    """How C++ passes a compiled kernel's ``n_args`` leading arguments (per argument 'P' pointer,
    'i' / 'l' / 'f' i32 / i64 / fp32, '-' made a constant by Triton), the block's threads, the
    dynamic shared memory and the count of trailing scratch pointers (passed null); None where
    the launch needs more than that (a parameter after them, a type above, scratch memory,
    clusters, cooperative or programmatic launch)."""
    src, meta = compiled.src, compiled.metadata
    names = kernel.arg_names

    def index(k):
        return names.index(k) if isinstance(k, str) else (k[0] if isinstance(k, tuple) else k)

    signature = {index(k): v for k, v in src.signature.items()}
    constants = {index(k) for k in getattr(src, "constants", {})}
    params = []
    for i in range(len(names)):
        ty = signature.get(i, "constexpr")
        constant = ty == "constexpr" or i in constants
        if i >= n_args:
            if not constant:
                return None
        elif constant:
            params.append("-")
        elif ty.startswith("*"):
            params.append("P")
        elif ty in _PARAMETER:
            params.append(_PARAMETER[ty])
        else:
            return None
    scratch = 0
    for size in ("global_scratch_size", "profile_scratch_size"):
        if hasattr(meta, size):
            if getattr(meta, size):
                return None
            scratch += 1
    if (getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "launch_cooperative_grid", False)
            or getattr(meta, "launch_pdl", False)):
        return None
    return "".join(params), 32 * meta.num_warps, meta.shared, scratch


def _fast_path_usable() -> bool:
    """No launch hooks (a profiler's): they need Triton's own path, which computes their metadata."""
    runtime = _runtime_knobs()
    return runtime is not None and _no_hook(runtime.launch_enter_hook) and _no_hook(runtime.launch_exit_hook)


def _no_hook(hook) -> bool:
    """None, or an empty chain of hooks (Triton 3.5+ keeps a ``HookChain`` whose ``calls`` list the hooks)."""
    return hook is None or getattr(hook, "calls", None) == []


_KNOBS: list = []


def _runtime_knobs():
    """``triton.knobs.runtime`` (Triton >= 3.4), or None: then every launch takes Triton's path."""
    if not _KNOBS:
        try:
            from triton import knobs
        except ImportError:
            _KNOBS.append(None)
        else:
            _KNOBS.append(knobs.runtime)
    return _KNOBS[0]
