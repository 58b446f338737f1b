"""A transformers causal LM, end to end: quantize -> save -> reload -> generate.

    python examples/hf_llama_quantize_save_reload_generate.py --model PATH [--out DIR] [--device cuda]

1. load the float model and its tokenizer from the local folder PATH (no download);
2. ``w8a8.quantize_model``: every nn.Linear but ``lm_head`` becomes a W8A8Linear
   (int8 weights per output channel, int8 activations per token);
3. ``w8a8.save_quantized(model, out, source=PATH)``: a compressed-tensors int8 folder
   that also holds the tokenizer and generation config of PATH;
4. ``w8a8.from_pretrained(out)``: the model rebuilt from that folder alone;
5. check that the reloaded model's logits equal the quantized model's, bit for bit,
   then generate greedily with both and check the tokens agree.

On a machine without a GPU everything runs on the exact CPU reference path. Try it
without a model: ``python examples/make_tiny_models.py /tmp/tiny`` and
``--model /tmp/tiny/tiny-llama``.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import torch

import w8a8


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="local folder of a float transformers causal LM")
    parser.add_argument("--out", default=None, help="where to write the int8 checkpoint (default: a temporary folder)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                        help="float dtype of the model (default: bfloat16 on cuda, float32 on cpu)")
    parser.add_argument("--prompt", default="the cat sat on the", help="prompt to continue (default: %(default)r)")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="tokens to generate (default: %(default)s)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)

    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, local_files_only=True).to(device).eval()
    inputs = tokenizer(args.prompt, return_tensors="pt").to(device)
    with torch.no_grad():
        float_logits = model(**inputs).logits.float()

    report = w8a8.quantize_model(model, skip=["lm_head"], progress=False)
    print(report.summary())
    with torch.no_grad():
        logits = model(**inputs).logits
    agree = (logits.float().argmax(-1) == float_logits.argmax(-1)).float().mean().item()
    rel = ((logits.float() - float_logits).norm() / float_logits.norm()).item()
    print(f"int8 vs float: next-token argmax agreement {agree:.0%}, logits relative L2 error {rel:.4f}")

    with tempfile.TemporaryDirectory(prefix="w8a8-example-") as tmp:
        out = args.out or os.path.join(tmp, "int8-model")
        # scale_dtype=float32: the scales on disk are the fp32 ones the layers hold, so the reload is
        # bit-exact (None writes them in the model's dtype, as llm-compressor does; bf16 rounds them).
        w8a8.save_quantized(model, out, source=args.model, scale_dtype=torch.float32, progress=False)
        print(f"saved {out}: {sorted(os.listdir(out))}")
        reloaded = w8a8.from_pretrained(out, device=device, dtype=dtype, progress=False)
    print(f"reloaded as {type(reloaded).__name__}")
    with torch.no_grad():
        reloaded_logits = reloaded(**inputs).logits
    equal = torch.equal(reloaded_logits, logits)
    print(f"reloaded logits == quantized logits: {equal}")

    gen = dict(max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        tokens = reloaded.generate(**inputs, **gen)
        tokens_quantized = model.generate(**inputs, **gen)
    new = tokens[0, inputs["input_ids"].shape[1]:]
    print(f"generated token ids: {new.tolist()}")
    print(f"generated text: {tokenizer.decode(new, skip_special_tokens=True)!r}")
    same = torch.equal(tokens, tokens_quantized)
    print(f"reloaded generate == quantized generate: {same}")
    return 0 if equal and same else 1


if __name__ == "__main__":
    raise SystemExit(main())
