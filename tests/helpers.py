"""The shared test toolkit: operand builders, the exact reference calls, ulp helpers,
output poisoning, CUDA-graph capture, THE tolerance table, the kernel lists for
parametrization (built from ``w8a8.dispatch``) and the capability skip markers.

Every test file takes these from here; none keeps a copy.
"""
from __future__ import annotations

import glob
import os
import shutil

import pytest
import torch

from w8a8 import dispatch, reference
from benchmarks.harness import capture_graph  # noqa: F401  (one capture recipe for tests and benchmarks)

CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

# --- the tolerance table (stated once) -----------------------------------------------------------
# Every kernel against the exact reference, in ulp of the output dtype: 0, i.e. bit-exact.
# The epilogue is the reference's fp32 expression, rounded once per operation and never
# contracted into an FMA (csrc/common/scaled_mm_dequant.cuh, csrc/sm90/scaled_mm_sm90_epilogue.cuh,
# w8a8/triton/scaled_mm.py), the int32 accumulation is exact, and the quantizers give the IEEE
# quotients (reference.py: a division rounded to nearest, or arithmetic proven to equal it).
KERNEL_ULP = {torch.bfloat16: 0, torch.float16: 0, torch.float32: 0}
# The one exception: Triton's CPU interpreter (tests only, never a product path) converts
# fp32 to a 16-bit output with numpy, which does not round to nearest even for bf16: up to
# 1 ulp there. On a GPU the same kernel is bit-exact (KERNEL_ULP).
INTERPRETER_ULP = {torch.bfloat16: 1, torch.float16: 1, torch.float32: 0}


def max_ulp(backend: str, device, dtype: torch.dtype) -> int:
    """The table entry for a kernel's output on a device."""
    if backend == "triton" and torch.device(device).type == "cpu":
        return INTERPRETER_ULP[dtype]
    return KERNEL_ULP[dtype]
# W8A8Linear against its float nn.Linear: relative L2 error, by activation dtype. This is
# the cost of int8 rounding of weights and activations (~0.5-1.5% on Gaussian data);
# bf16's own 8-bit mantissa adds ~0.4%.
LINEAR_REL_TOL = {torch.float32: 0.025, torch.float16: 0.025, torch.bfloat16: 0.03}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


# --- operand builders ------------------------------------------------------------------------------


def rand_int8(*shape, device="cpu") -> torch.Tensor:
    """Uniform over the full int8 range; with >= 2 elements both -128 and 127 are present."""
    t = torch.randint(-128, 128, shape, dtype=torch.int8, device=device)
    if t.numel() >= 2:
        t.view(-1)[0] = -128
        t.view(-1)[-1] = 127
    return t


def rand_scale(*shape, device="cpu") -> torch.Tensor:
    """Positive float32 scales spread over two decades."""
    return (torch.rand(shape, device=device) * 2 - 1).exp2_().mul_(1e-3).float() * 10 ** torch.rand(
        shape, device=device
    ).float()


