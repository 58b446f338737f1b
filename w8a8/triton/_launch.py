"""How the Triton kernels of w8a8 launch: on their tensors' device, one launch at a time.

* Triton launches on the *current* CUDA device, not on the device of the tensors it is
  given (``JITFunction.run`` asks the driver for the current device and its stream): with
  tensors on cuda:1 while cuda:0 is current, the kernel would run on cuda:0 with cuda:1's
  pointers. ``launching(t)`` makes t's device current for the launch, as the C++ ops do
  with a ``CUDAGuard``.
* A kernel's first launch compiles it, and Triton does not guard its kernel caches against
  two threads doing that at once (triton-lang/triton#5933). In Triton's interpreter (the
  CPU path of the tests) the program id and the patched ``triton.language`` are module
  globals, so two threads interpreting kernels at once corrupt each other (seen here:
  wrong outputs, and "Did you forget to add @triton.jit ?"). So every launch holds one
  process-wide lock. On a GPU a launch only enqueues work (microseconds of host time, and
  the GIL is held for most of it anyway), so the lock serializes nothing that ran in
  parallel before; only a first launch holds it for the length of a compilation.
"""
from __future__ import annotations

import threading

import torch

_LOCK = threading.Lock()


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
