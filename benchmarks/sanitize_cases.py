"""The cases compute-sanitizer runs: every kernel of w8a8 on a small,
representative set of inputs, each result checked against the exact reference.

    python benchmarks/sanitize_cases.py [--set full|small] [--only REGEX] [--list] [--dry-run]

benchmarks/sanitize.sh runs this under each sanitizer tool. Run alone, it is the warm-up
that fills Triton's cache (so no compilation runs under the sanitizer) and a correctness
check: each case compares its output with w8a8.reference computed on the CPU, prints
``ok`` or ``FAIL``, and the script exits 3 if any case failed (1 is the sanitizer's).

Sets (every "small" case is also in "full"):
  full  - for memcheck and synccheck: every sm90 and sm80 config entry, named through `config`,
          in bf16 and fp16 with the epilogue variants; the M ladder (swap-AB 128x16 and
          128x64 tiles, pingpong, cooperative); split-K (split_k 2, 3, 4 and the
          heuristic's own split) and stream-K; odd M, N, K within the 16-byte rules;
          row-strided operands (and one row of odd pitch); K = 0 and M = 0; the sm80
          CUTLASS kernels where built; the CUDA quantizers on each launch path (warp per
          row, block per row, two-pass; vector and scalar loads; special rows);
          W8A8Linear's single op; every Triton GEMM config row and quantizer path.
  small - for racecheck and initcheck (10-100x slower than memcheck): one small shape per
          CUTLASS config id and per decomposition, two per quantizer, two Triton GEMM configs.
--dry-run: import w8a8 and list the cases, without a GPU (the test suite runs it so).
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
import zlib
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import w8a8  # noqa: E402
from w8a8 import dispatch, reference  # noqa: E402
from w8a8.padding import padded_rows  # noqa: E402

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
DEV = "cuda"


@dataclasses.dataclass(frozen=True)
class SanitizeCase:
    name: str
    run: Callable[[], str | None]  # None when the output matches the reference, else what differs
    small: bool = False
    # The output is written by TMA stores (cp.async.bulk.tensor: the sm90 CUTLASS epilogue), which
    # initcheck does not record as writes: see sanitize.sh for how those cases are checked.
    tma_store: bool = False
    # The kernels read operand rows that the case, by the padding contract (w8a8.padding), never
    # writes: the single op's pad rows of codes and scales, read by the token tile that covers
    # them, their outputs dropped. initcheck reports every such read, so its runs leave these
    # cases out (--written-inputs); the other tools and the reference comparison run them.
    reads_pad_rows: bool = False


# --- checks ---------------------------------------------------------------------------------------


def _ordered(t: torch.Tensor) -> torch.Tensor:
    int_dtype = {2: torch.int16, 4: torch.int32}[t.element_size()]
    bits = t.contiguous().view(int_dtype).long()
    sign = 1 << (8 * t.element_size() - 1)
    return torch.where(bits < 0, -(bits + sign), bits)


def _ulp_diff(out: torch.Tensor, ref: torch.Tensor, max_ulp: int = 1) -> str | None:
    out = out.cpu()
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return f"shape/dtype {tuple(out.shape)} {out.dtype}, expected {tuple(ref.shape)} {ref.dtype}"
    if not torch.equal(out.isnan(), ref.isnan()):
        return "NaN in different places"
    if out.numel() == 0:
        return None
    worst = int((_ordered(out.nan_to_num(0)) - _ordered(ref.nan_to_num(0))).abs().max())
    return None if worst <= max_ulp else f"{worst} ulp from the reference"


def _codes_diff(q, s, rq, rs) -> str | None:
    q = q.cpu()
    if not torch.equal(q, rq):
        return f"{int((q != rq).sum())} codes differ"
    if s is not None:
        s = s.cpu()
    if s is not None and not (torch.equal(s.isnan(), rs.isnan()) and torch.equal(s.nan_to_num(0), rs.nan_to_num(0))):
        return "scales differ"
    return None


# --- inputs (built on the CPU, then copied: few torch kernels run under the sanitizer) -----------


def _gen(*key) -> torch.Generator:
    """A generator seeded by the case's parameters: the same data in every run (and process)."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def _int8(g, rows, cols, pad=0, offset=0):
    """CPU and device int8 [rows, cols]: a view at column ``offset`` of rows ``cols + pad`` long."""
    wide = torch.randint(-128, 128, (rows, cols + pad), generator=g, dtype=torch.int8)
    dev = wide.to(DEV)
    return wide[:, offset : offset + cols], dev[:, offset : offset + cols]


