"""quantize_folder: a float Hugging Face safetensors folder in, a compressed-tensors int8 folder out.

The work of ``python -m w8a8 quantize SRC OUT``.
"""
from __future__ import annotations

import os
import shutil

import torch

from w8a8.calibrate import calibrate
from w8a8.checkpoint.save import save_quantized
from w8a8.quantize_model import QuantizationReport, quantize_model

# Files copied from SRC as they are (the tokenizer and generation settings).
_COPIED = (
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
)


def quantize_folder(
    src: str,
    out: str,
    act_quant: str = "dynamic",
    skip=("lm_head",),
    calib_batches: int = 8,
    calib_seq_len: int = 128,
    progress: bool = True,
) -> QuantizationReport:
    """Load the float model in ``src`` (safetensors only), quantize it, write it to ``out``.

    Parameters
    ----------
    src : a transformers causal-LM folder (config.json + *.safetensors).
    out : the int8 folder (config.json with quantization_config, safetensors, tokenizer files).
    act_quant : ``"dynamic"`` or ``"static"``; static scales are calibrated on
        ``calib_batches`` batches of ``calib_seq_len`` random token ids (a stand-in:
        calibrate on real text with ``w8a8.calibrate`` for a production model).
    skip : layer names or globs kept in float.
    progress : tqdm bars.

    Returns
    -------
    The QuantizationReport (per-layer weight SQNR in dB).
    """
    try:
        import transformers
    except ImportError as exc:
        raise ImportError("python -m w8a8 quantize needs Hugging Face transformers: pip install w8a8[hf]") from exc
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype="auto", use_safetensors=True).eval()
    scales = None
    if act_quant == "static":
        g = torch.Generator().manual_seed(0)
        vocab = model.config.vocab_size
        batches = [torch.randint(0, vocab, (1, calib_seq_len), generator=g) for _ in range(calib_batches)]
        scales = calibrate(model, batches, skip=skip, progress=progress)
    report = quantize_model(model, skip=skip, act_quant=act_quant, input_scales=scales, progress=progress)
    os.makedirs(out, exist_ok=True)
    model.config.save_pretrained(out)
    save_quantized(model, out, progress=progress)
    for name in _COPIED:
        if os.path.isfile(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
    return report