def rows_with_spread(r: int, k: int, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """Gaussian rows, each with its own magnitude over ~8 decades, cast to dtype."""
    mag = torch.exp2(torch.empty(r, 1, device=device).uniform_(-14, 12))
    return (torch.randn(r, k, device=device) * mag).to(dtype)


def plant_special_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows 0..4 (those that exist) become: zero, one NaN, +Inf, -Inf, Inf and NaN."""
    x = x.clone()
    k = x.shape[-1]
    rows = x.view(-1, k)
    specials = [None, [float("nan")], [float("inf")], [float("-inf")], [float("inf"), float("nan")]]
    for i, vals in enumerate(specials[: rows.shape[0]]):
        if vals is None:
            rows[i] = 0
        else:
            for j, v in enumerate(vals):
                rows[i, (j * 7 + i) % k] = v
    return x


def mm_operands(m, n, k, device="cpu", per_token=True, per_channel=True, bias_dtype=torch.float32, a_pad=0):
    """(a, b, a_scale, b_scale, bias) for scaled_mm. ``a_pad`` > 0: ``a`` is a view of a
    wider [m, k + a_pad] tensor (row stride k + a_pad, strides kept, never rebuilt)."""
    a = rand_int8(m, k + a_pad, device=device)[:, :k]
    b = rand_int8(n, k, device=device)
    sa = rand_scale(m, 1, device=device) if per_token else rand_scale(1, device=device)
    sb = rand_scale(n, device=device) if per_channel else rand_scale(1, device=device)
    bias = None if bias_dtype is None else (torch.randn(n, device=device) * 4).to(bias_dtype)
    return a, b, sa, sb, bias


# --- the exact reference ---------------------------------------------------------------------------


def _cpu(t):
    return t.cpu() if isinstance(t, torch.Tensor) else t


def ref_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype) -> torch.Tensor:
    """The exact reference, on the operands' device (exact on any device: float64 holds
    every int32 partial sum, and the epilogue is elementwise ops rounded once each)."""
    return reference.scaled_mm(a, b, a_scale, b_scale, bias, out_dtype)


def ref_linear(layer, x: torch.Tensor) -> torch.Tensor:
    """W8A8Linear's definition (quantize, then scaled_mm with the folded bias), on the CPU."""
    x = x.cpu()
    x2 = x.reshape(-1, layer.in_features)
    if layer.act_quant == "dynamic":
        q, s = reference.quantize_per_token(x2)
    else:
        s = layer.input_scale.cpu()
        q = reference.quantize_static(x2, s, _cpu(layer.input_zero_point))
    out = reference.scaled_mm(q, layer.weight.cpu(), s, layer.weight_scale.cpu(), _cpu(layer.folded_bias()), x.dtype)
    return out.reshape(*x.shape[:-1], layer.out_features)


# --- ulp and exactness ------------------------------------------------------------------------------


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """Floats mapped to integers ordered like the floats (sign-magnitude to two's complement)."""
    int_dtype = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[t.dtype]
    bits = t.contiguous().view(int_dtype).long()
    sign_bit = 1 << (torch.iinfo(int_dtype).bits - 1)
    return torch.where(bits < 0, -(bits + sign_bit), bits)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance in units in the last place of a's dtype (+0 and -0: 0; NaNs separately)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    return (_ordered(a) - _ordered(b)).abs()


def assert_ulp_close(out: torch.Tensor, ref: torch.Tensor, max_ulp: int | None = None) -> None:
    """Every element within ``max_ulp`` (default: ``KERNEL_ULP`` of the dtype, 0) of the
    reference; NaN exactly where the reference is NaN; Inf only where it is the same Inf."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    max_ulp = KERNEL_ULP[out.dtype] if max_ulp is None else max_ulp
    out, ref = out.cpu(), ref.cpu()
    nan_out, nan_ref = out.isnan(), ref.isnan()
    assert torch.equal(nan_out, nan_ref), f"NaN mismatch at {(nan_out != nan_ref).nonzero()[:5].tolist()}"
    d = ulp_distance(out.masked_fill(nan_out, 0), ref.masked_fill(nan_ref, 0))
    worst = int(d.max()) if d.numel() else 0
    if worst > max_ulp:
        idx = tuple(int(i) for i in (d == worst).nonzero()[0])
        raise AssertionError(
            f"{int((d > max_ulp).sum())} of {d.numel()} elements differ by more than {max_ulp} ulp; "
            f"worst {worst} ulp at {idx}: got {out[idx].item()}, expected {ref[idx].item()}"
        )


def assert_exact(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Bit for bit, NaN where the reference is NaN (torch.equal treats NaN != NaN)."""
    assert_ulp_close(out, ref, max_ulp=0)


def assert_same_codes(got, expected) -> None:
    """quantize_per_token results: int8 codes equal, fp32 scales equal bit for bit (any NaN)."""
    q, s = got
    rq, rs = expected
    assert q.dtype == torch.int8 and q.shape == rq.shape, (q.dtype, q.shape, rq.shape)
    assert torch.equal(q.cpu(), rq.cpu()), f"{int((q.cpu() != rq.cpu()).sum())} of {q.numel()} codes differ"
    assert s.dtype == torch.float32 and s.shape == rs.shape, (s.dtype, s.shape, rs.shape)
    s, rs = s.cpu(), rs.cpu()
    assert torch.equal(s.isnan(), rs.isnan()), "NaN scales differ"
    assert torch.equal(s.nan_to_num(0).view(torch.int32), rs.nan_to_num(0).view(torch.int32)), "scales differ"