def _pair(t: torch.Tensor):
    return t, t.to(DEV)


def _mm_inputs(m, n, k, per_token=True, per_channel=True, bias="fp32", out_dtype=BF16, a_pad=0, b_pad=0):
    g = _gen("mm", m, n, k, a_pad, b_pad, bias, per_token, per_channel)
    a, a_d = _int8(g, m, k, a_pad)
    b, b_d = _int8(g, n, k, b_pad)
    sa, sa_d = _pair(torch.rand((m, 1) if per_token else (1,), generator=g) * 0.02 + 1e-3)
    sb, sb_d = _pair(torch.rand((n,) if per_channel else (1,), generator=g) * 0.02 + 1e-3)
    bias_t = None if bias is None else torch.randn(n, generator=g).to(FP32 if bias == "fp32" else out_dtype)
    bias_d = None if bias_t is None else bias_t.to(DEV)
    return (a, b, sa, sb, bias_t), (a_d, b_d, sa_d, sb_d, bias_d)


def _mm_case(name, m, n, k, op="sm90", config="", split_k=None, scheduler="auto", out_dtype=BF16,
             small=False, **inputs) -> SanitizeCase:
    def run():
        cpu, dev = _mm_inputs(m, n, k, out_dtype=out_dtype, **inputs)
        if op == "sm90":
            out = torch.ops.w8a8.scaled_mm_sm90.default(*dev, out_dtype, config, split_k, scheduler)
        elif op == "sm80":
            out = torch.ops.w8a8.scaled_mm_sm80.default(*dev, out_dtype, config)
        elif op == "triton":
            from w8a8 import triton as tk

            out = torch.empty((m, n), dtype=out_dtype, device=DEV)
            tk.scaled_mm_out(*dev, out)  # the config row select_config picks for this M
        else:
            raise ValueError(op)
        torch.cuda.synchronize()
        return _ulp_diff(out, reference.scaled_mm(*cpu, out_dtype))

    return SanitizeCase(name, run, small, tma_store=op == "sm90" and _stores_by_tma(m, n, k, config, split_k, scheduler))


def _stores_by_tma(m, n, k, config, split_k, scheduler) -> bool:
    """Whether the sm90 op's pick for this call writes its output by TMA (every config but the
    decode kernels: the GEMV and the skinny GEMM)."""
    if not dispatch.config_names("sm90") or not torch.cuda.is_available():
        return True  # a dry run: nothing is launched
    chosen = config or torch.ops.w8a8.scaled_mm_sm90_plan(m, n, k, "", split_k, scheduler)[0]
    return not chosen.startswith(("gemv", "skinny"))


