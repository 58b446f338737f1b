"""The Triton kernels of the fused producer + quantizer ops (w8a8/triton/norm_quant.py,
silu_quant.py, fused_common.py) inside: what tests/ops/test_fused_quant.py cannot see through
the ops.

* The device helpers: bf16 rounding equal to torch's cast, exp within 1 ulp.
* The SiLU-mul kernel against the one it replaced (frozen in tests/fused_helpers.py):
  DT(silu(g)) and 1 + exp(-g) bit-identical for every bf16 and every fp16 value of g; its
  reciprocal quantizer (``_codes``) equal to the IEEE division's codes on adversarial
  quotients (ties, neighbours of half-integers, scales over 180 binades); its launch shapes
  (chunked tiles, persistent programs, the streaming path); the exp reduction's sm_90 FP
  instructions the old kernel's.

Triton runs in its interpreter on the CPU (conftest.py), on CUDA when there is a GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from w8a8 import reference
from helpers import (CUDA, FLOAT_DTYPES, assert_exact, assert_same_codes, assert_ulp_close, plant_special_rows,
                     ulp_distance)
from fused_helpers import FUSED_TOL, TRITON, every_value, gate_up, old_silu_product, silu_product, triton

if TRITON:
    import triton.language as tl
    from fused_helpers import _silu_both_kernel
    from w8a8.triton import fused_common, silu_quant
    from w8a8.triton.quant import _quantize_rows

# numpy, under Triton's interpreter, warns on the Inf / NaN the special rows hold on purpose
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]



# --- the kernels' device helpers -----------------------------------------------------------------


if TRITON:
    @triton.jit
    def _apply_helpers(v_ptr, bf16_ptr, exp_ptr, N, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(v_ptr + i, mask=i < N)
        tl.store(bf16_ptr + i, fused_common._round_to(v, tl.bfloat16), mask=i < N)
        tl.store(exp_ptr + i, silu_quant._exp_neg(-v), mask=i < N)  # exp(v)


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
def test_triton_helpers_round_bf16_like_torch_and_exp_within_an_ulp():
    device = "cuda" if CUDA else "cpu"

    def run(v):
        bf16, exp = torch.empty_like(v), torch.empty_like(v)
        _apply_helpers[(triton.cdiv(v.numel(), 16384),)](v, bf16, exp, v.numel(), BLOCK=16384)
        return bf16, exp

    edges = [0, -2**31, 0x7F800000, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x00008000, 0x00018000, 0x00007FFF,
             0x3F808000, 0x3F818000, 0x7FC00000, 0x7FFFFFFF, -0x00800000, 1]  # ties, overflow, subnormals, NaN
    bits = torch.cat([torch.tensor(edges), torch.randint(-2**31, 2**31, (1 << 16,))]).to(torch.int32)
    v = bits.view(torch.float32).to(device)
    bf16, _ = run(v)
    expected = v.cpu().to(torch.bfloat16).float()
    assert torch.equal(bf16.cpu().isnan(), expected.isnan())
    assert torch.equal(bf16.cpu().nan_to_num(0).view(torch.int32), expected.nan_to_num(0).view(torch.int32))

    v = torch.cat([torch.empty(1 << 16).uniform_(-80, 89), torch.empty(1 << 14).uniform_(-20, 20),
                   torch.tensor([88.5, 88.72, 88.7228, 89.0, -80.0, -79.9, 0.0, float("inf")])]).to(device)
    _, exp = run(v)
    exact = torch.exp(v.cpu().double()).float()  # correctly rounded (but for double rounding, ~2**-29)
    assert_ulp_close(exp.cpu(), exact, max_ulp=1 if device == "cpu" else 4)
    # Below -80 the argument is clamped: exp(-80) (< 2**-115), so that 1 + exp(v) is 1 all the same.
    _, exp = run(torch.tensor([-80.0, -80.5, -104.0, -1e30, float("-inf")], device=device))
    assert bool((exp == exp[0]).all()) and bool((1.0 + exp == 1.0).all()) and 0 < float(exp[0]) < 2.0**-115


# --- the SiLU-mul kernel against the one it replaced --------------------------------------------------


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_silu_every_value_matches_the_previous_kernel(dtype):
    """Every 16-bit value of gate: a = DT(silu(g)) and its denominator 1 + exp(-g), both bit
    for bit those of the kernel before the rewrite (exp's 2**n applied to the exponent field
    instead of two multiplications, the argument clamped at -80 instead of -104); against
    torch's silu (the reference) within one ulp in at most FUSED_TOL's fraction of them (exp
    is not correctly rounded on either side; in the interpreter none differ)."""
    device = "cuda" if CUDA else "cpu"
    g = every_value(dtype, device)
    n = g.numel()
    a_new, a_old, d_new, d_old = (torch.empty(n, device=device) for _ in range(4))
    _silu_both_kernel[(triton.cdiv(n, 8192),)](g, a_new, a_old, d_new, d_old, n, BLOCK=8192)
    assert_exact(d_new, d_old)
    assert_exact(a_new, a_old)
    a = a_new.cpu().to(dtype)
    assert_exact(a.float(), a_new.cpu())  # DT values: the cast is exact
    print(f"{dtype}: a and 1 + exp(-g) bit-identical to the previous kernel's for all {n} values")
    ref = torch.nn.functional.silu(g.cpu().float()).to(dtype)  # reference.silu_mul's a
    if device == "cpu" and dtype == torch.bfloat16:
        # Triton's interpreter widens the 254 subnormal bf16 values to wrong fp32 values (its
        # bf16 -> fp32 conversion; the GPU's is a shift): compare the rest.
        normal = (g.cpu().float().abs() >= torch.finfo(torch.float32).tiny) | (g.cpu() == 0) | ~g.cpu().isfinite()
        a, ref = a[normal], ref[normal]
    differ = int((ulp_distance(a.masked_fill(a.isnan(), 0), ref.masked_fill(ref.isnan(), 0)) > 0).sum())
    assert_ulp_close(a, ref, max_ulp=1)
    print(f"{dtype}: {differ} of {a.numel()} values differ from torch's silu by an ulp")
    assert differ <= FUSED_TOL[dtype][1] * n, f"{differ} of {n} values of {dtype} differ from torch's silu by an ulp"


if TRITON:
    @triton.jit
    def _codes_kernel(x_ptr, s_ptr, fast_ptr, slow_ptr, N, BLOCK: tl.constexpr):
        """Each x its own row with its own scale: the reciprocal path's codes and the IEEE division's."""
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i, mask=i < N, other=0.0)[:, None]
        s = tl.load(s_ptr + i, mask=i < N, other=1.0)
        recip = tl.math.div_rn(tl.full([BLOCK], 1.0, tl.float32), s)
        tl.store(fast_ptr + i[:, None], silu_quant._codes(x, -s, recip, tl.float32), mask=(i < N)[:, None])
        tl.store(slow_ptr + i[:, None], _quantize_rows(x, s, s > 0), mask=(i < N)[:, None])


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
def test_reciprocal_codes_equal_the_divisions():
    """``_codes`` on fp32 x (x * div_rn(1, scale) and two FMA corrections) against rint(div_rn(x, scale)):
    scales RN(amax / 127) over 180 binades down to the path's 2**-60, x within +-amax: random,
    RN(scale (k + 1/2)) (quotients at and beside ties) and 1..3 ulp from them, +-amax itself."""
    device = "cuda" if CUDA else "cpu"
    n = 1 << 19
    amax = torch.exp2(torch.empty(n, dtype=torch.float64).uniform_(-52, 127)).float()
    scale = amax / torch.full_like(amax, 127.0)
    keep = scale >= 2.0**-60
    amax, scale = amax[keep], scale[keep]
    m = amax.numel()
    x = (scale.double() * torch.empty(m, dtype=torch.float64).uniform_(-127, 127)).float()
    ties = (scale.double() * (torch.randint(-127, 127, (m,)).double() + 0.5)).float()
    steps = torch.randint(-3, 4, (m,))
    beside = ties.clone()
    for i in range(3):
        beside = torch.where(steps > i, torch.nextafter(beside, torch.tensor(float("inf"))), beside)
        beside = torch.where(-steps > i, torch.nextafter(beside, torch.tensor(float("-inf"))), beside)
    kind = torch.randint(0, 4, (m,))
    x = torch.where(kind == 1, ties, torch.where(kind == 2, beside, x))
    x = torch.where(kind == 3, amax * (torch.randint(0, 2, (m,)) * 2 - 1).float(), x)
    x = torch.minimum(torch.maximum(x, -amax), amax)
    quotient = x.double() / scale.double()
    assert int((quotient - quotient.floor() == 0.5).sum()) > 1000  # exact ties are there
    fast, slow = (torch.empty(m, dtype=torch.int8, device=device) for _ in range(2))
    x_d, s_d = x.to(device), scale.to(device)
    _codes_kernel[(triton.cdiv(m, 8192),)](x_d, s_d, fast, slow, m, BLOCK=8192)
    expected = torch.round(x / scale).clamp(-128, 127).to(torch.int8)  # IEEE division on the CPU
    assert torch.equal(slow.cpu(), expected)
    assert torch.equal(fast.cpu(), expected), f"{int((fast.cpu() != expected).sum())} codes differ"


def run_silu_shape(gate, up, block_k, single_pass, num_warps, programs):
    """The kernel launched with a given shape and number of programs; returns (codes, scales, p)."""
    f = gate.shape[-1]
    g2, u2 = gate.reshape(-1, f), up.reshape(-1, f)
    q = torch.full(g2.shape, 77, dtype=torch.int8, device=gate.device)
    s = torch.full((g2.shape[0], 1), -1.0, device=gate.device)
    p = torch.full(g2.shape, float("nan"), dtype=gate.dtype, device=gate.device)
    silu_quant._silu_mul_quant_kernel[(programs,)](
        g2, u2, q, s, p, g2.shape[0], f, g2.stride(0), u2.stride(0), ROWS=1, BLOCK_K=block_k,
        SINGLE_PASS=single_pass, STORE_PRODUCT=True, num_warps=num_warps)
    return q, s, p


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("f,shapes", [
    (14336, [(14336, True), (16384, True), (2048, False), (6144, False)]),  # 7 chunks, pow2, streamed, 3 x 2048
    (11008, [(11264, True), (12288, True), (3072, False)]),  # 11 chunks of 1024 (odd: one unpacked), 6 x 2048
    (4096, [(4096, True), (6144, True), (1024, False)]),
    (1031, [(2048, True), (1536, True), (512, False)]),  # odd F: the last chunk masked
])
def test_silu_launch_shapes(dtype, f, shapes):
    """Every launch shape gives the default's outputs and the previous kernel's product, with
    programs looping over several rows each (1, 2, 3 programs for 5 rows: special rows, odd
    counts per program) or one row each."""
    device = "cuda" if CUDA else "cpu"
    m = 5
    gate, up = gate_up(m, f, dtype, device)
    gate = plant_special_rows(gate)
    gate[1] = gate[1].nan_to_num(0) * 1e-30  # a tiny row: scale < 2**-60, the IEEE-division branch
    expected = silu_product("triton", gate, up)
    assert_exact(expected, old_silu_product(gate, up))
    codes, scales = reference.quantize_per_token(expected.cpu())
    for block_k, single_pass in shapes:
        for programs in (1, 2, 3, m):
            q, s, p = run_silu_shape(gate, up, block_k, single_pass, 4, programs)
            assert_exact(p, expected)
            assert_same_codes((q, s), (codes, scales))


# Offline sm_90 compilation (no GPU needed), as tests/kernels/test_triton_kernels.py does it.
_EXP_PTX_SCRIPT = textwrap.dedent(
    r"""
    import json, re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import fused_helpers as t

    def ops(fn):
        src = ASTSource(fn=fn, signature=dict(g_ptr="*fp32", e_ptr="*fp32"), constexprs={})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=1)).asm["ptx"]
        seq = [re.sub(r"%\w+", "%r", l.strip()) for l in ptx.splitlines()
               if re.match(r"\s*(neg|sub|add|mul|fma|min|max|ex2)[.a-z0-9]*\s", l) and ".f32" in l]
        return seq[:seq.index(next(l for l in seq if l.startswith("ex2"))) + 1]

    print(json.dumps(dict(new=ops(t._new_exp_kernel), old=ops(t._old_exp_kernel))))
    """
)


@pytest.mark.skipif(triton is None, reason="Triton is not installed here")
def test_sm90_exp_reduction_is_the_previous_kernels():
    """The FP instructions of exp's reduction up to ex2, compiled for sm_90: the previous
    kernel's on v = -g, FMA contraction included (t = fma(v, log2 e, 1.5 * 2**23) before the
    rint subtraction, two FMAs for r), written on g: the constants' signs flipped, no
    negation of g, the clamp [-89, 80] on g for [-104, 89] on v. Rounding to nearest is odd,
    so every value is the old one or its negation, which the next instruction's flipped
    constant turns back: ex2's argument is the old one. On the GPU that and the exhaustive
    test make the product bit-identical to the previous kernel's."""
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        import triton.backends.nvidia  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this triton has no NVIDIA backend to compile with ({exc})")
    here = Path(__file__).resolve().parent  # this module (the script imports it), tests/ (helpers), the repository
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(here.parents[1]), str(here.parent), str(here)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    run = subprocess.run([sys.executable, "-c", _EXP_PTX_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"offline sm_90 compilation failed:\n{run.stderr[-4000:]}"
    seqs = json.loads(run.stdout.splitlines()[-1])
    new, old = ([" ".join(line.split()) for line in seqs[k]] for k in ("new", "old"))
    # -log2 e, ln2 hi, ln2 lo against the old signs
    flipped = {"0fBFB8AA3B": "0f3FB8AA3B", "0f3F317200": "0fBF317200", "0f35BFBE8E": "0fB5BFBE8E"}

    def flip(line):
        for a, b in flipped.items():
            line = line.replace(a, b)
        return line

    assert new[:2] == ["min.f32 %r, %r, 0f42A00000;", "max.f32 %r, %r, 0fC2B20000;"], seqs  # 80, -89: no negation
    assert [flip(line) for line in new[2:]] == old[-6:], seqs
    assert old[-6] == "fma.rn.f32 %r, %r, 0f3FB8AA3B, 0f4B400000;" and old[-1].startswith("ex2.approx.ftz.f32"), seqs
