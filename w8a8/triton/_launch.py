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
"""
from __future__ import annotations

import threading

import torch

_LOCK = threading.Lock()
# (kernel, device index, key of the arguments) -> the compiled kernel Triton launched for them
_COMPILED: dict = {}


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
    fast = t.is_cuda and _fast_path_usable()
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
            return
    with launching(t):
        compiled = kernel[grid](*args, **kwargs)
    if fast and all(name in kwargs for name in kernel.arg_names[len(args):]):
        _COMPILED[key] = compiled


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
