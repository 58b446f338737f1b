"""The Triton kernels (``w8a8.triton``) against the exact math of ``w8a8.reference``.

* quantization: bit-identical (q and scale, NaN-aware), on odd K, leading dims,
  strided rows, zero rows, Inf/NaN rows, exact .5 ties, every input dtype;
* the fused norm / SiLU-mul quantizers (tests/ops/test_fused_quant.py): their sm_90 code's
  divisions, square roots and flush-to-zero, checked offline;
* scaled_mm: every output element within 1 ulp of the reference (NaN-filled
  outputs, so an element the kernel does not write fails), odd M/N/K, scalar and
  vector scales, bias none/fp32/bf16, bf16/fp16 outputs, full int8 range, strided
  inputs, every row of the config table.

Runs on CPU tensors in Triton's interpreter when TRITON_INTERPRET=1 was set before
the kernels were imported (tests/conftest.py sets it when there is no GPU), on CUDA
tensors otherwise; the CUDA run adds LLM-sized shapes and a CUDA-graph capture.
Random inputs come from the per-test seed of conftest.py (printed on failure).
"""
from __future__ import annotations

import importlib
import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
HAS_CUDA = torch.cuda.is_available()
if not (HAS_CUDA or INTERPRET):
    pytest.skip(
        "the Triton kernels need a CUDA GPU, or TRITON_INTERPRET=1 set before import to run in "
        "Triton's CPU interpreter",
        allow_module_level=True,
    )
pytest.importorskip("triton")

from w8a8 import reference  # noqa: E402
import helpers  # noqa: E402
from helpers import assert_ulp_close, max_ulp, plant_special_rows  # noqa: E402


def rows_with_spread(r, k, dtype):
    return helpers.rows_with_spread(r, k, dtype, DEVICE)


def assert_scale_equal(scale, ref):
    """Bit-equal fp32 scales, NaN where the reference has NaN."""
    assert scale.dtype == ref.dtype == torch.float32 and scale.shape == ref.shape, (scale.shape, ref.shape)
    assert torch.equal(scale.isnan(), ref.isnan())
    assert torch.equal(scale.nan_to_num(0.0).view(torch.int32), ref.nan_to_num(0.0).view(torch.int32))

quant = importlib.import_module("w8a8.triton.quant")
quant_configs = importlib.import_module("w8a8.triton.quant_configs")
# By module path: the package's `scaled_mm` attribute is the function, not the module.
mm = importlib.import_module("w8a8.triton.scaled_mm")

DEVICE = "cuda" if HAS_CUDA else "cpu"
# LLM-sized shapes take minutes in the interpreter: only on a real GPU.
gpu_only = pytest.mark.skipif(
    not HAS_CUDA or INTERPRET, reason="LLM-sized shapes need a CUDA GPU (not the interpreter)"
)

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
OUT_DTYPES = (torch.bfloat16, torch.float16)


# --- helpers -------------------------------------------------------------------------------------


def check_per_token(x: torch.Tensor, config: quant.PerTokenConfig | None = None) -> None:
    """Run into poisoned outputs (q twice, with two poisons: no int8 value is a safe sentinel)."""
    ref_q, ref_scale = reference.quantize_per_token(x)
    for q_poison in (77, -77):
        q = torch.full(x.shape, q_poison, dtype=torch.int8, device=x.device)
        scale = torch.full((*x.shape[:-1], 1), -1.0, device=x.device)  # scales are never negative
        quant.quantize_per_token_out(x, q, scale, config)
        assert torch.equal(q, ref_q), f"{int((q != ref_q).sum())} codes differ"
        assert_scale_equal(scale, ref_scale)


# --- per-token quantization ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("k", [3, 100, 4096, 9000])
def test_per_token_row_stats_over_slices(dtype, k):
    """Tensor parallelism: the row stats of K-slices, reduced by MAX, are the whole rows'
    stats, and each slice quantized with them gives the whole rows' codes and scales."""
    x = plant_special_rows(rows_with_spread(12, k, dtype))
    stats = quant.per_token_row_stats(x)
    assert torch.equal(stats, reference.per_token_row_stats(x))
    cut = k // 3
    slices = (x[:, :cut], x[:, cut:])
    reduced = torch.maximum(*(quant.per_token_row_stats(s) for s in slices))
    assert torch.equal(reduced, stats)
    ref_q, ref_scale = reference.quantize_per_token(x)
    for s, cols in zip(slices, (slice(0, cut), slice(cut, k))):
        q, scale = quant.quantize_with_row_stats(s, reduced)
        assert torch.equal(q, ref_q[:, cols]), f"{int((q != ref_q[:, cols]).sum())} codes differ"
        assert_scale_equal(scale, ref_scale)


