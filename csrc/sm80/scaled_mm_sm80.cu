// Entry of the sm80 int8 scaled matmul (torch-free): checks the params, picks
// a config (the M ladder or config_id) and calls that config's launcher. The
// config table lives here, and only here: see ConfigId in
// scaled_mm_sm80_configs.cuh.
#include <stdexcept>
#include <string>

#include "scaled_mm_sm80.h"
#include "scaled_mm_sm80_configs.cuh"

namespace w8a8 {
namespace {

using sm80::ScaledMmSm80Launcher;

struct ConfigEntry {
  sm80::ConfigId id;
  const char* name;
  size_t (*workspace_size[2])(const ScaledMmSm80Params&);  // [out dtype]
  void (*run[2])(const ScaledMmSm80Params&, void*, cudaStream_t);
};

// Launcher: ScaledMmSm80Launcher (data-parallel) or ScaledMmSm80SplitKLauncher.
template <class Config, template <class, class> class Launcher = sm80::ScaledMmSm80Launcher>
constexpr ConfigEntry entry(sm80::ConfigId id, const char* name) {
  using Bf16 = Launcher<Config, cutlass::bfloat16_t>;
  using Fp16 = Launcher<Config, cutlass::half_t>;
  static_assert(int(ScaledMmOutDtype::kBFloat16) == 0 && int(ScaledMmOutDtype::kFloat16) == 1);
  return ConfigEntry{id, name, {&Bf16::workspace_size, &Fp16::workspace_size}, {&Bf16::run, &Fp16::run}};
}

// Names: tile M x N x K, warp tile, stages.
constexpr ConfigEntry kConfigs[] = {
    entry<sm80::Sm80Int8M16>(sm80::kM16, "16x64x128_w16x64x64_s5"),
    entry<sm80::Sm80Int8M32>(sm80::kM32, "32x64x128_w32x64x64_s5"),
    entry<sm80::Sm80Int8M64>(sm80::kM64, "64x128x128_w64x64x64_s4"),
    entry<sm80::Sm80Int8M128>(sm80::kM128, "128x128x64_w64x64x64_s5"),
    entry<sm80::Sm80Int8Large>(sm80::kLarge, "128x256x64_w64x64x64_s4"),
    entry<sm80::Sm80Int8M96>(sm80::kM96, "96x128x64_w48x64x64_s5"),
    entry<sm80::Sm80Int8M80>(sm80::kM80, "80x128x128_w80x32x128_s3"),
    entry<sm80::Sm80Int8M96SplitK, sm80::ScaledMmSm80SplitKLauncher>(sm80::kM96SplitK, "96x128x64_w48x64x64_s5_splitk"),
};

constexpr bool table_matches_ids() {
  if (sizeof(kConfigs) / sizeof(kConfigs[0]) != sm80::kNumConfigs) return false;
  for (int i = 0; i < sm80::kNumConfigs; ++i) {
    if (kConfigs[i].id != i) return false;
  }
  return true;
}
static_assert(table_matches_ids(), "kConfigs must list every ConfigId once, in id order");

[[noreturn]] void fail(const std::string& message) { throw std::runtime_error("scaled_mm_sm80: " + message); }

// The binding checks the same rules with the op's wording first; these keep
// non-torch callers from launching on shapes the kernels cannot serve.
const ConfigEntry& checked_config(const ScaledMmSm80Params& p) {
  const std::string problem_error = scaled_mm_problem_error(p);
  if (!problem_error.empty()) fail(problem_error);
  if (p.sm_count <= 0) fail("expected sm_count > 0, got " + std::to_string(p.sm_count));
  if (p.config_id < -1 || p.config_id >= sm80::kNumConfigs) {
    fail("expected config_id in [-1, " + std::to_string(sm80::kNumConfigs - 1) + "], got " +
         std::to_string(p.config_id));
  }
  const int id = p.config_id >= 0 ? p.config_id : sm80::select_config(p.m, p.n, p.k, {p.sm_count, p.shared_memory_per_sm});
  return kConfigs[id];
}

}  // namespace

int scaled_mm_sm80_num_configs() { return sm80::kNumConfigs; }

const char* scaled_mm_sm80_config_name(int config_id) {
  return config_id >= 0 && config_id < sm80::kNumConfigs ? kConfigs[config_id].name : nullptr;
}

int scaled_mm_sm80_heuristic_config(int64_t m, int64_t n, int64_t k, int sm_count, int shared_memory_per_sm) {
  return sm80::select_config(m, n, k, {sm_count, shared_memory_per_sm});
}

size_t scaled_mm_sm80_workspace_size(const ScaledMmSm80Params& params) {
  const ConfigEntry& config = checked_config(params);
  try {
    return config.workspace_size[int(params.out_dtype)](params);
  } catch (const std::exception& e) {
    fail(std::string("config ") + config.name + ": " + e.what());
  }
}

void scaled_mm_sm80(const ScaledMmSm80Params& params, void* workspace, cudaStream_t stream) {
  const ConfigEntry& config = checked_config(params);
  if (workspace == nullptr) {
    const size_t needed = scaled_mm_sm80_workspace_size(params);
    if (needed != 0) fail("expected a workspace for this config, got null (needs " + std::to_string(needed) + " bytes)");
  }
  try {
    config.run[int(params.out_dtype)](params, workspace, stream);
  } catch (const std::exception& e) {
    fail(std::string("config ") + config.name + ": " + e.what());
  }
}

}  // namespace w8a8