def _rows(g, r, k, dtype, pad=0, offset=0, special=True):
    """CPU and device [r, k] activations over ~8 decades (rows 0..2: zero, NaN, +Inf)."""
    x = torch.randn(r, k + pad, generator=g) * torch.exp2(torch.empty(r, 1).uniform_(-14, 12, generator=g))
    if special and r >= 3:
        x[0] = 0
        x[1, (k // 2 + offset) % (k + pad)] = float("nan")
        x[2, offset] = float("inf")
    x = x.to(dtype)
    dev = x.to(DEV)
    return x[:, offset : offset + k], dev[:, offset : offset + k]


def _quant_case(name, r, k, dtype, backend, static=False, zp=None, pad=0, offset=0, small=False) -> SanitizeCase:
    def run():
        g = _gen("quant", r, k, str(dtype), backend, static, zp, pad, offset)
        x, x_d = _rows(g, r, k, dtype, pad, offset)
        if not static:
            q, s = w8a8.ops.quantize_per_token(x_d, backend=backend)
            torch.cuda.synchronize()
            return _codes_diff(q, s, *reference.quantize_per_token(x))
        scale = torch.tensor([0.02])
        zpt = None if zp is None else torch.tensor([3], dtype=zp)
        q = w8a8.ops.quantize_static(x_d, scale.to(DEV), None if zpt is None else zpt.to(DEV), backend=backend)
        torch.cuda.synchronize()
        return _codes_diff(q, None, reference.quantize_static(x, scale, zpt), None)

    return SanitizeCase(name, run, small)


def _linear_case(name, m, k, n, act_quant, small=False) -> SanitizeCase:
    """W8A8Linear's forward on the single C++ op w8a8::linear_sm90 (CUDA quantizer, then the GEMM
    as its programmatic dependent; w8a8.dispatch says where it runs)."""

    def run():
        g = _gen("linear", m, k, n, act_quant)
        lin = torch.nn.Linear(k, n, dtype=BF16)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(n, k, generator=g) * k**-0.5)
        kw = {"input_scale": 4.0 / 127} if act_quant == "static" else {}
        layer_cpu = w8a8.W8A8Linear.from_linear(lin, act_quant=act_quant, **kw)
        layer = w8a8.W8A8Linear.from_linear(lin.to(DEV), act_quant=act_quant, **kw)
        x = torch.randn(m, k, generator=g).to(BF16)
        out = layer(x.to(DEV))
        torch.cuda.synchronize()
        return _ulp_diff(out, layer_cpu(x))  # the CPU layer runs the reference

    # The GEMM runs on the codes' padded rows (w8a8.padding).
    return SanitizeCase(name, run, small, tma_store=_stores_by_tma(padded_rows(m), n, k, "", None, "auto"),
                        reads_pad_rows=padded_rows(m) > m)


def _empty_cases() -> list[SanitizeCase]:
    def run(m, k):
        def go():
            cpu, dev = _mm_inputs(m, 64, k)
            out = torch.ops.w8a8.scaled_mm_sm90.default(*dev, BF16)
            torch.cuda.synchronize()
            return _ulp_diff(out, reference.scaled_mm(*cpu, BF16))
        return go

    return [SanitizeCase("sm90_m0", run(0, 128), tma_store=True), SanitizeCase("sm90_k0", run(5, 0), tma_store=True)]


# --- the case list ---------------------------------------------------------------------------------


def _config_names(op) -> list[str]:
    """The config table of a GEMM kernel family ("sm90" / "sm80"), by entry name."""
    return list(dispatch.config_names(op))


def cases(config_names: dict[str, list[str]] | None) -> list[SanitizeCase]:
    """Every case; ``config_names`` maps each CUTLASS op that is available to its config table
    (None: a dry run, listing a nominal table)."""
    dry = config_names is None
    # A dry run lists the built tables where the extensions load, else nominal ones.
    names = config_names or {"sm90": _config_names("sm90") or [f"config{i}" for i in range(11)],
                             "sm80": _config_names("sm80") or [f"config{i}" for i in range(8)]}
    out: list[SanitizeCase] = []

    if "sm90" in names:
        # Every config bucket, forced: two shapes (odd-ish M, N and K in 16-byte units, a partial
        # last K tile), both output dtypes, every scale / bias layout between them.
        for cname in names["sm90"]:
            out.append(_mm_case(f"sm90_{cname}_small", 17, 136, 272, config=cname, small=True))
            out.append(_mm_case(f"sm90_{cname}_m37_bf16", 37, 200, 272, config=cname))
            out.append(_mm_case(f"sm90_{cname}_m300_fp16", 300, 264, 528, config=cname, out_dtype=FP16,
                                per_token=False, bias="out"))
            out.append(_mm_case(f"sm90_{cname}_m129_per_tensor", 129, 136, 400, config=cname,
                                per_channel=False, bias=None))
        # The M ladder of the heuristic (config ""): swap-AB 128x16 up to 64 tokens, 64x128
        # pingpong to 128, swap-AB 128x64 or 128x128 pingpong to 256 by N, 128x128 to 512, then 128x256.
        for m, n in ((1, 256), (16, 256), (33, 520), (64, 256), (65, 256), (128, 264), (200, 2048), (200, 4104),
                     (300, 256), (513, 264), (1000, 512)):
            out.append(_mm_case(f"sm90_ladder_m{m}_n{n}", m, n, 528, small=m in (1, 200)))
        # K decompositions: explicit split-K on each split-capable config, stream-K, and the heuristic's split.
        for m in (3, 100, 300):
            for split in (2, 3, 4):
                out.append(_mm_case(f"sm90_split_k{split}_m{m}", m, 264, 1040, split_k=split, small=split == 4))
        for m in (1, 200, 600):
            out.append(_mm_case(f"sm90_streamk_m{m}", m, 264, 1040, scheduler="stream_k", small=m == 1))
        out.append(_mm_case("sm90_persistent_m1", 1, 264, 1040, scheduler="persistent"))
        out.append(_mm_case("sm90_heuristic_split_m1_k8192", 1, 1024, 8192, small=True))
        # The GEMV's own picks (config "", M <= 4): each token tile, a K that ends mid-step.
        for m in (1, 2, 3, 4):
            out.append(_mm_case(f"sm90_gemv_m{m}", m, 264, 1040 + 16 * m, small=m == 3))
        # The skinny GEMM's picks (M = 5..16, more 64-row weight tiles than the H100's 132 SMs): one
        # and two token halves, N ending inside a 16-row group, K ending mid-step.
        for m in (5, 9, 16):
            out.append(_mm_case(f"sm90_skinny_m{m}", m, 8456, 1040 + 16 * m, small=m == 9))
        # Odd M, N, K within the 16-byte rules (N % 8, K % 16).
        for m, n, k in ((1, 8, 16), (3, 24, 48), (7, 40, 80), (63, 8, 16), (129, 24, 1008), (257, 136, 48)):
            out.append(_mm_case(f"sm90_odd_m{m}_n{n}_k{k}", m, n, k))
        # Row-strided operands (the binding reads strides, never rebuilds them) and one row of odd pitch.
        out.append(_mm_case("sm90_row_strided_m33", 33, 256, 512, a_pad=32, b_pad=16, small=True))
        out.append(_mm_case("sm90_row_strided_m300", 300, 256, 512, a_pad=64))
        out.append(_mm_case("sm90_one_row_odd_pitch", 1, 256, 512, a_pad=5))
        out.extend(_empty_cases())
        # W8A8Linear's single op: CUDA quantizer then CUTLASS, dynamic and static.
        out.append(_linear_case("linear_sm90_dynamic_m4", 4, 512, 256, "dynamic", small=True))
        out.append(_linear_case("linear_sm90_static_m17", 17, 512, 256, "static"))
        out.append(_linear_case("linear_sm90_dynamic_m100", 100, 4096, 256, "dynamic"))
        out.append(_linear_case("linear_sm90_dynamic_m150", 150, 1024, 512, "dynamic"))   # the 64x96 swap tile
        out.append(_linear_case("linear_sm90_dynamic_m200", 200, 512, 4224, "dynamic"))  # the 128x128 pingpong tile
        # The cooperative tiles in their 1x2 clusters, weights first (the weights multicast to two token tiles).
        out.append(_linear_case("linear_sm90_dynamic_m160_cluster", 160, 512, 4224, "dynamic", small=True))  # 128x96
        out.append(_linear_case("linear_sm90_dynamic_m230_cluster", 230, 1024, 1024, "dynamic", small=True))  # 128x64

    if "sm80" in names:
        for cname in names["sm80"]:
            out.append(_mm_case(f"sm80_{cname}_small", 17, 136, 272, op="sm80", config=cname, small=True))
            out.append(_mm_case(f"sm80_{cname}_m300_fp16", 300, 264, 528, op="sm80", config=cname,
                                out_dtype=FP16, per_token=False, bias="out"))
        for m in (1, 65, 1000):
            out.append(_mm_case(f"sm80_ladder_m{m}", m, 264, 1040, op="sm80"))

    if dry or dispatch.unavailable_reason("quantize_per_token", "sm90", torch.device(DEV)) is None:
        # The CUDA quantizers at 37 rows: warps per row (K <= 2048 bf16), a block per row
        # (<= 32768), two-pass above; 300 rows: the throughput shapes (several rows per
        # block up to K = 4096 bf16); 330 rows: the ring kernel (bf16 K = 16392..28672, its
        # shared memory refilled while read); 16-byte vector loads, scalar loads for odd K,
        # misaligned and row-strided rows.
        for k in (1, 7, 100, 1032, 8200, 16392):
            for dtype in (BF16, FP32):
                out.append(_quant_case(f"cuda_per_token_k{k}_{str(dtype)[6:]}", 37, k, dtype, "sm90",
                                       small=(k, dtype) in ((100, BF16), (8200, BF16))))
        for k in (1032, 8200):
            out.append(_quant_case(f"cuda_per_token_k{k}_rows300", 300, k, BF16, "sm90"))
        out.append(_quant_case("cuda_per_token_ring_k16392_rows330", 330, 16392, BF16, "sm90", small=True))
        out.append(_quant_case("cuda_per_token_ring_k28672_row_strided", 330, 28672, BF16, "sm90", pad=64))
        out.append(_quant_case("cuda_per_token_row_strided", 37, 1024, BF16, "sm90", pad=64))
        out.append(_quant_case("cuda_per_token_offset_by_one", 37, 1024, BF16, "sm90", pad=8, offset=1))
        for k, zp in ((7, None), (1032, torch.int8), (4096, torch.int32)):
            out.append(_quant_case(f"cuda_static_k{k}", 37, k, BF16, "sm90", static=True, zp=zp, small=k == 1032))
        out.append(_quant_case("cuda_static_offset_by_one", 37, 1024, FP16, "sm90", static=True, zp=torch.int8, pad=8, offset=1))

    # Triton: each GEMM config row (picked by M), a K tail and an even K, and the quantizer paths.
    for m in (1, 40, 100, 200, 600, 1100):
        out.append(_mm_case(f"triton_mm_m{m}", m, 264, 272, op="triton", small=m in (1, 200)))
    out.append(_mm_case("triton_mm_even_k", 100, 256, 512, op="triton", out_dtype=FP16, per_token=False, bias="out"))
    out.append(_mm_case("triton_mm_row_strided", 33, 256, 512, op="triton", a_pad=5, b_pad=3))
    out.append(_mm_case("triton_mm_fp32_out", 17, 72, 100, op="triton", out_dtype=FP32))
    for k in (100, 9000):  # one tile in registers, and the two-pass streaming loop
        out.append(_quant_case(f"triton_per_token_k{k}", 37, k, BF16, "triton", small=True))
    out.append(_quant_case("triton_per_token_offset_by_one", 37, 1024, FP16, "triton", pad=8, offset=1))
    out.append(_quant_case("triton_static_k1000", 37, 1000, BF16, "triton", static=True, zp=torch.int32, small=True))
    # Tensor parallelism's row-parallel quantizer: row stats of K-slices, then each slice
    # quantized with the rows' reduced stats (one tile in registers, and the streaming loop).
    for k in (100, 9000):
        out.append(_row_stats_case(f"triton_row_stats_slices_k{k}", 37, k, small=k == 9000))
    return out


def _row_stats_case(name, r, k, small=False) -> SanitizeCase:
    def run():
        from w8a8.triton import quant

        x, x_d = _rows(_gen("row_stats", r, k), r, k, BF16)
        cut = k // 3
        stats = torch.maximum(quant.per_token_row_stats(x_d[:, :cut]), quant.per_token_row_stats(x_d[:, cut:]))
        q_head, s = quant.quantize_with_row_stats(x_d[:, :cut], stats)
        q_tail, _ = quant.quantize_with_row_stats(x_d[:, cut:], stats)
        torch.cuda.synchronize()
        return _codes_diff(torch.cat([q_head.cpu(), q_tail.cpu()], dim=1), s, *reference.quantize_per_token(x))

    return SanitizeCase(name, run, small)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=("full", "small"), default="full")
    p.add_argument("--only", default=None, help="run the cases whose name matches this regex")
    p.add_argument("--outputs", choices=("all", "tma", "other"), default="all",
                   help="tma: only the cases whose output TMA stores write (sm90 CUTLASS); other: the rest")
    p.add_argument("--written-inputs", action="store_true",
                   help="leave out the cases whose kernels read pad rows nothing writes (initcheck's runs)")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    p.add_argument("--dry-run", action="store_true", help="no GPU needed: import, build and list the cases")
    args = p.parse_args(argv)

    if args.dry_run:
        chosen = cases(None)
    else:
        if not torch.cuda.is_available():
            print("sanitize_cases: no CUDA device (use --dry-run to check the script without one)")
            return 2
        config_names = {}
        for op in ("sm90", "sm80"):
            if dispatch.unavailable_reason("scaled_mm", op, torch.device(DEV)) is None:
                config_names[op] = _config_names(op)
        if "sm90" not in config_names:
            print(f"sanitize_cases: sm90 kernels unavailable "
                  f"({dispatch.unavailable_reason('scaled_mm', 'sm90', torch.device(DEV))}); "
                  "running the other kernels only")
        chosen = cases(config_names)
    chosen = [c for c in chosen if (args.set == "full" or c.small) and (args.only is None or re.search(args.only, c.name))
              and args.outputs in ("all", "tma" if c.tma_store else "other")
              and not (args.written_inputs and c.reads_pad_rows)]
    if args.list or args.dry_run:
        print("\n".join(c.name for c in chosen))
        print(f"{len(chosen)} cases ({args.set})")
        return 0

    failed = 0
    start = time.perf_counter()
    for case in chosen:
        t0 = time.perf_counter()
        try:
            problem = case.run()
        except Exception as exc:  # a case must not stop the others from being sanitized
            problem = f"{type(exc).__name__}: {exc}"
        ms = (time.perf_counter() - t0) * 1e3
        if problem is None:
            print(f"ok   {case.name} ({ms:.0f} ms)", flush=True)
        else:
            failed += 1
            print(f"FAIL {case.name}: {problem}", flush=True)
    print(f"sanitize_cases: {len(chosen)} cases ({args.set}), {failed} failed, {time.perf_counter() - start:.1f} s")
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
