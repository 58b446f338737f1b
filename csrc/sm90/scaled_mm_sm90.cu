// Entry of the sm90 int8 scaled matmul (torch-free): the config table, the
// plan (checks the params once, picks an entry and its scheduler options) and
// the calls into the picked entry's launcher. No kernels here: the CUTLASS
// configs are instantiated in the instance files setup.py generates, the decode
// kernels in decode/.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "decode/scaled_mm_gemv.h"
#include "decode/scaled_mm_skinny.h"
#include "sm90/scaled_mm_sm90.h"
#include "sm90/scaled_mm_sm90_configs.cuh"
#include "sm90/scaled_mm_sm90_heuristics.cuh"

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
  bool decode;    // a decode kernel (the dp4a GEMV or the skinny GEMM, not CUTLASS): plain stores, no
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

// A decode kernel with its K split (warps per weight row / 16-row group).
template <void (*kRun)(const ScaledMmSm90Params&, const SchedulerOptions&, void*, cudaStream_t)>
constexpr ConfigEntry decode_entry(ConfigId id, const char* name, int k_split) {
  return ConfigEntry{id, name, false, true, {&no_workspace, &no_workspace}, {kRun, kRun},
                     {1, Raster::kHeuristic, Decomposition::kDataParallel, k_split}};
}

// Scheduler options: {max swizzle, raster order, decomposition, splits}; the table names them.
constexpr SchedulerOptions kDefault = {1, Raster::kHeuristic, Decomposition::kHeuristic, 1};
constexpr SchedulerOptions kDataParallel = {1, Raster::kHeuristic, Decomposition::kDataParallel, 1};
[[maybe_unused]] constexpr SchedulerOptions kForcedStreamK = {1, Raster::kHeuristic, Decomposition::kStreamK, 1};
constexpr SchedulerOptions kSwizzle8 = {8, Raster::kHeuristic, Decomposition::kHeuristic, 1};
constexpr SchedulerOptions kSwizzle8RasterN = {8, Raster::kAlongN, Decomposition::kHeuristic, 1};
[[maybe_unused]] constexpr SchedulerOptions kSwizzle8RasterM = {8, Raster::kAlongM, Decomposition::kHeuristic, 1};
constexpr SchedulerOptions kRasterN = {1, Raster::kAlongN, Decomposition::kHeuristic, 1};

#define W8A8_SM90_ENTRY(id, name, Config, options) entry<sm90::Config>(sm90::id, name, options),
#define W8A8_SM90_DECODE_ENTRY(id, name, run, k_split) decode_entry<&run>(sm90::id, name, k_split),
// The table of scaled_mm_sm90_configs.cuh (W8A8_SM90_TABLE), in id order.
constexpr ConfigEntry kConfigs[] = {
    W8A8_SM90_TABLE(W8A8_SM90_ENTRY, W8A8_SM90_DECODE_ENTRY)
    W8A8_SM90_SWEEP_TABLE(W8A8_SM90_ENTRY, W8A8_SM90_DECODE_ENTRY)
};
#undef W8A8_SM90_ENTRY
#undef W8A8_SM90_DECODE_ENTRY

constexpr bool table_matches_ids() {
  if (sizeof(kConfigs) / sizeof(kConfigs[0]) != sm90::kNumConfigs) return false;
  for (int i = 0; i < sm90::kNumConfigs; ++i) {
    if (kConfigs[i].id != i) return false;
  }
  return true;
}
static_assert(table_matches_ids(), "kConfigs must list every ConfigId once, in id order");

