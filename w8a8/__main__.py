"""Command line: ``python -m w8a8 info``, ``demo``, ``bench`` and ``quantize``."""
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
        report = quantize_folder(args.src, args.out, args.act, tuple(args.skip), args.calib_batches)
    except (ValueError, OSError, ImportError) as exc:
        message = " ".join(str(exc).split()).removeprefix("w8a8 quantize: ")
        print(f"python -m w8a8 quantize: error: {message}", file=sys.stderr)
        return 2
    for name, db in report.sqnr_db.items():
        print(f"  {name:50s} weight SQNR {db:6.1f} dB")
    print(report.summary())
    print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m w8a8", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, GPU, and which kernels run where (and why the others do not)")
    demo = sub.add_parser("demo", help="quantize a small transformer-style model, compare and time it")
    demo.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    demo.add_argument("--repeats", type=int, default=5, help="timed forwards per model (median)")
    bench = sub.add_parser("bench", help="benchmark against bf16 F.linear and torch._int_mm (see w8a8/bench)")
    from w8a8.bench import add_arguments

    add_arguments(bench)
    quant = sub.add_parser("quantize", help="a float safetensors model folder in, a compressed-tensors int8 folder out")
    quant.add_argument("src", help="float model folder (config.json + *.safetensors)")
    quant.add_argument("out", help="output folder")
    quant.add_argument("--act", choices=("dynamic", "static"), default="dynamic", help="activation quantization")
    quant.add_argument("--skip", nargs="*", default=["lm_head"], help="layer names or globs kept in float")
    quant.add_argument("--calib-batches", type=int, default=8, help="static: batches of random token ids")
    args = parser.parse_args(argv)
    if args.command == "bench":
        from w8a8.bench import run

        run(args)
    elif args.command == "info":
        info()
    elif args.command == "quantize":
        return quantize(args)
    elif args.command == "demo":
        from w8a8 import demo as demo_mod

        demo_mod.run(device=args.device, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
