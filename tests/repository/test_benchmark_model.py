"""The model suite (benchmarks/model.py) on the CPU: a tiny transformers Llama, bf16 vs W8A8.

Timings are not asserted (CPU wall times mean nothing); the rows' structure, the W8A8
last hidden state against bf16's, the kernel-name buckets and the bound arithmetic are.
"""
import json

import pytest

pytest.importorskip("transformers")

from benchmarks import model  # noqa: E402
from benchmarks.__main__ import main as benchmarks_main  # noqa: E402


def test_model_suite_on_cpu(tmp_path, capsys):
    assert benchmarks_main(["--device", "cpu", "--suites", "model", "--m", "1,3", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "model_cpu.json").read_text())
    assert doc["kind"] == "model" and doc["size"] == "tiny" and doc["layers"] == 2 and doc["ceilings"] == {}
    rows = doc["rows"]
    assert sorted((r["impl"], r["mode"], r["M"]) for r in rows) == sorted(
        (impl, mode, m) for impl in ("bf16", "w8a8", "w8a8-unfused") for mode in ("eager", "compile", "reduce-overhead") for m in (1, 3))
    for r in rows:
        if r["mode"] != "eager":  # not run on the CPU, and the row says so
            assert "not run on the CPU" in r["skipped"] and "us" not in r
            continue
        assert r["wall_us"] > 0 and r["us"] == r["wall_us"] and r["timing"].startswith("wall")
        assert r["gpu_us"] is None and r["quant_share"] is None
        if r["impl"] == "w8a8":
            assert r["x_bf16"] > 0 and r["x_bf16_wall"] > 0 and r["bound_x"] is None and r["pct_of_bound"] is None
            assert r["bound_note"] == "no CUDA kernels profiled"
            # per-token / per-channel int8 through 2 layers: ~1% of the last hidden state here; 5% would mean a broken layer
            assert 0 < r["out_rel_err"] < 0.05
    out = capsys.readouterr().out
    assert "| tokens | mode | impl | bf16 GPU ms | w8a8 GPU ms | x bf16 GPU | bf16 wall ms |" in out
    assert "| 3 | eager | w8a8 |" in out


# Kernel names as the profiler reports them on the H100 (written from the sources and
# cuBLAS / PyTorch naming; the GPU run's "unmatched" list is the check on this table).
NAMES = {
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
    "cutlass::gemm::collective::CollectiveMma<..., signed char, ..., cutlass::epilogue::fusion::"
    "Sm90Compute<w8a8::DequantizeFn, float, float> > > >(...)": "gemm_w8a8",
    "void w8a8::(anonymous namespace)::scaled_mm_gemv_kernel<4>(w8a8::decode::DecodeArgs)": "gemm_w8a8",
    "void w8a8::(anonymous namespace)::scaled_mm_skinny_kernel<2>(w8a8::decode::DecodeArgs)": "gemm_w8a8",
    "_scaled_mm_kernel": "gemm_w8a8",
    "void w8a8::split_k_dequant_kernel(w8a8::ScaledMmProblem, int const*, int)": "gemm_w8a8",
    "void w8a8::(anonymous namespace)::quantize_per_token_kernel<__nv_bfloat16, 8>(...)": "quant",
    "void w8a8::(anonymous namespace)::quantize_static_kernel<__nv_bfloat16>(...)": "quant",
    "_quantize_per_token_kernel": "quant",
    "_rms_norm_quant_kernel": "fused_quant",
    "_silu_mul_quant_kernel": "fused_quant",
    # what the H100's profiler reports for our sm90 kernels: the GMMA atom names the int8 operands
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
    "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, ...>, "
    "cute::TiledMMA<cute::MMA_Atom<cute::SM90::GMMA::MMA_64x128x32_S32S8S8_SS_TN> ...": "gemm_w8a8",
    "_per_token_row_stats_kernel": "quant",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas":
        "gemm_bf16",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT": "gemm_bf16",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(...)": "gemm_bf16",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(...)": "gemm_bf16",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t> >(...)": "other",
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)": "other",
    "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0": "other",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0": "other",
    "triton_poi_fused_mul_silu_1": "other",
    "triton_poi_fused_embedding_rms_norm_quant_0": "other",  # Inductor's, named after the op its output feeds
    "triton_poi_fused_silu_mul_quant_3": "other",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, ...>(...)": "other",
    "Memcpy DtoD (Device -> Device)": "other",
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_kernel_buckets(name):
    assert model.classify(name) == NAMES[name]


def test_breakdown_sums_buckets_and_lists_unmatched():
    kernels = {"nvjet_tst_128x256": (600.0, 7), "_scaled_mm_kernel": (200.0, 4), "_quantize_per_token_kernel": (50.0, 2),
               "triton_poi_fused_mul_silu_1": (100.0, 1), "mystery_kernel": (50.0, 1)}
    row = model.breakdown(kernels)
    assert row["gpu_us"] == 1000.0 and row["kernels_per_forward"] == 15
    assert (row["quant_launches"], row["fused_quant_launches"], row["gemm_w8a8_launches"]) == (2, 0, 4)
    assert (row["gemm_bf16_us"], row["gemm_w8a8_us"], row["quant_us"], row["other_us"]) == (600.0, 200.0, 50.0, 150.0)
    assert row["gemm_us"] == 800.0 and row["quant_share"] == 0.05 and row["unmatched"] == ["mystery_kernel"]


def test_bound_excludes_the_gemms_both_models_run_in_bf16():
    import torch

    # bf16: 800 us of GEMMs of which 100 stay bf16 in the W8A8 run (a layer it keeps in float): G_proj = 700.
    bf16 = {"us": 1000.0, "gpu_us": 1000.0, "wall_us": 3000.0, "gemm_bf16_us": 800.0, "gemm_w8a8_us": 0.0}
    w8a8 = {"us": 700.0, "gpu_us": 700.0, "wall_us": 2000.0, "gemm_bf16_us": 100.0, "gemm_w8a8_us": 350.0}
    hidden = torch.ones(4, 8)
    out = model.compare(bf16, w8a8, hidden * 1.01, hidden)
    # bound_time = 1000 - 700 / 2 = 650; bound x = 1000 / 650; reached 1000 / 700.
    assert out["proj_gemm_bf16_us"] == 700.0 and out["bound_us"] == 650.0
    assert out["bound_x"] == pytest.approx(1000 / 650, abs=1e-3) and out["x_bf16"] == pytest.approx(1000 / 700, abs=1e-3)
    assert out["pct_of_bound"] == pytest.approx(100 * 650 / 700, abs=0.1)
    assert out["out_rel_err"] == pytest.approx(0.01, abs=1e-4) and out["bound_note"] is None
    assert out["x_bf16_wall"] == 1.5
    # No w8a8 GEMM recognised: the subtraction would be wrong, so no bound.
    out = model.compare(bf16, {**w8a8, "gemm_w8a8_us": 0.0}, hidden, hidden)
    assert out["bound_x"] is None and "no w8a8 GEMM kernel matched" in out["bound_note"]
