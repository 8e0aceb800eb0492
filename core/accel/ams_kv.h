// AMS-KV (ams-kv.txt, Algorithm 1 and 2, "AMS-KV: Adaptive Multi-Scale KV Caching"): a
// per-layer KV-cache eviction policy that bounds the keys and values each layer holds.
//
// Units: budgets count tokens of one sequence (|C_i| in the paper), the same for every batch
// row and head; a token holds one key and one value per head. The condensed scales are counted
// in scales (C_cds = 2: the 1x1 and 2x2 maps, 5 tokens).
//
// Per layer, after each step's keys and values were appended (hook on_kv_append):
//   Every layer starts cache-efficient with budget C_bgt = C_min.
//   - A scale with more than C_max tokens is not kept at all (Alg. 1 line 5).
//   - If the cache now exceeds C_bgt: a layer still at C_min is promoted to cache-demanding
//     (C_bgt = C_max) when the similarity S(k_i, up(k_{i-1})) < θ (line 10, Eq. 3); then a scale
//     larger than C_bgt is not kept (line 13), otherwise CLRU trims the cache to C_bgt (line 16).
//   - CLRU (Alg. 2): keep the tokens of the condensed scales, then the C_bgt - |condensed| most
//     recent tokens, evicting the oldest others (token granularity, so a scale may be kept in
//     part, its most recent rows).
//   The current scale's attention then sees only the kept keys (the loop reads the cache after
//   the hook), as in the paper, where the cache update precedes the attention.
//
// Decisions where the paper leaves room:
//   - Similarity: S = -mean((k_i - up(k_{i-1}))^2) over batch, heads, tokens and channels, with
//     keys L2-normalised per head (skipped for models that normalise their keys already, such as
//     VAR with attn_l2_norm: there it would change nothing but the cost).
//     The paper writes -||k_i - k^_{i-1}||_2 but its thresholds (θ in [-0.01, -0.007], App. E)
//     only make sense for a per-element mean: for unit keys of 64 channels this distance is
//     (2 - 2 cos)/64, about 0.008 at cos 0.75. up() is bilinear 2D interpolation of the
//     (pn_{i-1} x pn_{i-1}) key map to pn_i x pn_i (align_corners false), computed on the fly
//     by a fused CUDA kernel (kernels/cuda/scale_similarity.cu) on CUDA devices.
//   - The similarity needs complete key maps of both scales; a scale pruned by another policy
//     (fewer keys than pn*pn) gives no similarity and the layer is not promoted at that step.
//     When the previous scale's keys would not survive the eviction and the layer may still be
//     promoted, a copy of them is kept until the next step (never with the paper's budgets).
//   - Defaults (0 = auto) follow the paper's experiments: C_max = the last two scales plus the
//     condensed scales, C_min = the penultimate scale plus the condensed scales (430 and 174
//     tokens on the 10-scale 256px schedule).
//   - key_tile (not in the paper; 0 = off, the paper's budgets): rounds both budgets up to a
//     multiple of the attention kernel's key tile. cuDNN's SDPA on Hopper takes a ~15-18 %
//     slower path when the key count is not a multiple of 128: at VAR-d30 1024^2 every
//     cache-efficient layer attends to the paper's C_min = 2,309 keys from scale 9 on, which
//     costs more than 2,432 keys (bench/results/2026-12-01-h200/session42/). Keeping 123 more
//     recent tokens is the faster setting (preset "ams_kv-tile128").
//   - Grouped steps (LazyVAR) append several scales at once; they are handled as one unit and
//     its keys are always kept (the grouped step's attention mask needs them); only older
//     tokens are evicted.
//   - The budget is bounded only when C_max is below the schedule's total tokens; then the loop
//     uses the compact KV cache (memory follows the budget). Otherwise nothing is ever evicted
//     and the baseline's preallocated cache is used, so the tokens equal the baseline's.
//   - Storage: each layer's compact buffer is allocated once per image at C_min tokens and
//     written in place; at its first eviction it becomes a ring (KvCache::set_window): the
//     condensed tokens stay, new tokens overwrite the oldest others, which is CLRU without
//     copying any kept token. A promotion to C_max widens the ring (one copy of the kept
//     tokens). The similarity reads the previous scale's keys where they lie, in two pieces where
//     the ring wrapped inside them (KvCache::key_pieces; a copy that cost 10 ms per image batch
//     of 16 at 1024², bench/results/2026-12-01-h200/session40/). The decision to promote needs S on
//     the host: one device sync per layer and step while the layer is still cache-efficient and
//     over C_min (scales 7-9 of the 256px schedule).
//   - Memory accounting (App. D, Eq. 4): what each layer retains after the last scale, against
//     every scale in every layer for the baseline (res.kv_bytes); res.kv_bytes_peak is the most
//     held after any step. With the paper's budgets both are C_min / total for cache-efficient
//     layers (174 / 680 = 25.6 % on the 256px schedule) and C_max / total (63.2 %) for
//     cache-demanding ones, so 25.6 % is the floor of the 256px schedule at these budgets.
//     These count live tokens. What is allocated (KvCache::allocated_bytes): every layer's
//     buffer of C_min slots from the first scale on; a promoted layer replaces it by one of
//     C_max slots (both exist during the copy); a layer that drops a scale larger than its
//     budget or takes a grouped step over its budget is rebuilt at the size it keeps.
//   - CUDA graphs (SamplingHooks::graph_signature): the promotion is decided on the host from
//     S, and it changes the current scale's attention inputs (the ring's width), so a step in
//     which some layer may be promoted (still cache-efficient, and the step's rows take it over
//     C_min) cannot be captured exactly. The steps before the first such step (the same scale
//     on every call: the bookkeeping before it depends only on the budgets and the layout) are
//     captured and replayed; that step and the rest run eagerly on the graphs' cache
//     (ScaleContext::graphable). With the paper's budgets the eager steps are scales 7-9 of
//     the 10-scale 256px schedule and 9-12 of the 13-scale 1024px one (1, 2, 4, ..., 48, 64);
//     with c_max <= c_min, or budgets that never overflow (off), every step is a graph. The eager
//     steps do exactly what the eager run does, from the same cache state, so the tokens are the
//     eager ones. Memory: the graphed steps' buffers (every layer's C_min slots, and anything
//     rebuilt before the first eager step) live in the graphs' memory pool for as long as the
//     graphs do, also between calls and while a promoted layer's C_max buffer (allocated eagerly,
//     freed after the call) replaces its C_min one; the eager form frees a replaced buffer at once.
//
// Probe records (method "ams_kv", see core/accel/probe_kinds.h), one per scale after the step
// that decoded it (all layers done), only when probe->wants_accel("ams_kv", kind):
//   "kv_bytes":         int64 (layers), bytes of keys + values each layer holds.
//                       values: {"total": sum of the tensor}.
//   "kv_occupancy":     int64 (layers x scales), tokens each layer holds from each source scale.
//   "ams_kv_demanding": bool (layers), true = cache-demanding (budget C_max).
//                       values: {"theta": θ, "c_min": C_min, "c_max": C_max,
//                                "similarity.<layer>": S of that layer at this step, where it
//                                could be measured}.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/accel/param_spec.h"
#include "core/sampling/hooks.h"
#include "core/sampling/probes.h"
#include "kernels/attention_dispatch.h"

