// The execution policy: every switch that picks how a run executes without changing what it
// computes (beyond rounding where a comment says so), in one value. The defaults are what the
// project measured fastest; the other settings exist to time or debug the difference.
//
// It travels explicitly: LoadOptions::exec -> the pipeline's sampler (VarSampler, MarSampler and
// its DiffusionSampler) -> the hooks through ScaleContext::exec -> the kernel dispatch calls
// (kernels::KernelPolicy). Nothing below app/ and ui/ reads the environment or keeps a switch of
// its own. The programs fill it from the VARSCOPE_* environment variables in one place
// (app/exec_env; docs/exec-policy.md lists them) and record it in every timings and metrics JSON
// they write (to_json).
//
// No LibTorch here: the Qt side of the app includes it.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "kernels/exec_policy.h"

namespace varscope {

struct ExecPolicy {
    // kernels/: the reference kernels, the sm_90a attention kernels, the DiffLoss kernels'
    // switches (kernels/exec_policy.h).
    kernels::KernelPolicy kernels;

    // MAR's DiffLoss head (DiffusionSampler, HeadPath::Auto):
    // the fused head kernels where they take the head and the rows (false: the module path).
    // VARSCOPE_MAR_FUSED_HEAD.
    bool mar_fused_head = true;
    // The most rows (2N with CFG) for which Auto picks the fused kernels; -1: by the head's
    // width (mar_fused_head_max_rows). VARSCOPE_MAR_FUSED_MAX_ROWS.
    int64_t mar_fused_max_rows = -1;
    // Where Auto falls back to the module path, the head MLP cache's reuse steps as
    // kernels::diff_cached_step's one kernel (MAR-B at 16 tokens 89.4 -> 55.3 us per diffusion
    // step, H200, bench/results/2026-11-26-h200/session9_mar.md). VARSCOPE_MAR_HYBRID_CACHED_STEP.
    bool mar_hybrid_cached_step = true;
    // Every step's AdaLN modulations in full, whatever the rows (by default only up to the fused
    // kernels' rows; beyond them only what each step uses). VARSCOPE_MAR_FULL_MODULATIONS.
    bool mar_full_modulations = false;

    // MAR's sampling loop with CUDA graphs (core/sampling/mar_cuda_graph.h):
    // hooks that have a graph signature run inside whole-step graphs (false: the transformer
    // stays eager and only the reverse diffusion is a graph). VARSCOPE_MAR_HOOK_GRAPHS.
    bool mar_hook_step_graphs = true;
    // The whole-step graphs share one memory pool (false: a pool per graph).
    // VARSCOPE_MAR_GRAPH_POOL.
    bool mar_chained_graph_pool = true;
    // The VAR and Infinity loops' per-scale step graphs share one memory pool (false: a pool per
    // step graph, 13 sets of intermediates at 1024^2). VARSCOPE_VAR_GRAPH_POOL.
    bool var_chained_graph_pool = true;

    // AMS-KV (core/accel/ams_kv.h): the scale similarity by its Gram-matrix reference instead of
    // the fused CUDA kernel. VARSCOPE_AMS_KV_SIMILARITY.
    bool ams_kv_reference_similarity = false;
    // AMS-KV prints where its eviction step's time went after every image (synchronising the
    // device around each part). VARSCOPE_PROFILE_AMS_KV.
    bool profile_ams_kv = false;

    // The most rows for which HeadPath::Auto picks the fused head kernels for a head of this
    // width: mar_fused_max_rows where set, else 16 up to width 1024 and 8 above (each CTA
    // normalises every row itself, so the fused kernels lose to cuBLAS GEMMs as rows grow:
    // bench/results/2026-11-25-h100/mar_fused.md).
    int64_t mar_fused_head_max_rows(int64_t width) const;

    bool operator==(const ExecPolicy& o) const;
    bool operator!=(const ExecPolicy& o) const { return !(*this == o); }
};

// The policy as a JSON object of every setting (keys as in docs/exec-policy.md: the variable
// names without VARSCOPE_, lower case; values true/false, a choice's name, a count or "auto").
nlohmann::json to_json(const ExecPolicy& p);
// The defaults with the settings `j` names (a subset of to_json's keys). Throws
// std::invalid_argument naming the key for an unknown key or a value of the wrong kind.
ExecPolicy exec_policy_from_json(const nlohmann::json& j);
// "defaults", or the settings that differ from them, e.g. "diff_pdl=false, mar_graph_pool=own".
std::string describe(const ExecPolicy& p);

}  // namespace varscope