@pytest.mark.parametrize(
    "config",
    [
        quant.PerTokenConfig(block_k=32, rows=1, single_pass=False, num_warps=1),  # the streaming path
        quant.PerTokenConfig(block_k=128, rows=4, single_pass=True, num_warps=2),  # several rows per program
        quant.PerTokenConfig(block_k=16, rows=2, single_pass=False, num_warps=1),
    ],
    ids=["stream32", "rows4", "stream16x2"],
)
@pytest.mark.parametrize("k", [1, 31, 100, 128])
def test_per_token_forced_configs(config, k):
    if config.single_pass and k > config.block_k:
        pytest.skip("a single-pass config must hold the row")
    x = plant_special_rows(rows_with_spread(11, k, torch.bfloat16))  # 11 rows: a partial last program
    check_per_token(x, config)


def test_per_token_long_rows_take_the_streaming_path():
    k = quant_configs.PER_TOKEN_MAX_SINGLE_PASS_K + 1000 + 3
    assert not quant.per_token_config(k).single_pass
    check_per_token(plant_special_rows(rows_with_spread(5, k, torch.float16)))


def test_per_token_configs_heuristic():
    for k in (1, 3, 17, 100, 1000, 4096, 14336, 16384, 16385, 32768):
        cfg = quant.per_token_config(k)
        assert cfg.single_pass == (k <= quant_configs.PER_TOKEN_MAX_SINGLE_PASS_K)
        assert not cfg.single_pass or cfg.block_k >= k
        for v in (cfg.block_k, cfg.rows, cfg.num_warps):
            assert v & (v - 1) == 0, cfg
        assert 1 <= cfg.num_warps <= 16


def test_per_token_public_wrapper_shapes():
    x = rows_with_spread(6, 10, torch.float16).view(2, 3, 10)
    q, scale = quant.quantize_per_token(x)
    assert q.shape == (2, 3, 10) and q.dtype == torch.int8 and q.is_contiguous()
    assert scale.shape == (2, 3, 1) and scale.dtype == torch.float32 and scale.is_contiguous()
    ref_q, ref_scale = reference.quantize_per_token(x)
    assert torch.equal(q, ref_q)
    assert_scale_equal(scale, ref_scale)
    q0, s0 = quant.quantize_per_token(x[:0])
    assert q0.shape == (0, 3, 10) and s0.shape == (0, 3, 1)


# --- static quantization ------------------------------------------------------------------------


def check_static(x, scale, zp):
    ref = reference.quantize_static(x, scale, zp)
    for poison in (77, -77):
        q = torch.full(x.shape, poison, dtype=torch.int8, device=x.device)
        quant.quantize_static_out(x, scale, zp, q)
        assert torch.equal(q, ref), f"{int((q != ref).sum())} codes differ"
    assert torch.equal(quant.quantize_static(x, scale, zp), ref)


ZERO_POINTS = {
    "none": None,
    "int8": lambda: torch.tensor([-3], dtype=torch.int8, device=DEVICE),
    "int8_min": lambda: torch.tensor([-128], dtype=torch.int8, device=DEVICE),
    "int32": lambda: torch.tensor([17], dtype=torch.int32, device=DEVICE),
    "int32_wide": lambda: torch.tensor([-400], dtype=torch.int32, device=DEVICE),  # +Inf -> 508 - 400
}


@pytest.mark.parametrize("zp_kind", list(ZERO_POINTS))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (1,), (3, 17), (2, 5, 100), (4, 1500)], ids=str)
def test_static_random_and_special_values(shape, dtype, zp_kind):
    zp = ZERO_POINTS[zp_kind]() if ZERO_POINTS[zp_kind] else None
    x = (torch.randn(shape, device=DEVICE) * 3).to(dtype)
    flat = x.view(-1)  # a view: the planted values land in x
    for i, v in enumerate([float("inf"), float("-inf"), float("nan"), 1e30, -1e30, 0.0]):
        if i * 5 < flat.numel():
            flat[i * 5] = v
    scale = torch.rand((), device=DEVICE) * 0.05 + 0.01
    check_static(x, scale.reshape(1), zp)


