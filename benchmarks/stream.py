"""The read ceiling of the serving regime: how fast any kernel in stream order can read one
layer's int8 weights, beside bf16 F.linear and the sm90 GEMM in the same run.

    python -m benchmarks.stream --out benchmarks/results/stream_h100.json

At M <= 128 the int8 GEMM's time is the time to read its weights, so the fastest kernel that
does nothing but read those bytes, timed the way the GEMM is (CUDA-graph replays of one
call per rotated weight copy, > 3x L2), bounds every GEMM: its time over bf16 F.linear's is
the largest speed-up any int8 kernel can show at that point. Read kernels tried (compiled at
run time with torch's extension loader; GPU only):

* a vectorised grid-stride read (16-byte loads, UNROLL loads in flight per thread) over a
  range of block sizes and blocks per SM, each launched three ways: plain stream order;
  programmatic (the next kernel may start as soon as every block of this one has started,
  and the reads wait for nothing: what a GEMM's weight loads could do at best); and
  programmatic with a wait before the reads (the launch overlaps, the reads do not);
* the same launch with no reads (the cadence of launches in a graph);
* torch's bf16 ``sum`` over the bytes (the reduction behind the run's HBM read rate).

Rows: every read variant (us, GB/s, % of the run's HBM read rate), then per M the bf16 and
sm90 GEMM rows (``harness.gemm_row``) and a ``ceiling`` row: the best read's time and its
ratio to bf16's.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import w8a8
from benchmarks import harness

M_POINTS = (16, 64, 128)
# (threads per block, blocks per SM, 16-byte loads in flight per thread): 2048 threads per
# SM at most; more loads in flight per thread, or fewer, larger blocks.
READ_SHAPES = ((256, 8, 4), (512, 4, 4), (512, 4, 8), (1024, 2, 4), (1024, 2, 8), (512, 2, 8), (1024, 1, 16))
LAUNCH_MODES = {0: "stream order", 2: "programmatic, wait first", 1: "programmatic, no wait"}

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

// 16 bytes, read-only path, no L1 allocation; volatile so that all UNROLL loads issue before any use.
__device__ __forceinline__ int4 load16(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <int UNROLL>
__global__ void read_kernel(const int4* __restrict__ src, long long n_vec, int* __restrict__ sink, int mode) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (mode != 0) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (mode == 2) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  int acc = 0;
  for (; i + (UNROLL - 1) * stride < n_vec; i += UNROLL * stride) {
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = load16(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n_vec; i += stride) {
    const int4 v = load16(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7eadbeef) sink[0] = acc;  // keeps the loads; never taken on random data in practice
}

void read_bytes(torch::Tensor src, torch::Tensor sink, int64_t threads, int64_t blocks, int64_t unroll, int64_t mode) {
  TORCH_CHECK(src.is_cuda() && src.is_contiguous() && src.numel() * src.element_size() % 16 == 0,
              "read_bytes: a contiguous CUDA tensor of a multiple of 16 bytes");
  const long long n_vec = src.numel() * src.element_size() / 16;
  const int4* p = reinterpret_cast<const int4*>(src.data_ptr());
  int* s = sink.data_ptr<int>();
  int m = static_cast<int>(mode);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.stream = at::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = mode != 0 ? 1 : 0;
  cudaError_t err;
  switch (unroll) {
    case 4: err = cudaLaunchKernelEx(&cfg, read_kernel<4>, p, n_vec, s, m); break;
    case 8: err = cudaLaunchKernelEx(&cfg, read_kernel<8>, p, n_vec, s, m); break;
    case 16: err = cudaLaunchKernelEx(&cfg, read_kernel<16>, p, n_vec, s, m); break;
    default: TORCH_CHECK(false, "read_bytes: unroll must be 4, 8 or 16, got ", unroll);
  }
  TORCH_CHECK(err == cudaSuccess, "read_bytes: launch failed: ", cudaGetErrorString(err));
}
"""


