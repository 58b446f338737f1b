// Entry of the sm90 int8 scaled matmul (torch-free): checks the params it is
// given, picks a config (the M ladder or config_id) and calls that config's
// launcher. The config table lives here, and only here: see ConfigId in
// scaled_mm_sm90_configs.cuh.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "scaled_mm_gemv.h"
#include "scaled_mm_skinny.h"
#include "scaled_mm_sm90.h"
#include "scaled_mm_sm90_configs.cuh"

namespace w8a8 {
namespace {

using sm90::ConfigId;
using sm90::Decomposition;
using sm90::Raster;
using sm90::SchedulerOptions;
using sm90::ScaledMmSm90Launcher;

struct ConfigEntry {
  ConfigId id;
  const char* name;
  bool stream_k;  // runs CUTLASS's stream-K scheduler, so it can split K
  bool gemv;      // a decode kernel (the dp4a GEMV or the skinny GEMM, not CUTLASS): plain stores, no
                  // workspace, options.splits is its K split inside the CTA
  size_t (*workspace_size[2])(const ScaledMmSm90Params&, const SchedulerOptions&);  // [out dtype]
  void (*run[2])(const ScaledMmSm90Params&, const SchedulerOptions&, void*, cudaStream_t);
  SchedulerOptions options;
};

template <class Config>
constexpr ConfigEntry entry(ConfigId id, const char* name, SchedulerOptions options) {
  using Bf16 = ScaledMmSm90Launcher<Config, cutlass::bfloat16_t>;
  using Fp16 = ScaledMmSm90Launcher<Config, cutlass::half_t>;
  static_assert(int(ScaledMmOutDtype::kBFloat16) == 0 && int(ScaledMmOutDtype::kFloat16) == 1);
  constexpr bool stream_k = std::is_same_v<typename Config::TileScheduler, cutlass::gemm::StreamKScheduler>;
  return ConfigEntry{id, name, stream_k, false, {&Bf16::workspace_size, &Fp16::workspace_size},
                     {&Bf16::run, &Fp16::run}, options};
}

size_t no_workspace(const ScaledMmSm90Params&, const SchedulerOptions&) { return 0; }

void gemv_run(const ScaledMmSm90Params& params, const SchedulerOptions& options, void*, cudaStream_t stream) {
  scaled_mm_gemv(params, options.splits, stream);
}

void skinny_run(const ScaledMmSm90Params& params, const SchedulerOptions& options, void*, cudaStream_t stream) {
  scaled_mm_skinny(params, options.splits, stream);
}

template <void (*kRun)(const ScaledMmSm90Params&, const SchedulerOptions&, void*, cudaStream_t)>
constexpr ConfigEntry decode_entry(ConfigId id, const char* name) {
  return ConfigEntry{id, name, false, true, {&no_workspace, &no_workspace}, {kRun, kRun},
                     {1, Raster::kHeuristic, Decomposition::kDataParallel, sm90::decode_kernel_splits(id)}};
}

// Scheduler options: {max swizzle, raster order, decomposition, splits}.
constexpr ConfigEntry kConfigs[] = {
    entry<sm90::Sm90Int8SwapN16>(sm90::kSwapN16StreamK, "swap_128x16x128_1x1_coop_streamk",
                                 {1, Raster::kHeuristic, Decomposition::kHeuristic, 1}),
    entry<sm90::Sm90Int8SwapN64>(sm90::kSwapN64StreamK, "swap_128x64x128_1x1_coop_streamk",
                                 {1, Raster::kHeuristic, Decomposition::kHeuristic, 1}),
    entry<sm90::Sm90Int8M128>(sm90::kM128Pingpong, "64x128x128_2x1_pingpong_swz8",
                              {8, Raster::kHeuristic, Decomposition::kHeuristic, 1}),
    entry<sm90::Sm90Int8M256>(sm90::kM256Pingpong, "128x128x128_2x1_pingpong_swz8",
                              {8, Raster::kHeuristic, Decomposition::kHeuristic, 1}),
    entry<sm90::Sm90Int8Large128x256>(sm90::kLarge128x256, "128x256x128_2x1_coop_swz8_rasterN",
                                      {8, Raster::kAlongN, Decomposition::kHeuristic, 1}),
    entry<sm90::Sm90Int8Large256x128>(sm90::kLarge256x128, "256x128x128_1x2_coop_swz8_rasterM",
                                      {8, Raster::kAlongM, Decomposition::kHeuristic, 1}),
    entry<sm90::Sm90Int8SwapN16>(sm90::kSwapN16DataParallel, "swap_128x16x128_1x1_coop_dataparallel",
                                 {1, Raster::kHeuristic, Decomposition::kDataParallel, 1}),
    entry<sm90::Sm90Int8SwapN64>(sm90::kSwapN64DataParallel, "swap_128x64x128_1x1_coop_dataparallel",
                                 {1, Raster::kHeuristic, Decomposition::kDataParallel, 1}),
    entry<sm90::Sm90Int8Large128x256>(sm90::kLarge128x256RasterM, "128x256x128_2x1_coop_swz8_rasterM",
                                      {8, Raster::kAlongM, Decomposition::kHeuristic, 1}),
    entry<sm90::Sm90Int8SwapN16>(sm90::kSwapN16ForceStreamK, "swap_128x16x128_1x1_coop_streamk_forced",
                                 {1, Raster::kHeuristic, Decomposition::kStreamK, 1}),
    entry<sm90::Sm90Int8SwapN64>(sm90::kSwapN64ForceStreamK, "swap_128x64x128_1x1_coop_streamk_forced",
                                 {1, Raster::kHeuristic, Decomposition::kStreamK, 1}),
    entry<sm90::Sm90Int8Coop128x128StreamK>(sm90::kCoop128x128StreamK, "128x128x128_1x1_coop_streamk",
                                            {1, Raster::kHeuristic, Decomposition::kDataParallel, 1}),
    decode_entry<&gemv_run>(sm90::kGemvSplit1, "gemv_dp4a_ksplit1"),
    decode_entry<&gemv_run>(sm90::kGemvSplit2, "gemv_dp4a_ksplit2"),
    decode_entry<&gemv_run>(sm90::kGemvSplit4, "gemv_dp4a_ksplit4"),
    decode_entry<&gemv_run>(sm90::kGemvSplit8, "gemv_dp4a_ksplit8"),
    decode_entry<&skinny_run>(sm90::kSkinnySplit1, "skinny_mma_ksplit1"),
    decode_entry<&skinny_run>(sm90::kSkinnySplit2, "skinny_mma_ksplit2"),
    decode_entry<&skinny_run>(sm90::kSkinnySplit4, "skinny_mma_ksplit4"),
    decode_entry<&skinny_run>(sm90::kSkinnySplit8, "skinny_mma_ksplit8"),
};

constexpr bool table_matches_ids() {
  if (sizeof(kConfigs) / sizeof(kConfigs[0]) != sm90::kNumConfigs) return false;
  for (int i = 0; i < sm90::kNumConfigs; ++i) {
    if (kConfigs[i].id != i) return false;
  }
  return true;
}
static_assert(table_matches_ids(), "kConfigs must list every ConfigId once, in id order");

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error("scaled_mm_sm90: " + message);
}

// `what` and `actual` are callables building the message only when `ok` is
// false: the checks run on every call, the strings are for the failures.
template <class What, class Actual>
void require(bool ok, What&& what, Actual&& actual) {
  if (!ok) fail("expected " + std::string(what()) + ", got " + std::string(actual()));
}

// The binding checks the same rules with the op's wording first; these keep
// non-torch callers from launching on shapes the kernels cannot serve.
void check_params(const ScaledMmSm90Params& p) {
  const std::string problem_error = scaled_mm_problem_error(p);
  if (!problem_error.empty()) fail(problem_error);
  require(p.config_id >= -1 && p.config_id < sm90::kNumConfigs,
          [] { return "config_id in [-1, " + std::to_string(sm90::kNumConfigs - 1) + "]"; },
          [&] { return std::to_string(p.config_id); });
  require(p.sm_count > 0, [] { return "sm_count > 0"; }, [&] { return std::to_string(p.sm_count); });
  require(p.scheduler == ScaledMmScheduler::kAuto || p.scheduler == ScaledMmScheduler::kPersistent ||
              p.scheduler == ScaledMmScheduler::kStreamK,
          [] { return "scheduler auto, persistent or streamk"; }, [&] { return std::to_string(int(p.scheduler)); });
  const int64_t k_tiles = (p.k + 127) / 128;
  require(p.split_k >= 0 && p.split_k <= k_tiles,
          [&] { return "split_k in [1, " + std::to_string(k_tiles) + "] (the number of 128-wide K tiles) or 0"; },
          [&] { return std::to_string(p.split_k); });
  require(p.split_k <= 1 || p.scheduler == ScaledMmScheduler::kAuto,
          [] { return "split_k > 1 only with scheduler auto (persistent never splits; streamk balances by itself)"; },
          [&] {
            return "split_k=" + std::to_string(p.split_k) + " with scheduler " +
                   (p.scheduler == ScaledMmScheduler::kPersistent ? "persistent" : "streamk");
          });
}

const char* decomposition_name(Decomposition d) {
  switch (d) {
    case Decomposition::kDataParallel: return "data_parallel";
    case Decomposition::kSplitK: return "split_k";
    case Decomposition::kStreamK: return "stream_k";
    default: return "heuristic";
  }
}

struct Plan {
  const ConfigEntry* config;
  SchedulerOptions options;
};

// The config and K decomposition a call runs:
//   config_id -1, scheduler auto, split_k 0: sm90::plan_auto (GEMV, skinny GEMM, then the ladder);
//   split_k > 1 or scheduler streamk: the requested decomposition on config_id
//     (which must run the stream-K scheduler) or on sm90::split_capable_config(M);
//   split_k 1 or scheduler persistent: data-parallel, config_id or the ladder's pick;
//   config_id >= 0 alone: that entry as the table defines it.
Plan plan(const ScaledMmSm90Params& p) {
  const bool split = p.split_k > 1 || p.scheduler == ScaledMmScheduler::kStreamK;
  const bool no_split = p.split_k == 1 || p.scheduler == ScaledMmScheduler::kPersistent;
  if (p.config_id < 0 && !split && !no_split) {
    const ConfigEntry& config = kConfigs[sm90::plan_auto(p.m, p.n, p.sm_count)];
    return {&config, config.options};
  }
  int id = p.config_id >= 0 ? p.config_id : sm90::select_config(p.m, p.n);
  if (split && p.config_id < 0 && !kConfigs[id].stream_k) id = sm90::split_capable_config(p.m);
  const ConfigEntry& config = kConfigs[id];
  SchedulerOptions options = config.options;
  if (split) {
    require(config.stream_k,
            [] { return "a stream-K-scheduler config for split_k > 1 or scheduler streamk (config_id -1 picks one)"; },
            [&] {
              return std::string("config ") + config.name +
                     (config.gemv ? ", a decode kernel whose K split is fixed by its config id"
                                  : ", which uses the persistent scheduler");
            });
    options.decomposition = p.split_k > 1 ? Decomposition::kSplitK : Decomposition::kStreamK;
    options.splits = p.split_k > 1 ? p.split_k : 1;
  } else if (no_split && (config.stream_k || config.gemv)) {
    options.decomposition = Decomposition::kDataParallel;
    options.splits = 1;
  }
  return {&config, options};
}

}  // namespace