def test_static_strided_and_degenerate_scales():
    base = torch.randn(3, 6, 40, device=DEVICE)
    zp = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    for x in (base[..., 2:35], base[:, ::2, :9], base.transpose(0, 1)):
        check_static(x, torch.tensor([0.02], device=DEVICE), zp)
    x = base[0].clone()
    x[0, :3] = 0.0
    check_static(x, torch.tensor([0.0], device=DEVICE), zp)  # x / 0: +-Inf saturate, 0 / 0 -> zero_point
    check_static(x, torch.tensor([float("nan")], device=DEVICE), zp)  # everything -> zero_point
    check_static(x, torch.tensor([0.02], dtype=torch.float32, device=DEVICE).reshape(1, 1), None)


# --- scaled_mm -----------------------------------------------------------------------------------


def rand_int8_full_range(rows: int, k: int, pad: int) -> torch.Tensor:
    """[rows, k] int8 over -128..127 with both ends present; a slice of [rows, k + pad] when pad > 0."""
    t = torch.randint(-128, 128, (rows, k + pad), dtype=torch.int8, device=DEVICE)
    t.view(-1)[0] = -128
    t.view(-1)[-1 if pad == 0 else k - 1] = 127
    return t[:, :k]


def rand_scales(n: int, per_element: bool) -> torch.Tensor:
    """fp32 scales in [1e-3, 4e-3), as [n, 1] per element or [1] per tensor."""
    return (torch.rand(n if per_element else 1, 1, device=DEVICE) * 3 + 1) * 1e-3


def make_bias(n: int, kind: str):
    if kind == "none":
        return None
    return (torch.randn(n, device=DEVICE) * 4).to({"fp32": torch.float32, "bf16": torch.bfloat16}[kind])


EPILOGUES = list(
    itertools.product(
        [True, False],  # a_scale per token
        [True, False],  # b_scale per channel
        ["none", "fp32", "bf16"],  # bias
        OUT_DTYPES,
    )
)


def run_scaled_mm(m, n, k, a_per_row, b_per_col, bias_kind, out_dtype, strided, config=None):
    """Run into a NaN-filled buffer wider than out: every element of out must be written, none outside."""
    pad = 5 if strided else 0
    a = rand_int8_full_range(m, k, pad)
    b = rand_int8_full_range(n, k, pad + 3 if strided else 0)
    a_scale = rand_scales(m, a_per_row)
    b_scale = rand_scales(n, b_per_col).reshape(-1)
    bias = make_bias(n, bias_kind)
    ref = reference.scaled_mm(a, b, a_scale, b_scale, bias, out_dtype)

    buf = torch.full((m + 1, n + 3), float("nan"), dtype=out_dtype, device=DEVICE)
    out = buf[:m, :n]
    mm.scaled_mm_out(a, b, a_scale, b_scale, bias, out, config)
    assert_ulp_close(out, ref, max_ulp("triton", DEVICE, out.dtype))
    assert bool(buf[m:].isnan().all()) and bool(buf[:, n:].isnan().all()), "wrote outside out"
    return out, ref


