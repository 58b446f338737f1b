"""quantize_folder: a float Hugging Face safetensors folder in, a compressed-tensors int8 folder out.

The work of ``python -m w8a8 quantize SRC OUT``.
"""
from __future__ import annotations

import os

import torch

from w8a8.config import W8A8Config
from w8a8.checkpoint.hf import first_line, model_class_for, read_transformers_config
from w8a8.checkpoint.load import local_folder
from w8a8.checkpoint.safetensors_io import CheckpointError
from w8a8.checkpoint.save import check_output_folder, save_quantized
from w8a8.quantize_model import QuantizationReport, quantize_model

_FN = "w8a8 quantize"


def quantize_folder(
    src: str,
    out: str,
    act_quant: str = "dynamic",
    skip=("lm_head",),
    calib_batches: int = 8,
    calib_seq_len: int = 128,
    progress: bool = True,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device | None = None,
    calib_texts: list[str] | None = None,
    smoothquant_alpha: float | None = None,
) -> QuantizationReport:
    """Load the float model in ``src`` (safetensors only), quantize it, write it to ``out``.

    Parameters
    ----------
    src : a local transformers model folder (config.json + *.safetensors). The model
        class comes from ``architectures`` in its config.json (causal LM as a fallback);
        weights the folder does not hold for that class are refused, never initialised.
    out : the int8 folder (config.json with quantization_config, safetensors, and every
        non-weight file of ``src``: tokenizer, chat template, sentence-transformers modules).
        Written atomically; must not be ``src``, hold it or lie inside it.
    act_quant : ``"dynamic"`` or ``"static"``; static scales are calibrated on
        ``calib_batches`` batches of ``calib_seq_len`` random token ids (a stand-in:
        calibrate on real text with ``w8a8.calibrate.calibrate`` for a production model).
    skip : layer names or globs kept in float.
    progress : tqdm bars (and transformers' own loading bar).
    dtype : float dtype to load the model in (``"auto"``: the config's).
    device : where the model is loaded, calibrated and quantized (None: the CPU); checked before loading.
    calib_texts : calibration samples (one string each), tokenized with ``src``'s tokenizer
        (truncated to ``calib_seq_len`` tokens), for static scales and SmoothQuant.
    smoothquant_alpha : run SmoothQuant (``w8a8.calibrate.smooth``) on ``calib_texts`` first.

    Returns
    -------
    The QuantizationReport (per-layer weight SQNR in dB).

    Raises
    ------
    ValueError (CheckpointError for the source folder) before anything is written:
    a missing SRC, OUT == SRC or inside it, a device that is not here, an already quantized or non-safetensors SRC, a model class
    whose weights SRC does not hold.
    """
    try:
        import transformers
    except ImportError as exc:
        raise ImportError("python -m w8a8 quantize needs Hugging Face transformers: pip install w8a8[hf]") from exc
    src = local_folder(src, _FN)
    out = os.fspath(out)
    check_output_folder(src, out, _FN)
    device = check_device(device)
    if os.path.lexists(out) and not os.path.isdir(out):
        raise ValueError(f"{_FN}: {out} exists and is not a folder")
    config, raw = read_transformers_config(src, transformers, _FN)
    cfg_path = os.path.join(src, "config.json")
    if raw.get("quantization_config") or raw.get("compression_config"):
        raise CheckpointError(f"{_FN}: {cfg_path} holds a quantization_config: {src} is already quantized")
    if not any(n.endswith(".safetensors") for n in os.listdir(src)):
        raise CheckpointError(f"{_FN}: {src} holds no .safetensors files (pickle files are never loaded)")
    if smoothquant_alpha is not None and calib_texts is None:
        raise ValueError(f"{_FN}: --smoothquant needs calibration text (--calib-data FILE)")
    if calib_texts is not None and act_quant != "static" and smoothquant_alpha is None:
        raise ValueError(f"{_FN}: --calib-data is used for --act static or --smoothquant; neither is set")
    if smoothquant_alpha is not None and not 0.0 <= smoothquant_alpha <= 1.0:
        raise ValueError(f"{_FN}: --smoothquant ALPHA must be in [0, 1], got {smoothquant_alpha}")
    tokenizer = _tokenizer(src, transformers) if calib_texts is not None else None
    cls, origin = model_class_for(config, transformers)
    if not progress:
        transformers.utils.logging.disable_progress_bar()
    model, info = cls.from_pretrained(
        src, dtype=dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype, "auto"),
        use_safetensors=True, local_files_only=True, output_loading_info=True,
    )
    model.eval()
    if device is not None:
        model.to(device)
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise CheckpointError(
            f"{_FN}: {src} does not hold {len(missing)} weights of {type(model).__name__} (from {origin}): "
            f"{missing[:5]}; they would be random"
        )
    batches = None
    if tokenizer is not None:
        batches = [
            {k: v.to(device) if device is not None else v for k, v in
             tokenizer(text, return_tensors="pt", truncation=True, max_length=calib_seq_len).items()
             if k in ("input_ids", "attention_mask")}
            for text in calib_texts
        ]
    elif act_quant == "static":
        g = torch.Generator().manual_seed(0)
        vocab = model.config.vocab_size
        batches = [torch.randint(0, vocab, (1, calib_seq_len), generator=g).to(device or "cpu") for _ in range(calib_batches)]
    qconfig = W8A8Config(act_quant=act_quant, skip=skip, calibration=batches, smoothquant_alpha=smoothquant_alpha)
    with torch.no_grad():
        report = quantize_model(model, qconfig, progress=progress)
    save_quantized(model, out, progress=progress, source=src)
    return report


def default_device() -> str:
    """``"cuda"`` where torch sees a GPU, else ``"cpu"``: the default of ``--device``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device) -> torch.device | None:
    """``device`` as a torch.device that exists here (None stays None); a one-line ValueError otherwise,
    raised before anything is loaded."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{_FN}: --device {device!r} is not a device ({first_line(exc)}); use cpu, cuda or cuda:N") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ValueError(f"{_FN}: --device {device!r}: only cpu and cuda devices are supported")
    if not torch.cuda.is_available():
        why = "torch is a CPU build" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ValueError(f"{_FN}: --device {device!r}: {why} (torch {torch.__version__}); use --device cpu")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"{_FN}: --device {device!r}: this machine has {torch.cuda.device_count()} CUDA devices")
    return dev


def _tokenizer(src: str, transformers):
    """The tokenizer of the folder ``src``; a one-line ValueError when it has none."""
    has = any(os.path.isfile(os.path.join(src, n)) for n in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                                                             "tokenizer.model", "vocab.json"))
    if not has:
        raise ValueError(f"{_FN}: {src} has no tokenizer (tokenizer.json / tokenizer_config.json): --calib-data needs one")
    try:
        return transformers.AutoTokenizer.from_pretrained(src, local_files_only=True)
    except (ValueError, OSError, KeyError, TypeError) as exc:
        raise ValueError(f"{_FN}: {src}: transformers cannot load its tokenizer ({first_line(exc)}): --calib-data needs one") from None
