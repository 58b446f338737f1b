"""Checkpoints in the compressed-tensors ``int-quantized`` layout (the one vLLM loads).

``format`` parses and writes ``quantization_config``; ``safetensors_io`` reads
files without pickle; ``load`` and ``save`` move W8A8Linear models in and out;
``hf`` builds Hugging Face transformers models.
"""
from w8a8.checkpoint.hf import from_pretrained
from w8a8.checkpoint.load import load_quantized
from w8a8.checkpoint.safetensors_io import CheckpointError
from w8a8.checkpoint.save import save_quantized

__all__ = ["CheckpointError", "from_pretrained", "load_quantized", "save_quantized"]