int scaled_mm_sm90_num_configs() { return sm90::kNumConfigs; }

const char* scaled_mm_sm90_config_name(int config_id) {
  return config_id >= 0 && config_id < sm90::kNumConfigs ? kConfigs[config_id].name : nullptr;
}

int scaled_mm_sm90_heuristic_config(int64_t m, int64_t n) { return sm90::select_config(m, n); }

ScaledMmSm90Plan scaled_mm_sm90_plan(const ScaledMmSm90Params& params) {
  check_params(params);
  const Plan chosen = plan(params);
  const ConfigEntry& config = *chosen.config;
  if (config.gemv) {  // the K split inside the CTA, reduced in a fixed order like split-K
    const int k_split = chosen.options.splits;
    return {int(config.id), k_split > 1 ? "split_k" : "data_parallel", k_split};
  }
  const bool splits_k = config.stream_k && chosen.options.decomposition != Decomposition::kDataParallel;
  return {int(config.id), config.stream_k ? decomposition_name(chosen.options.decomposition) : "data_parallel",
          splits_k ? chosen.options.splits : 1};
}

size_t scaled_mm_sm90_workspace_size(const ScaledMmSm90Params& params) {
  check_params(params);
  const Plan chosen = plan(params);
  const ConfigEntry& config = *chosen.config;
  try {
    return config.workspace_size[int(params.out_dtype)](params, chosen.options);
  } catch (const std::exception& e) {
    fail(std::string("config ") + config.name + ": " + e.what());
  }
}

void scaled_mm_sm90(const ScaledMmSm90Params& params, void* workspace, cudaStream_t stream) {
  check_params(params);
  const Plan chosen = plan(params);
  const ConfigEntry& config = *chosen.config;
  try {
    if (workspace == nullptr) {
      const size_t needed = config.workspace_size[int(params.out_dtype)](params, chosen.options);
      require(needed == 0, [] { return "a workspace for this config"; },
              [&] { return "null (needs " + std::to_string(needed) + " bytes)"; });
    }
    config.run[int(params.out_dtype)](params, chosen.options, workspace, stream);
  } catch (const std::exception& e) {
    fail(std::string("config ") + config.name + ": " + e.what());
  }
}

}  // namespace w8a8