namespace varscope {

struct AmsKvConfig {
    bool enabled = false;
    int64_t c_cds = 2;      // C_cds: condensed scales, always kept
    int64_t c_min = 0;      // C_min: budget of cache-efficient layers in tokens; 0 = paper default
    int64_t c_max = 0;      // C_max: budget of cache-demanding layers in tokens; 0 = paper default
    double theta = -0.008;  // θ: similarity below which a layer is cache-demanding
    int64_t key_tile = 0;   // both budgets rounded up to a multiple of this (0, 1 = as given)

    static const MethodSpec& spec();
    static AmsKvConfig from_json(const nlohmann::json& j);
    nlohmann::json to_json() const;
};

// The budgets in effect on a model (auto values resolved).
struct AmsKvBudgets {
    int64_t c_cds = 0;       // condensed scales
    int64_t cds_tokens = 0;  // their tokens
    int64_t c_min = 0, c_max = 0;
    bool bounded = false;  // C_max below the schedule's total tokens: eviction can happen
};

// Throws AccelConfigError naming the field when the setting does not fit the model.
AmsKvBudgets resolve_ams_kv_budgets(const AmsKvConfig& cfg, const VarConfig& model);

std::shared_ptr<SamplingHooks> make_ams_kv(const AmsKvConfig& cfg, const VarConfig& model,
                                           ProbeSink* probe);

namespace ams_kv {
// CLRU (Alg. 2): token ranges {start, length} to keep of a cache of `length` tokens whose first
// `condensed` tokens are condensed, within `budget`; at least the last `keep_tail` tokens stay.
std::vector<std::pair<int64_t, int64_t>> clru_ranges(int64_t length, int64_t condensed,
                                                     int64_t budget, int64_t keep_tail = 0);
// -mean((k_cur - up(k_prev))^2) over every element; k_prev (R, H, pp*pp, c), k_cur
// (R, H, pc*pc, c); with `normalize` the keys are first L2-normalised per head (in float).
// up() is bilinear (align_corners false, no antialiasing). D = sum (k_cur - up(k_prev))^2 comes
// from kernels::scale_sq_distance (kernels/scale_similarity.h): on CUDA a fused kernel that
// reads each key once and interpolates on the fly (float32 accumulation, float64 block sums),
// elsewhere the Gram-matrix reference (two batched GEMMs in the keys' precision). Only the
// result syncs the device. The hook passes path Reference where
// ExecPolicy::ams_kv_reference_similarity (VARSCOPE_AMS_KV_SIMILARITY=reference) asks for it, and
// the run's kernel policy (its reference switch selects the reference too).
double similarity(const at::Tensor& k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                  int64_t pn_cur, bool normalize = true,
                  kernels::KernelPath path = kernels::KernelPath::Auto,
                  const kernels::KernelPolicy& policy = {});
// The same with k_prev in pieces along the tokens (a rolling cache's ring that wrapped), read
// where they lie on CUDA (KvCache::key_pieces).
double similarity(at::TensorList k_prev, int64_t pn_prev, const at::Tensor& k_cur, int64_t pn_cur,
                  bool normalize = true, kernels::KernelPath path = kernels::KernelPath::Auto,
                  const kernels::KernelPolicy& policy = {});
// The (pc^2, pp^2) bilinear upsampling matrix of a pp x pp map to pc x pc (row-major tokens).
at::Tensor upsample_weights(int64_t pn_prev, int64_t pn_cur, const at::TensorOptions& options);
}  // namespace ams_kv

}  // namespace varscope
