"""Generation: ``Generator`` (greedy decoding with the step in a CUDA graph, ``generator.py``),
the Triton kernels its steps run (rotary embedding, cache write, decode attention,
``kernels.py``), and its stop rules and streaming, checked on the host (``stops.py``)."""
from w8a8.generation.generator import Generator

__all__ = ["Generator"]