# --- poisoning -------------------------------------------------------------------------------------


def poison(shape, dtype, device) -> torch.Tensor:
    """A NaN-filled tensor: anything a kernel forgets to write stays NaN."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def poison_allocator(nbytes: int, device) -> None:
    """Fill the memory the next allocations will likely reuse with 0xFF bytes (NaN in bf16/fp16/fp32;
    -1 in int8). The ops allocate their outputs; on CUDA the caching allocator hands the freed
    block back to the next request of a similar size, so an unwritten element reads NaN."""
    blocks = [torch.full((max(nbytes, 1),), 0xFF, dtype=torch.uint8, device=device) for _ in range(4)]
    del blocks


# --- kernels and capabilities ----------------------------------------------------------------------


def _device_9_0() -> bool:
    return CUDA and torch.cuda.get_device_capability() == (9, 0)


SM90 = _device_9_0() and dispatch.load("_C")[0]
SM80 = CUDA and dispatch.load("_C_sm80")[0] and (torch.cuda.get_device_capability()[0] == 8 or _device_9_0())
requires_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
requires_sm90 = pytest.mark.skipif(not SM90, reason="needs an sm_90 GPU and w8a8._C built")
requires_sm80 = pytest.mark.skipif(not SM80, reason="needs w8a8._C_sm80 built and an sm_8x / sm_90 GPU")


def available(op: str, backend: str, device) -> bool:
    return dispatch.unavailable_reason(op, backend, torch.device(device)) is None


def kernels(op: str, device) -> list[str]:
    """The kernels of ``op`` that run on ``device`` here (``linear``: its GEMM kernels)."""
    op = "scaled_mm" if op == "linear" else op
    return [b for b in dispatch.BACKENDS[op] if available(op, b, device)]


def kernel_params(op: str, devices=("cpu", "cuda")) -> list:
    """pytest params ``(device, backend)`` for every kernel of ``op``: those that run here, and
    on a machine without a GPU the CUDA ones too, collected and skipped (never dropped)."""
    op = "scaled_mm" if op == "linear" else op
    params = []
    for device in devices:
        for b in dispatch.BACKENDS[op]:
            if device == "cpu" and b not in ("reference", "triton"):
                continue  # CUDA-only kernels have no CPU variant
            if device == "cuda" and not CUDA:
                params.append(pytest.param(device, b, id=f"{device}-{b}", marks=pytest.mark.skip(reason="needs a CUDA GPU")))
                continue
            reason = dispatch.unavailable_reason(op, b, torch.device(device))
            marks = [pytest.mark.skip(reason=f"{b} on {device}: {reason}")] if reason else []
            params.append(pytest.param(device, b, id=f"{device}-{b}", marks=marks))
    return params


def call_scaled_mm(backend, a, b, sa, sb, bias, out_dtype):
    """A scaled_mm kernel by name (its op, or the validated reference)."""
    return dispatch.kernel("scaled_mm", backend)(a, b, sa, sb, bias, out_dtype)


def cuobjdump() -> str | None:
    """The cuobjdump binary (CUDA toolkit, or the one Triton ships), or None."""
    found = shutil.which("cuobjdump") or next(iter(glob.glob("/usr/local/cuda*/bin/cuobjdump")), None)
    if found is None:
        import triton

        found = next(iter(glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))), None)
    return found


# --- small models and folders for the checkpoint tests -----------------------------------------


class Tiny(torch.nn.Module):
    """Two quantizable Linears (one without bias) and a float lm_head."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 48)
        self.fc2 = torch.nn.Linear(48, 16, bias=False)
        self.lm_head = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.lm_head(self.fc2(torch.relu(self.fc1(x))))


def module_snapshot(model):
    """(a copy of the state dict, each submodule's class): what a refused load must leave as it was."""
    return {k: v.clone() for k, v in model.state_dict().items()}, {n: type(m) for n, m in model.named_modules()}


def assert_untouched(model, before):
    """``model`` holds the tensors and submodule classes of ``before`` (a ``module_snapshot``), bit for bit."""
    tensors, types = before
    assert {n: type(m) for n, m in model.named_modules()} == types
    after = model.state_dict()
    assert set(after) == set(tensors)
    assert all(torch.equal(after[k], tensors[k]) for k in tensors)