def _read_extension():
    from torch.utils import cpp_extension

    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}a" if major >= 9 else f"{major}{minor}"
    return cpp_extension.load_inline(
        name="w8a8_bench_stream_read", cpp_sources="void read_bytes(torch::Tensor src, torch::Tensor sink, "
        "int64_t threads, int64_t blocks, int64_t unroll, int64_t mode);", cuda_sources=_SOURCE,
        functions=["read_bytes"], extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"])


def bench_shape(n: int, k: int, ext, ceilings: dict, sms: int) -> list[dict]:
    n_sets = harness.rotation_count(2 * n * k)
    w_q = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda") for _ in range(n_sets)]
    w_s = [torch.rand(n, device="cuda") * 1e-3 + 1e-4 for _ in range(n_sets)]
    w_bf16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5 for _ in range(n_sets)]
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    empty = torch.empty(0, dtype=torch.int8, device="cuda")
    cases = {"torch bf16 sum": [lambda i=i: w_q[i].view(torch.bfloat16).sum() for i in range(n_sets)]}
    for mode in LAUNCH_MODES:
        cases[f"no reads, {sms} x 512, {LAUNCH_MODES[mode]}"] = [
            lambda mode=mode: ext.read_bytes(empty, sink, 512, sms, 4, mode)] * n_sets
        for threads, per_sm, unroll in READ_SHAPES:
            cases[f"read {threads} x {per_sm}/SM x {unroll}, {LAUNCH_MODES[mode]}"] = [
                lambda i=i, t=threads, b=per_sm * sms, u=unroll, mode=mode: ext.read_bytes(w_q[i], sink, t, b, u, mode)
                for i in range(n_sets)]
    gemm = {}
    for m in M_POINTS:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        a_q = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        a_s = torch.rand(m, 1, device="cuda") * 1e-2 + 1e-3
        gemm[m] = {"bf16 F.linear": ([lambda i=i, x=x: F.linear(x, w_bf16[i]) for i in range(n_sets)],
                                     2 * (m * k + n * k + m * n), "bf16_flops"),
                   "w8a8 sm90": ([lambda i=i, a=a_q, s=a_s: w8a8.ops.scaled_mm(a, w_q[i], s, w_s[i], None, torch.bfloat16)
                                  for i in range(n_sets)], m * k + n * k + 2 * m * n + 4 * (m + n), "int8_practical_ops")}
        for name, (calls, _, _) in gemm[m].items():
            cases[f"{name} M={m}"] = calls
    timings = harness.time_interleaved(cases, "cuda")
    rows, reads = [], {}
    for name, t in timings.items():
        if name.startswith(("read", "no reads", "torch")):
            moved = 0 if name.startswith("no reads") else n * k
            rows.append({"impl": name, "M": 0, "N": n, "K": k, "us": round(t.us, 3), "spread": round(t.spread, 4),
                         "gbps": round(moved / t.us / 1e3, 1),
                         "pct_hbm": round(100 * moved / (t.us * 1e-6) / ceilings["hbm_read_bytes_per_s"], 1)})
            if moved:
                reads[name] = t.us
    best = min(reads, key=reads.get)
    for m in M_POINTS:
        bf16_us = timings[f"bf16 F.linear M={m}"].us
        for name, (_, moved, peak) in gemm[m].items():
            rows.append(harness.gemm_row(name, m, n, k, timings[f"{name} M={m}"], moved, ceilings, bf16_us, peak))
        rows.append({"impl": "ceiling", "M": m, "N": n, "K": k, "read": best, "us": round(reads[best], 3),
                     "pct_hbm": round(100 * n * k / (reads[best] * 1e-6) / ceilings["hbm_read_bytes_per_s"], 1),
                     "x_bf16": round(bf16_us / reads[best], 3)})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in harness.DEFAULT_NK), help="NxK list")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.stream: needs a CUDA GPU (it times read kernels against the GEMMs)")
    ext = _read_extension()
    ceilings = harness.measure_ceilings()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        shape_rows = bench_shape(n, k, ext, ceilings, sms)
        rows += shape_rows
        reads = [r for r in shape_rows if r["M"] == 0]
        for r in sorted(reads, key=lambda r: r["us"])[:3] + [r for r in reads if r["impl"].startswith(("no", "torch"))]:
            print(f"{n:6d} x {k:6d}  {r['impl']:52s} {r['us']:8.2f} us {r['pct_hbm']:5.1f}% of HBM", flush=True)
        for r in (r for r in shape_rows if r["M"]):
            print(f"{n:6d} x {k:6d}  M={r['M']:4d} {r['impl']:20s} {r['us']:8.2f} us  x bf16 {r['x_bf16']}", flush=True)
    if args.out:
        harness.write_results(args.out, rows, ceilings, {"kind": "read ceiling"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