@pytest.mark.parametrize("config", mm.SCALED_MM_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("k", [256, 300])  # K a multiple of every BLOCK_K (no K mask) and not
def test_scaled_mm_every_config_row(config, k):
    run_scaled_mm(130, 300, k, True, True, "fp32", torch.bfloat16, strided=True, config=config)


def test_scaled_mm_halved_block_n():
    cfg = mm.select_config(8, 4096, num_sms=132)
    assert cfg.block_n == 32 and cfg.name == "decode"
    run_scaled_mm(5, 200, 100, True, True, "bf16", torch.float16, strided=False, config=cfg)


def test_select_config_table():
    rows = mm.SCALED_MM_CONFIGS
    assert [c.max_m for c in rows] == sorted(c.max_m for c in rows), "rows must be ordered by M"
    assert rows[-1].max_m >= 2**31, "the last row must serve any M"
    for c in rows:
        assert c.why and c.smem_bytes <= 227 * 1024, c
        assert c.min_block_n <= c.block_n and c.block_n % c.min_block_n == 0
        for v in (c.block_m, c.block_n, c.block_k, c.min_block_n):
            assert v >= 16 and v & (v - 1) == 0, c
    for m in (1, 16, 17, 64, 65, 128, 129, 256, 257, 1024, 1025, 8192):
        cfg = mm.select_config(m, 14336)  # wide N: no halving
        assert cfg == next(c for c in rows if m <= c.max_m)


# --- CUDA only: LLM-sized shapes, exactness on the GPU, CUDA graphs --------------------------


@gpu_only
@pytest.mark.parametrize("m", [1, 100, 2000])
def test_cuda_scaled_mm_epilogue_is_bit_exact(m):
    """The fp32 epilogue is the reference's, FMA contraction off: on a GPU the only rounding
    left is fp32 -> out_dtype (round to nearest even), so no ulp of slack should be needed."""
    out, ref = run_scaled_mm(m, 1024, 1024, True, True, "fp32", torch.bfloat16, strided=True)
    assert_ulp_close(out, ref, max_ulp=0)


@gpu_only
def test_cuda_graph_capture():
    """No autotuning, no host sync: both kernels capture and replay in a CUDA graph."""
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = rand_int8_full_range(4096, 4096, 0)
    w_scale = rand_scales(4096, True).reshape(-1)
    bias = make_bias(4096, "bf16")

    def step():
        q, s = quant.quantize_per_token(x)
        return mm.scaled_mm(q, w, s, w_scale, bias, torch.bfloat16)

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    q, s = reference.quantize_per_token(x)
    assert_ulp_close(out, reference.scaled_mm(q, w, s, w_scale, bias, torch.bfloat16), max_ulp=0)


# --- offline sm_90 compilation: properties of the real GPU code, checked without a GPU ----------

# Run in a subprocess without TRITON_INTERPRET (under it the kernels are not compilable
# objects). triton.compile needs no driver for an explicit target; ptxas ships with triton.
_SM90_COMPILE_SCRIPT = textwrap.dedent(
    """
    import importlib, json, re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    quant = importlib.import_module("w8a8.triton.quant")
    mm = importlib.import_module("w8a8.triton.scaled_mm")
    norm = importlib.import_module("w8a8.triton.norm_quant")
    silu = importlib.import_module("w8a8.triton.silu_quant")

    def facts(name, fn, signature, constexprs, options, aligned, **extra):
        attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
        src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        ptx = k.asm["ptx"]
        count = lambda pattern: len(re.findall(pattern, ptx))
        print(json.dumps(dict(
            name=name, shared=k.metadata.shared,
            div_rn=count(r"div\\.rn\\.f32"), div_inexact=count(r"div\\.(full|approx)"),
            ftz=count(r"\\.ftz"), fma=count(r"fma\\.rn[a-z.]*\\.f32"),
            fma_zero=count(r"fma\\.rn[a-z.]*\\.f32\\s+%\\w+, %\\w+, %\\w+, 0f00000000;"),
            rint_add=count(r"add\\.f32\\s+%\\w+, %\\w+, 0f4B400000"),
            rint_sub=count(r"add\\.f32\\s+%\\w+, %\\w+, 0fCB400000"),
            wgmma=count(r"wgmma\\.mma_async"), mma_sync=count(r"mma\\.sync"),
            cvt_rn_out=count(r"cvt\\.rn\\.(bf16|f16)(x2)?\\.f32"),
            sqrt_rn=count(r"sqrt\\.rn\\.f32"), sqrt_inexact=count(r"sqrt\\.approx|rsqrt"),
            ex2_ftz=count(r"ex2\\.approx\\.ftz\\.f32"), ex2=count(r"ex2\\."), **extra,
        )))

    sig = dict(x_ptr="*bf16", q_ptr="*i8", scale_ptr="*fp32", stats_ptr="*fp32", R="i32", K="i32", stride_xr="i32",
               ROWS="constexpr", BLOCK_K="constexpr", SINGLE_PASS="constexpr", STATS_IN="constexpr")
    for dtype, k, stats_in in [("*bf16", 100, False), ("*bf16", 4096, False), ("*bf16", 14336, False),
                               ("*fp32", 14336, False), ("*fp16", 32768, False), ("*bf16", 100, True),
                               ("*bf16", 14336, True)]:
        c = quant.per_token_config(k)
        facts(f"per_token/{dtype[1:]}/K={k}/stats_in={stats_in}", quant._quantize_per_token_kernel,
              dict(sig, x_ptr=dtype), dict(ROWS=c.rows, BLOCK_K=c.block_k, SINGLE_PASS=c.single_pass, STATS_IN=stats_in),
              dict(num_warps=c.num_warps), [0, 1, 2, 3, 6])
    c = quant.static_config(4096)
    facts("static", quant._quantize_static_kernel,
          dict(x_ptr="*fp16", q_ptr="*i8", scale_ptr="*fp32", zp_ptr="*i32", R="i32", K="i32", stride_xr="i32",
               HAS_ZP="constexpr", ROWS="constexpr", BLOCK_K="constexpr"),
          dict(HAS_ZP=True, ROWS=c.rows, BLOCK_K=c.block_k), dict(num_warps=c.num_warps), [0, 1, 2, 3, 6])

    norm_sig = dict(x_ptr="*bf16", res_ptr="*bf16", w_ptr="*bf16", q_ptr="*i8", scale_ptr="*fp32", normed_ptr="*bf16",
                    sum_ptr="*bf16", R="i32", K="i32", stride_xr="i32", stride_rr="i32", eps="fp32",
                    HAS_RESIDUAL="constexpr", ROWS="constexpr", BLOCK_K="constexpr", SINGLE_PASS="constexpr")
    silu_sig = dict(g_ptr="*bf16", u_ptr="*bf16", q_ptr="*i8", scale_ptr="*fp32", p_ptr="*bf16", R="i32", F="i32",
                    stride_gr="i32", stride_ur="i32", ROWS="constexpr", BLOCK_K="constexpr", SINGLE_PASS="constexpr",
                    STORE_PRODUCT="constexpr")
    for dtype, k in [("*bf16", 4096), ("*fp16", 14336), ("*fp32", 100)]:
        c = quant.per_token_config(k)
        shape = dict(ROWS=c.rows, BLOCK_K=c.block_k, SINGLE_PASS=c.single_pass)
        facts(f"fused/rms_norm/{dtype[1:]}/K={k}", norm._rms_norm_quant_kernel,
              {**norm_sig, **{n: dtype for n in ("x_ptr", "res_ptr", "w_ptr", "normed_ptr", "sum_ptr")}},
              dict(HAS_RESIDUAL=k != 100, **shape), dict(num_warps=c.num_warps), [0, 1, 2, 3, 4, 5, 6])
        facts(f"fused/silu_mul/{dtype[1:]}/K={k}", silu._silu_mul_quant_kernel,
              {**silu_sig, **{n: dtype for n in ("g_ptr", "u_ptr", "p_ptr")}},
              dict(STORE_PRODUCT=False, **shape), dict(num_warps=c.num_warps), [0, 1, 2, 3, 4])

    mm_sig = dict(a_ptr="*i8", b_ptr="*i8", a_scale_ptr="*fp32", b_scale_ptr="*fp32", bias_ptr="*bf16",
                  c_ptr="*bf16", M="i32", N="i32", K="i32", stride_am="i32", stride_bn="i32", stride_cm="i32",
                  stride_as="i32", stride_bs="i32", stride_bias="i32")
    mm_sig.update({n: "constexpr" for n in ("A_SCALE_PER_ROW", "B_SCALE_PER_COL", "HAS_BIAS", "EVEN_K",
                                            "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")})
    configs = list(mm.SCALED_MM_CONFIGS) + [mm.select_config(8, 4096, 132)]
    for i, c in enumerate(configs):
        even_k, out = (i % 2 == 0), ("*bf16" if i % 3 else "*fp16")
        facts(f"scaled_mm/{c.name}/{c.block_m}x{c.block_n}x{c.block_k}/even_k={even_k}/{out[1:]}",
              mm._scaled_mm_kernel, dict(mm_sig, c_ptr=out),
              dict(A_SCALE_PER_ROW=True, B_SCALE_PER_COL=True, HAS_BIAS=True, EVEN_K=even_k, BLOCK_M=c.block_m,
                   BLOCK_N=c.block_n, BLOCK_K=c.block_k, GROUP_M=c.group_m),
              dict(num_warps=c.num_warps, num_stages=c.num_stages, **mm.KERNEL_OPTIONS),
              [0, 1, 2, 3, 4, 5, 8, 9, 10, 11],  # pointers, K and row strides multiples of 16
              pipelined_smem=(c.num_stages - 1) * (c.block_m + c.block_n) * c.block_k)
    """
)


@pytest.fixture(scope="module")
def sm90_ptx_facts():
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        import triton.backends.nvidia  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this triton has no NVIDIA backend to compile with ({exc})")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    run = subprocess.run([sys.executable, "-c", _SM90_COMPILE_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"offline sm_90 compilation failed:\n{run.stderr[-4000:]}"
    return {f["name"]: f for f in map(json.loads, run.stdout.splitlines())}


def test_sm90_quantize_ptx_is_ieee(sm90_ptx_facts):
    """On the GPU: IEEE divisions (never div.full/approx), no flush-to-zero, rint not folded
    away: the static kernel adds and subtracts the magic constant; the per-token kernels add
    it and read the code from the sum's low bits (no subtraction)."""
    quant_facts = [f for name, f in sm90_ptx_facts.items() if not name.startswith(("scaled_mm", "fused"))]
    assert len(quant_facts) == 8
    for f in quant_facts:
        assert f["div_rn"] > 0 and f["div_inexact"] == 0 and f["ftz"] == 0, f
        assert f["rint_add"] > 0, f
        assert f["rint_sub"] == (f["rint_add"] if f["name"] == "static" else 0), f
        # Per token, 16-bit rows: the corrected quotient, two FMAs per code and divisions only
        # per row (on rows of K = 100, packed several to a program, a thread may hold a value of
        # as many rows as it has codes: Triton 3.6 then divides 33 times for 32 codes); fp32 rows
        # and the static kernel: a division per code. (Triton 3.6 negates values by an FMA with a
        # zero addend, the same value: not counted; the kernel negates the divisor once a row,
        # where negating p cost 3.6 one such FMA per code.)
        if f["name"].startswith(("per_token/bf16", "per_token/fp16")):
            assert f["fma"] - f["fma_zero"] == 2 * f["rint_add"], f
            assert "/K=100/" in f["name"] or f["div_rn"] < f["rint_add"], f
        else:
            assert f["fma"] == 0 and f["div_rn"] >= f["rint_add"], f


def test_sm90_fused_quant_ptx(sm90_ptx_facts):
    """On the GPU, the fused kernels (w8a8/triton/norm_quant.py, silu_quant.py): IEEE divisions
    (the norm's codes: per code on fp32 rows only), the norm's sqrt correctly rounded (no rsqrt),
    the quantizer's rint addition; the only flush-to-zero
    is SiLU's ex2.approx.ftz on [-1/2, 1/2], whose inputs and results are never subnormal,
    and the norm has no ex2 at all."""
    fused_facts = [f for name, f in sm90_ptx_facts.items() if name.startswith("fused")]
    assert len(fused_facts) == 6
    for f in fused_facts:
        assert f["div_rn"] > 0 and f["div_inexact"] == 0 and f["rint_add"] > 0, f
        assert f["ftz"] == f["ex2_ftz"], f
        if "/rms_norm/" in f["name"]:
            assert f["sqrt_rn"] > 0 and f["sqrt_inexact"] == 0 and f["ex2"] == 0, f
            # The codes of 16-bit rows: the corrected quotient, divisions per row only.
            assert (f["div_rn"] < f["rint_add"]) == ("/fp32/" not in f["name"]), f
        else:
            assert f["ex2"] > 0 and f["sqrt_rn"] == 0, f


def test_sm90_scaled_mm_ptx(sm90_ptx_facts):
    """On the GPU: no FMA (the epilogue rounds like the reference), round-to-nearest output
    conversion, tensor cores (wgmma from 64-row tiles, mma.sync below), a pipelined K loop,
    shared memory within the H100's 227 KiB."""
    mm_facts = [f for name, f in sm90_ptx_facts.items() if name.startswith("scaled_mm")]
    assert len(mm_facts) == len(mm.SCALED_MM_CONFIGS) + 1
    for f in mm_facts:
        block_m = int(f["name"].split("/")[2].split("x")[0])
        assert f["fma"] == 0 and f["ftz"] == 0 and f["cvt_rn_out"] > 0, f
        assert (f["wgmma"] > 0) if block_m >= 64 else (f["mma_sync"] > 0), f
        # The K loop is software-pipelined (cp.async stages in shared memory). It is only
        # when K and the row strides are multiples of 16: 16-byte copies need that alignment.
        assert f["pipelined_smem"] <= f["shared"] <= 227 * 1024, f
