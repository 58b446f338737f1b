"""Generation: ``Generator`` (greedy decoding with the step in a CUDA graph, ``generator.py``);
what it requires of a model (``models.py``); what its steps swap into the model (attention,
rotary embedding, cache write: ``steps.py``) and the Triton kernels those run (``kernels.py``);
its stop rules and streaming, checked on the host (``stops.py``); sampling and the repetition penalty (``sampling.py``);
left-padded batches (``left_padding.py``); transformers' GenerationConfig (``config.py``)."""
from w8a8.generation.generator import Generator

__all__ = ["Generator"]