def sentence_transformers_folder(tmp_path):
    """A synthetic sentence-transformers folder: BERT weights, tokenizer files, modules.json,
    1_Pooling/ (no download). Returns (the BertModel, the folder)."""
    import json

    import transformers

    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=100)
    bert = transformers.BertModel(cfg).eval()
    src = tmp_path / "st"
    bert.save_pretrained(src)
    (src / "vocab.txt").write_text("\n".join(f"tok{i}" for i in range(100)))
    (src / "chat_template.jinja").write_text("{{ messages }}")
    (src / "added_tokens.json").write_text("{}")
    (src / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))
    (src / "1_Pooling").mkdir()
    (src / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                               "pooling_mode_mean_tokens": True}))
    return bert, str(src)



def hf_cache_layout(folder, cache, repo="org--model", revision="0123456789abcdef"):
    """``folder`` laid out as a Hugging Face cache snapshot: every file moved to ``blobs/`` under a
    content name and linked back relatively (``snapshots/REV/x -> ../../blobs/SHA``), as
    ``huggingface_hub`` downloads it. Returns the snapshot folder."""
    import hashlib

    root = os.path.join(os.fspath(cache), f"models--{repo}")
    snapshot = os.path.join(root, "snapshots", revision)
    blobs = os.path.join(root, "blobs")
    os.makedirs(blobs, exist_ok=True)
    for dirpath, _, files in os.walk(folder):
        rel = os.path.relpath(dirpath, folder)
        for name in files:
            data = open(os.path.join(dirpath, name), "rb").read()
            blob = os.path.join(blobs, hashlib.sha256(data).hexdigest())
            with open(blob, "wb") as f:
                f.write(data)
            link_dir = os.path.normpath(os.path.join(snapshot, rel))
            os.makedirs(link_dir, exist_ok=True)
            os.symlink(os.path.relpath(blob, link_dir), os.path.join(link_dir, name))
    return snapshot


# Every 16-bit value under a row max, for each significand of the type as that max, at these
# exponents: the quantizers' 16-bit arithmetic is the same at every exponent while the scale
# stays >= 2^-100 (csrc/quantize/quantize_per_token.cuh, kMinCorrectedDivisor); bf16 maxima past
# that edge (127 * 2^-100 ~ 2^-93) divide (CUDA) or are scaled by 2^64 (Triton), and below
# 2^-119 the scale is an fp32 subnormal. fp16 scales never reach the edge.
EVERY_VALUE_EXPONENTS = {torch.bfloat16: (-133, -126, -100, -94, -93, -92, -60, -1, 0, 1, 60, 127),
                         torch.float16: (-20, -14, 0, 15)}
SIGNIFICAND_BITS = {torch.bfloat16: 7, torch.float16: 10}  # stored, past the leading one


def every_16bit_value(dtype) -> torch.Tensor:
    """The finite values of a 16-bit float type, ascending, as float32."""
    values = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype).float()
    return values[values.isfinite()].unique()


def every_value_rows(dtype, exponents) -> torch.Tensor:
    """One row per (significand, exponent) max: the max, then every value of the type of no
    larger magnitude down to max / 512 (smaller ones have quotients under 0.25: code 0 by any
    arithmetic), then the max repeated to the common length. (numpy: a few thousand slices of
    one sorted array, where torch's small ops would each go through its thread pool.)"""
    import numpy as np

    magnitudes = every_16bit_value(dtype).numpy()
    magnitudes = magnitudes[magnitudes > 0]
    bits = SIGNIFICAND_BITS[dtype]
    maxima = torch.tensor([2.0**e * (1 + s / (1 << bits)) for e in exponents for s in range(1 << bits)])
    maxima = np.unique(maxima.to(dtype).float().numpy())  # a subnormal max rounds onto its neighbour
    maxima = maxima[(maxima > 0) & np.isfinite(maxima)]
    rows = []
    for amax in maxima:
        kept = magnitudes[np.searchsorted(magnitudes, amax / 512):np.searchsorted(magnitudes, amax, side="right")]
        rows.append(np.concatenate([[amax], kept, -kept]))
    k = -(-max(r.size for r in rows) // 8) * 8
    return torch.from_numpy(np.stack([np.pad(r, (0, k - r.size), constant_values=r[0]) for r in rows])).to(dtype)
