"""Model-level fusion: in eager (``eager.py``: groups sharing one quantization, merged
siblings, norms and SiLU-and-mul quantizing their output) and under ``torch.compile``
(``inductor.py``: the same as an Inductor post-grad pass)."""
from w8a8.fusion.eager import FusionReport, fuse_model, unfuse_model

__all__ = ["FusionReport", "fuse_model", "unfuse_model"]
