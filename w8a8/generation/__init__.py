"""Generation: ``Generator`` (greedy decoding with the step in a CUDA graph, ``generator.py``),
what its steps swap into the model (attention, rotary embedding, cache write: ``steps.py``),
the Triton kernels those run (``kernels.py``), and its stop rules and streaming, checked on
the host (``stops.py``), and sampling (``sampling.py``)."""
from w8a8.generation.generator import Generator

__all__ = ["Generator"]