// Invalid params: std::invalid_argument (the bindings raise it as ValueError).
[[noreturn]] void fail(const std::string& message) {
  throw std::invalid_argument("scaled_mm_sm90: " + message);
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
          [] { return "scheduler auto, persistent or stream_k"; }, [&] { return std::to_string(int(p.scheduler)); });
  const int64_t k_tiles = (p.k + 127) / 128;
  require(p.split_k >= 0 && p.split_k <= k_tiles,
          [&] { return "split_k in [1, " + std::to_string(k_tiles) + "] (the number of 128-wide K tiles) or 0"; },
          [&] { return std::to_string(p.split_k); });
  require(p.split_k <= 1 || p.scheduler == ScaledMmScheduler::kAuto,
          [] { return "split_k > 1 only with scheduler auto (persistent never splits; stream_k balances by itself)"; },
          [&] {
            return "split_k=" + std::to_string(p.split_k) + " with scheduler " +
                   (p.scheduler == ScaledMmScheduler::kPersistent ? "persistent" : "stream_k");
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

// The entry and scheduler options a call runs:
//   no config, scheduler auto, split_k 0: sm90::plan_auto (GEMV, skinny GEMM, then the ladder);
//   split_k > 1 or scheduler stream_k: the requested decomposition on the named entry (which must
//     run the stream-K scheduler) or on sm90::split_capable_config(M);
//   split_k 1 or scheduler persistent: data-parallel, on the named entry or the ladder's;
//   a named entry alone: that entry as the table defines it.
ScaledMmSm90Plan choose(const ScaledMmSm90Params& p) {
  const bool split = p.split_k > 1 || p.scheduler == ScaledMmScheduler::kStreamK;
  const bool no_split = p.split_k == 1 || p.scheduler == ScaledMmScheduler::kPersistent;
  int id = p.config_id;
  if (id < 0) {
    id = split      ? sm90::split_capable_config(p.m)
         : no_split ? sm90::select_config(p.m, p.n, p.k, p.sm_count)
                    : sm90::plan_auto(p.m, p.n, p.k, p.sm_count);
  }
  const ConfigEntry& config = kConfigs[id];
  SchedulerOptions options = config.options;
  if (split) {
    require(config.stream_k,
            [] { return "a stream-K-scheduler config for split_k > 1 or scheduler stream_k (config '' picks one)"; },
            [&] {
              return std::string("config ") + config.name +
                     (config.decode ? ", a decode kernel whose K split is part of its table entry"
                                    : ", which uses the persistent scheduler");
            });
    options.decomposition = p.split_k > 1 ? Decomposition::kSplitK : Decomposition::kStreamK;
    options.splits = p.split_k > 1 ? p.split_k : 1;
  } else if (no_split && (config.stream_k || config.decode)) {
    options.decomposition = Decomposition::kDataParallel;
    options.splits = 1;
  }

  ScaledMmSm90Plan plan;
  plan.config_id = id;
  plan.options = options;
  plan.config_name = config.name;
  plan.cutlass = !config.decode;
  if (config.decode) {  // the K split inside the CTA, reduced in a fixed order like split-K
    plan.decomposition = options.splits > 1 ? "split_k" : "data_parallel";
    plan.splits = options.splits;
  } else {
    const bool splits_k = config.stream_k && options.decomposition != Decomposition::kDataParallel;
    plan.decomposition = config.stream_k ? decomposition_name(options.decomposition) : "data_parallel";
    plan.splits = splits_k ? options.splits : 1;
    plan.needs_workspace = splits_k;
  }
  return plan;
}

// CUTLASS and launch failures: std::runtime_error naming the entry.
[[noreturn]] void rethrow(const ScaledMmSm90Plan& plan, const std::exception& e) {
  throw std::runtime_error(std::string("scaled_mm_sm90: config ") + plan.config_name + ": " + e.what());
}

}  // namespace

int scaled_mm_sm90_num_configs() { return sm90::kNumConfigs; }

const char* scaled_mm_sm90_config_name(int config_id) {
  return config_id >= 0 && config_id < sm90::kNumConfigs ? kConfigs[config_id].name : nullptr;
}

ScaledMmSm90Plan scaled_mm_sm90_plan(const ScaledMmSm90Params& params) {
  check_params(params);
  return choose(params);
}

size_t scaled_mm_sm90_workspace_size(const ScaledMmSm90Params& params, const ScaledMmSm90Plan& plan) {
  const ConfigEntry& config = kConfigs[plan.config_id];
  try {
    return config.workspace_size[int(params.out_dtype)](params, plan.options);
  } catch (const std::exception& e) {
    rethrow(plan, e);
  }
}

void scaled_mm_sm90(const ScaledMmSm90Params& params, const ScaledMmSm90Plan& plan, void* workspace,
                    cudaStream_t stream) {
  const ConfigEntry& config = kConfigs[plan.config_id];
  try {
    // Only a run that splits K can need a workspace; the others skip the query.
    if (workspace == nullptr && config.stream_k && plan.options.decomposition != Decomposition::kDataParallel) {
      const size_t needed = config.workspace_size[int(params.out_dtype)](params, plan.options);
      if (needed != 0) {
        throw std::runtime_error("expected a workspace of " + std::to_string(needed) + " bytes, got null");
      }
    }
    config.run[int(params.out_dtype)](params, plan.options, workspace, stream);
  } catch (const std::exception& e) {
    rethrow(plan, e);
  }
}

}  // namespace w8a8
