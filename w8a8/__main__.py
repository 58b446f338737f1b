"""Command line: python -m w8a8 info | demo | quantize. (Benchmarks: python -m benchmarks, from a checkout.)"""
from __future__ import annotations

import argparse
import platform
import sys

import torch


def info() -> None:
    from w8a8 import __version__, dispatch

    print(f"w8a8 {__version__}, Python {platform.python_version()}, torch {torch.__version__}")
    try:
        import triton

        print(f"triton {triton.__version__}")
    except ImportError:
        print("triton: not installed")
    print(f"CUDA (torch build): {torch.version.cuda or 'none (CPU build)'}")
    for module, family in (("_C", "sm90"), ("_C_sm80", "sm80")):
        print(f"extension w8a8.{module}: {dispatch.load(module)[1]}; {family} kernels for {list(dispatch.archs(family))}")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            print(f"GPU {i}: {torch.cuda.get_device_name(i)}, sm_{major}{minor}")
    else:
        print("GPU: none visible")
    print(f"TRITON_INTERPRET: {'on' if dispatch.triton_interpret() else 'off'}")
    for device, status in dispatch.report().items():
        print(f"kernels on {device}:")
        for key, state in status.items():
            print(f"  {key:30s} {state}")
        chosen = {op: dispatch.choose(op, torch.device(device)) for op in dispatch.BACKENDS}
        print("  default: " + ", ".join(f"{op} -> {b}" for op, b in chosen.items()))


def quantize(args) -> int:
    """``python -m w8a8 quantize``: a user error (bad folder, bad option, missing package) is one line on stderr, exit 2."""
    from w8a8.checkpoint.convert import quantize_folder

    try:
        calib_texts = _read_lines(args.calib_data) if args.calib_data is not None else None
        report = quantize_folder(
            args.src, args.out, args.act, tuple(args.skip), args.calib_batches, progress=not args.quiet,
            dtype=args.dtype, device=args.device, calib_texts=calib_texts, smoothquant_alpha=args.smoothquant,
            calib_seq_len=args.calib_seq_len,
        )
    except (ValueError, OSError, ImportError) as exc:
        message = " ".join(str(exc).split()).removeprefix("w8a8 quantize: ")
        print(f"python -m w8a8 quantize: error: {message}", file=sys.stderr)
        return 2
    if not args.quiet:
        for name, db in report.sqnr_db.items():
            print(f"  {name:50s} weight SQNR {db:6.1f} dB")
        print(report.summary())
        print(f"wrote {args.out}")
    return 0


def _read_lines(path: str) -> list[str]:
    """The non-empty lines of a UTF-8 text file (``--calib-data``)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except UnicodeDecodeError:
        raise ValueError(f"--calib-data {path} is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"--calib-data {path}: {exc.strerror or exc}") from None
    lines = [line for line in lines if line]
    if not lines:
        raise ValueError(f"--calib-data {path} holds no non-empty line")
    return lines


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every default; docstring markup (RST double backticks) is dropped from help text."""

    def _format_text(self, text):
        return super()._format_text(text.replace("``", ""))

    def _expand_help(self, action):
        return super()._expand_help(action).replace("``", "")


def main(argv: list[str] | None = None) -> int:
    from w8a8 import __version__
    from w8a8.checkpoint.convert import default_device

    fmt = _HelpFormatter
    parser = argparse.ArgumentParser(prog="python -m w8a8", description=__doc__, formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"w8a8 {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "info", formatter_class=fmt, help="versions, GPU, and which kernels run where (and why the others do not)",
        description="Print the versions of w8a8, Python, torch and triton, the CUDA build, the GPUs, whether the "
        "compiled extensions loaded, and for each device which kernels are available (or why not) and the default.",
    )
    demo = sub.add_parser(
        "demo", formatter_class=fmt, help="quantize a random transformers Llama, compare and time it",
        description="Build a random transformers Llama, quantize it with quantize_model and compare it with the float "
        "model: on a GPU, greedy generation at Llama-3-8B widths (tokens/s of each); on the CPU, a small one's logits "
        "error and the median time of both forwards.",
    )
    demo.add_argument("--device", default=None, help="cpu or cuda (None: cuda if available)")
    demo.add_argument("--repeats", type=int, default=5, help="timed forwards per model (median)")
    quant = sub.add_parser(
        "quantize", formatter_class=fmt, help="a float safetensors model folder in, a compressed-tensors int8 folder out",
        description="Load a float transformers model folder (safetensors only), quantize its Linear layers to int8 "
        "(per-channel weights; dynamic per-token or calibrated static activations, optionally SmoothQuant first) "
        "and write a compressed-tensors folder that w8a8.from_pretrained and vLLM load. "
        "User errors are one line on stderr, exit status 2.",
    )
    quant.add_argument("src", help="float model folder (config.json + *.safetensors)")
    quant.add_argument("out", help="output folder (written atomically; neither SRC nor inside it)")
    quant.add_argument("--act", choices=("dynamic", "static"), default="dynamic",
                       help="activation quantization: per token at run time, or one calibrated scale per layer")
    quant.add_argument("--skip", nargs="*", default=["lm_head"],
                       help="Linears kept in float: names, globs, re:<regex> or class names (compressed-tensors' "
                       "ignore syntax)")
    quant.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                       help="float dtype to load the model in (auto: the config's dtype)")
    quant.add_argument("--device", default=default_device(),
                       help="where to load, calibrate and quantize (cpu, cuda, cuda:1, ...); the default is cuda "
                       "where torch sees a GPU, else cpu")
    quant.add_argument("--calib-data", metavar="FILE", default=None,
                       help="text file, one calibration sample per line, tokenized with SRC's tokenizer "
                       "(for --act static scales and --smoothquant; None: --calib-batches of random token ids)")
    quant.add_argument("--calib-batches", type=int, default=8,
                       help="without --calib-data: batches of random token ids for --act static (a stand-in)")
    quant.add_argument("--calib-seq-len", type=int, default=128, help="tokens per calibration sample (truncated)")
    quant.add_argument("--smoothquant", metavar="ALPHA", type=float, default=None,
                       help="SmoothQuant migration strength in [0, 1] (0.5 is the paper's), on --calib-data, before "
                       "quantizing (None: off)")
    quant.add_argument("--quiet", action="store_true", help="print nothing but errors (no progress bars, no report)")
    args = parser.parse_args(argv)
    if args.command == "info":
        info()
    elif args.command == "quantize":
        return quantize(args)
    elif args.command == "demo":
        from w8a8 import demo as demo_mod

        demo_mod.run(device=args.device, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
