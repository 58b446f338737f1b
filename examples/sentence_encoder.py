"""A sentence-transformers encoder (BERT + mean pooling): quantize -> save -> reload -> embed.

    python examples/sentence_encoder.py --model PATH [--out DIR] [--device cuda]

PATH is a local sentence-transformers folder (e.g. all-MiniLM-L6-v2 downloaded with
``huggingface-cli download sentence-transformers/all-MiniLM-L6-v2 --local-dir PATH``):
the transformer's config.json + safetensors, the tokenizer, ``modules.json`` and
``1_Pooling/config.json``. The script does the pooling itself (masked mean over the
tokens, as ``pooling_mode_mean_tokens``), so sentence-transformers is not needed:

1. embed the sentences with the float model;
2. ``w8a8.quantize_model`` (every Linear: BERT has no lm_head);
3. ``w8a8.save_quantized(model, out, source=PATH)``: the int8 folder keeps
   ``modules.json``, ``1_Pooling/`` and the tokenizer beside the compressed-tensors
   checkpoint, which ``w8a8.from_pretrained`` reads (this script) and transformers with
   compressed-tensors reads. In sentence-transformers itself, load it with
   ``model_kwargs={"quantization_config": CompressedTensorsConfig(dequantize=True)}`` and
   put the int8 layers back with ``w8a8.load_quantized(st[0].auto_model, out)``: a plain
   ``SentenceTransformer(out)`` fails at its first ``encode`` (compressed-tensors
   decompresses at the model's first call, and sentence-transformers calls ``forward``
   directly). docs/GUIDE.md ("transformers and sentence-transformers") has that path,
   quantizing through ``SentenceTransformer(PATH, model_kwargs=...)`` and ``st.save``;
4. ``w8a8.from_pretrained(out)``, embed again: the reloaded embeddings equal the
   quantized model's bit for bit, and the cosine similarity to the float
   embeddings is printed per sentence.

Without a GPU it runs on the exact CPU reference path. Try it without a model:
``python examples/make_tiny_models.py /tmp/tiny`` and ``--model /tmp/tiny/tiny-encoder``.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch

import w8a8

SENTENCES = ["the cat sat on the mat", "a big red dog ran to the house", "int8 weights are fast"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="local sentence-transformers folder (BERT-style encoder)")
    parser.add_argument("--out", default=None, help="where to write the int8 checkpoint (default: a temporary folder)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                        help="float dtype of the model (default: bfloat16 on cuda, float32 on cpu)")
    parser.add_argument("--sentences", nargs="+", default=SENTENCES, help="sentences to embed")
    return parser.parse_args(argv)


def pooling_mode(folder: str) -> str:
    """The folder's pooling (``1_Pooling/config.json``): only mean pooling is implemented here."""
    path = os.path.join(folder, "1_Pooling", "config.json")
    if not os.path.isfile(path):
        return "mean (no 1_Pooling/config.json)"
    with open(path) as f:
        cfg = json.load(f)
    modes = [k.removeprefix("pooling_mode_") for k, v in cfg.items() if k.startswith("pooling_mode_") and v]
    if modes != ["mean_tokens"]:
        raise SystemExit(f"{path}: pooling {modes}; this example implements mean_tokens only")
    return "mean"


def embed(model, tokenizer, sentences, device) -> torch.Tensor:
    """Masked mean of the last hidden states, L2-normalised, in float32."""
    batch = tokenizer(sentences, padding=True, return_tensors="pt").to(device)
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.float()
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


def main(argv=None) -> int:
    from transformers import AutoModel, AutoTokenizer

    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    print(f"pooling: {pooling_mode(args.model)}")

    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    model = AutoModel.from_pretrained(args.model, dtype=dtype, local_files_only=True).to(device).eval()
    float_emb = embed(model, tokenizer, args.sentences, device)

    report = w8a8.quantize_model(model, skip=[], progress=False)
    print(report.summary())
    emb = embed(model, tokenizer, args.sentences, device)

    with tempfile.TemporaryDirectory(prefix="w8a8-example-") as tmp:
        out = args.out or os.path.join(tmp, "int8-encoder")
        # scale_dtype=float32: the fp32 scales the layers hold, so the reload is bit-exact.
        w8a8.save_quantized(model, out, source=args.model, scale_dtype=torch.float32, progress=False)
        print(f"saved {out}: {sorted(os.listdir(out))}")
        reloaded = w8a8.from_pretrained(out, device=device, dtype=dtype, progress=False)
        reloaded_emb = embed(reloaded, tokenizer, args.sentences, device)

    equal = torch.equal(reloaded_emb, emb)
    print(f"reloaded embeddings == quantized embeddings: {equal}")
    cosine = (reloaded_emb * float_emb).sum(-1)
    for sentence, c in zip(args.sentences, cosine.tolist()):
        print(f"cosine(int8, float) {c:.6f}  {sentence!r}")
    print(f"min cosine(int8, float): {cosine.min().item():.6f}")
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
