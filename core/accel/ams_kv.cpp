#include "core/accel/ams_kv.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/accel/probe_kinds.h"
#include "core/sampling/kv_cache.h"
#include "kernels/scale_similarity.h"

namespace varscope {
namespace {

constexpr const char* kMethod = "ams_kv";

// ExecPolicy::profile_ams_kv (VARSCOPE_PROFILE_AMS_KV=1): synchronise the device around each
// part of the eviction step and print where the time went at the end of every image
// (diagnostics for the GPU benchmark).
class PartTimer {
  public:
    void set_on(bool on) { on_ = on; }
    template <class Fn>
    auto time(int part, const at::Tensor& on_device, Fn&& fn) {
        if (!on_ || !on_device.defined()) return fn();
        const auto dev = on_device.device();
        sync(dev);
        const auto t0 = std::chrono::steady_clock::now();
        auto r = fn();
        sync(dev);
        const auto dt = std::chrono::steady_clock::now() - t0;
        ms_[part] += std::chrono::duration<double, std::milli>(dt).count();
        return r;
    }
    void report() {
        if (!on_) return;
        std::fprintf(stderr,
                     "ams_kv profile: similarity %.1f ms, stash %.1f ms, eviction %.1f ms\n",
                     ms_[0], ms_[1], ms_[2]);
        ms_[0] = ms_[1] = ms_[2] = 0;
    }

  private:
    static void sync(const at::Device& dev) {
        if (dev.is_cuda()) at::empty({1}, at::TensorOptions(dev)).cpu();  // waits for the stream
    }
    bool on_ = false;
    double ms_[3] = {0, 0, 0};
};
constexpr int64_t kBudgetLimit = 100000;
const double kNoSimilarity = std::numeric_limits<double>::quiet_NaN();

// Tokens of one source scale held contiguously in a layer's cache (in cache order).
struct Run {
    int64_t scale = 0;
    int64_t tokens = 0;
};

int64_t total(const std::vector<Run>& runs) {
    int64_t n = 0;
    for (const auto& r : runs) n += r.tokens;
    return n;
}

// The runs that remain after keeping `ranges` of a cache described by `runs`.
std::vector<Run> keep_runs(const std::vector<Run>& runs,
                           const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    std::vector<Run> out;
    int64_t offset = 0;
    for (const auto& r : runs) {
        for (const auto& [start, len] : ranges) {
            const int64_t lo = std::max(start, offset),
                          hi = std::min(start + len, offset + r.tokens);
            if (lo >= hi) continue;
            if (!out.empty() && out.back().scale == r.scale)
                out.back().tokens += hi - lo;
            else
                out.push_back({r.scale, hi - lo});
        }
        offset += r.tokens;
    }
    return out;
}

class AmsKv : public SamplingHooks {
  public:
    AmsKv(const AmsKvConfig& cfg, const AmsKvBudgets& budgets, const VarConfig& model,
          ProbeSink* probe)
        : cfg_(cfg),
          b_(budgets),
          patch_nums_(model.patch_nums),
          normalize_keys_(!model.attn_l2_norm),
          probe_(probe) {
        reset(model.depth);
    }

    bool compact_kv_cache(const VarConfig&) override { return b_.bounded; }
    // A bounded layer keeps at most its budget (C_max for a cache-demanding one) and takes the
    // step's new tokens on top before it evicts: at most the largest scale's. (A grouped step of
    // a stack with LazyVAR takes more scales at once: not counted here.)
    int64_t kv_tokens_bound(const VarConfig& config) override {
        const int64_t total = config.total_tokens();
        if (!b_.bounded) return total;
        const int64_t pn = config.patch_nums.back();
        return std::min(total, std::max(b_.c_min, b_.c_max) + pn * pn);
    }
    // A layer that is never promoted keeps at most C_min (a scale larger than its budget is
    // not kept at all): the whole cache when no layer's keys call for more. At 1024² that is
    // 22 % of the schedule's tokens, the bound above about 100 %.
    int64_t kv_tokens_least(const VarConfig& config) override {
        const int64_t total = config.total_tokens();
        return b_.bounded ? std::min(total, b_.c_min) : total;
    }

    // Graphs for the steps before the first one where a layer may be promoted (the promotion
    // needs S on the host); that step and the rest run eagerly (ScaleContext::graphable). The
    // probe records come from the block-level calls: eager. Without a compact cache the
    // promotions would need eager steps in a loop whose graphs cannot run them (Infinity): no
    // graphs there (only C_max >= the schedule's tokens > C_min, which never evicts a promoted
    // layer).
    std::optional<std::string> graph_signature(const VarConfig& config) override {
        for (const char* kind :
             {probe_kinds::kKvBytes, probe_kinds::kKvOccupancy, probe_kinds::kAmsKvDemanding})
            if (wants(kind)) return std::nullopt;
        if (!b_.bounded && promotion_possible() && b_.c_min < config.total_tokens())
            return std::nullopt;
        return "ams_kv:" + nlohmann::json{{"c_cds", b_.c_cds},
                                          {"c_min", b_.c_min},
                                          {"c_max", b_.c_max},
                                          {"theta", cfg_.theta}}
                               .dump();
    }

    void on_scale_begin(ScaleContext& ctx) override {
        if (ctx.step == 0) {  // a new image: every layer starts over
            reset(ctx.config.depth);
            through_ = -1;
            previous_graphable_ = true;
        }
        timer_.set_on(ctx.exec.profile_ams_kv);
        const int64_t si = ctx.scale;
        if (through_ == si - 1) {
            // The bookkeeping holds every earlier step: decide, and keep the decision and, at
            // the first eager step, the state for the calls that replay the graphed steps.
            graphable_ = previous_graphable_ && !ctx.exec.profile_ams_kv && !may_promote(ctx);
            auto& memo = replay_memo_[si];
            memo.graphable = graphable_;
            memo.layers.clear();
            if (!graphable_ && previous_graphable_) memo.layers = layers_;
        } else {
            // The earlier steps were graph replays (their block-level calls ran only when they
            // were captured, on an earlier call with this layout): take what was kept then.
            const auto it = replay_memo_.find(si);
            if (it == replay_memo_.end() || !previous_graphable_ ||
                (!it->second.graphable && it->second.layers.empty()))
                throw std::logic_error("ams_kv: no state of the graphed steps before scale " +
                                       std::to_string(si));
            graphable_ = it->second.graphable;
            if (!graphable_) {
                layers_ = it->second.layers;
                through_ = si - 1;
            }
        }
        previous_graphable_ = graphable_;
        if (!graphable_) ctx.graphable = false;  // never clears another hook's answer
    }

    void on_kv_append(const BlockContext& ctx) override {
        LayerState& st = layers_.at(ctx.layer);
        KvCache& cache = ctx.cache;
        const int64_t before = total(st.runs), now = cache.length(ctx.layer);
        if (now < before)
            throw std::logic_error("ams_kv: layer " + std::to_string(ctx.layer) +
                                   " lost KV tokens outside the policy");
        const auto added = attribute(ctx.scale, now - before);
        st.runs.insert(st.runs.end(), added.begin(), added.end());
        st.similarity = kNoSimilarity;
        const int64_t unit = now - before;
        const bool grouped = ctx.scale.segments.size() > 1;
        const bool promotable = !st.demanding && b_.c_max > b_.c_min;
        // A new image: one buffer of the layer's budget, written in place from now on.
        if (before == 0 && cache.is_compact()) cache.reserve(ctx.layer, st.budget);

        // Similarity of this step's (last) scale to the previous scale, before anything is
        // evicted; only when the algorithm needs it or the inspector asks.
        const bool over = now > st.budget;
        if (graphable_ && over && promotable && !added.empty())
            throw std::logic_error("ams_kv: layer " + std::to_string(ctx.layer) +
                                   " may be promoted in a step declared graphable");
        if (!added.empty() && ((over && promotable) || wants(probe_kinds::kAmsKvDemanding)))
            st.similarity = timer_.time(0, ctx.scale.f_hat, [&] {
                return measure_similarity(st, cache, ctx.layer, added.back().scale, ctx.scale.exec);
            });

        std::vector<std::pair<int64_t, int64_t>> keep;  // empty = keep everything
        if (!grouped && unit > b_.c_max) {
            keep = {{0, before}};  // Alg. 1 line 5: a scale larger than C_max is never cached
        } else if (over) {
            if (promotable && st.similarity < cfg_.theta) {  // NaN compares false
                st.budget = b_.c_max;                        // line 11: cache-demanding
                st.demanding = true;
                // The larger ring now (one copy of the kept tokens), so that the tokens the
                // budget keeps are never overwritten.
                if (cache.is_compact() && before <= st.budget)
                    cache.set_window(ctx.layer, condensed_tokens(st.runs),
                                     st.budget - condensed_tokens(st.runs));
            }
            if (!grouped && unit > st.budget)
                keep = {{0, before}};  // line 13-14: C_i = C_{i-1}
            else
                keep = ams_kv::clru_ranges(now, condensed_tokens(st.runs), st.budget,
                                           grouped ? unit : 0);
        }
        if (keep.size() == 1 && keep[0].first == 0 && keep[0].second == now) keep.clear();

        const at::Tensor& dev = ctx.scale.f_hat;
        timer_.time(1, dev, [&] {
            update_stash(st, cache, ctx, added, keep);
            return 0;
        });
        if (!keep.empty()) {
            timer_.time(2, dev, [&] {
                evict(st, cache, ctx.layer, keep, before, grouped);
                return 0;
            });
            st.runs = keep_runs(st.runs, keep);
        }
        if (ctx.layer + 1 == static_cast<int64_t>(layers_.size())) {
            through_ =
                ctx.scale.segments.empty() ? ctx.scale.scale : ctx.scale.segments.back().scale;
            emit(ctx);
        }
    }

    void on_scale_end(const ScaleContext&, const ScaleSegment& seg, const at::Tensor&,
                      const at::Tensor&) override {
        if (seg.scale + 1 == static_cast<int64_t>(patch_nums_.size())) {
            for (auto& st : layers_) st.stash = at::Tensor();  // nothing follows the last scale
            timer_.report();
        }
    }

  private:
    struct LayerState {
        std::vector<Run> runs;  // what the layer's cache holds, in order
        int64_t budget = 0;     // C_bgt
        bool demanding = false;
        double similarity = kNoSimilarity;  // measured at the current step
        at::Tensor stash;                   // keys of stash_scale, when evicted but still needed
        int64_t stash_scale = -1;
    };
    PartTimer timer_;

    bool promotion_possible() const { return b_.c_max > b_.c_min; }
    // Whether a layer may reach the promotion check in this step: it is still cache-efficient
    // and the step's rows (an upper bound of the keys each layer appends) take it over C_min.
    bool may_promote(const ScaleContext& ctx) const {
        if (!promotion_possible()) return false;
        const int64_t unit = ctx.packed_length();
        for (const auto& st : layers_)
            if (!st.demanding && total(st.runs) + unit > st.budget) return true;
        return false;
    }
    // CUDA graphs (graph_signature): the state of the steps' bookkeeping that the block-level
    // calls of graphed steps advance on the capturing call only.
    // The kept state holds no tensor: a stash is made only where a cache-efficient layer goes
    // over C_min (a scale over C_max does too, as C_max >= C_min), i.e. in eager steps; so it
    // is the same whichever call (graphed, eager, any batch) recorded it.
    struct ReplayMemo {
        bool graphable = true;
        std::vector<LayerState> layers;  // before the first eager step
    };
    std::map<int64_t, ReplayMemo> replay_memo_;  // by the step's first scale
    int64_t through_ = -1;  // last scale whose keys the bookkeeping (layers_) holds
    bool graphable_ = true, previous_graphable_ = true;

    // Applies `keep` to the layer's cache. CLRU of a single-scale step in the compact cache is a
    // ring: the condensed tokens stay put and the new tokens overwrite the oldest others when
    // the layer is read, so no kept token is copied. Grouped steps (whose queries need their own
    // keys last, in order) and layers over their budget take the general path (one rebuild).
    void evict(const LayerState& st, KvCache& cache, int64_t layer,
               const std::vector<std::pair<int64_t, int64_t>>& keep, int64_t before,
               bool grouped) const {
        const bool drop_new = keep.size() == 1 && keep[0].first == 0 && keep[0].second == before;
        if (!drop_new && !grouped && cache.is_compact() && before <= st.budget) {
            const int64_t pinned = condensed_tokens(st.runs);
            cache.set_window(layer, pinned, st.budget - pinned);
        } else {
            cache.retain(layer, keep);
        }
    }

    void reset(int64_t depth) {
        layers_.assign(static_cast<size_t>(depth), LayerState{});
        for (auto& st : layers_) st.budget = b_.c_min;  // Alg. 1 line 3: cache-efficient
    }

    bool wants(const char* kind) const { return probe_ && probe_->wants_accel(kMethod, kind); }
    int64_t tokens_of(int64_t scale) const { return patch_nums_[scale] * patch_nums_[scale]; }

    // Source scales of the `n` tokens this step appended. Without per-scale counts (a grouped
    // step whose rows another policy pruned inside the block) they count as the step's last scale.
    std::vector<Run> attribute(const ScaleContext& sc, int64_t n) const {
        if (n == 0) return {};
        if (sc.segments.empty()) return {{sc.scale, n}};
        if (sc.segments.size() == 1 || sc.packed_length() != n)
            return {{sc.segments.back().scale, n}};
        std::vector<Run> out;
        for (const auto& seg : sc.segments)
            if (seg.length() > 0) out.push_back({seg.scale, seg.length()});
        return out;
    }

    int64_t condensed_tokens(const std::vector<Run>& runs) const {
        int64_t n = 0;
        for (const auto& r : runs) {
            if (r.scale >= b_.c_cds) break;
            n += r.tokens;
        }
        return n;
    }

    // Start of the complete key map of `scale` in the cache, or -1.
    static int64_t complete_run_start(const std::vector<Run>& runs, int64_t scale, int64_t tokens) {
        int64_t offset = 0;
        for (const auto& r : runs) {
            if (r.scale == scale && r.tokens == tokens) return offset;
            offset += r.tokens;
        }
        return -1;
    }

    double measure_similarity(const LayerState& st, KvCache& cache, int64_t layer, int64_t scale,
                              const ExecPolicy& exec) const {
        if (scale == 0) return kNoSimilarity;
        const int64_t cur_start = complete_run_start(st.runs, scale, tokens_of(scale));
        if (cur_start < 0) return kNoSimilarity;
        // A ring that wrapped holds the previous scale in two pieces: read in place, no copy.
        std::vector<at::Tensor> prev;
        const int64_t prev_start = complete_run_start(st.runs, scale - 1, tokens_of(scale - 1));
        if (prev_start >= 0)
            prev = cache.key_pieces(layer, prev_start, tokens_of(scale - 1));
        else if (st.stash_scale == scale - 1 && st.stash.defined())
            prev = {st.stash};
        else
            return kNoSimilarity;
        const auto cur = cache.keys(layer, cur_start, tokens_of(scale));
        return ams_kv::similarity(prev, patch_nums_[scale - 1], cur, patch_nums_[scale],
                                  normalize_keys_,
                                  exec.ams_kv_reference_similarity ? kernels::KernelPath::Reference
                                                                   : kernels::KernelPath::Auto,
                                  exec.kernels);
    }

    // Keeps a copy of this step's keys when the eviction would drop them but the next scale's
    // promotion check still needs them.
    void update_stash(LayerState& st, KvCache& cache, const BlockContext& ctx,
                      const std::vector<Run>& added,
                      const std::vector<std::pair<int64_t, int64_t>>& keep) {
        st.stash = at::Tensor();
        st.stash_scale = -1;
        if (added.empty() || keep.empty() || st.demanding || b_.c_max <= b_.c_min) return;
        const int64_t scale = added.back().scale;
        if (scale + 1 >= static_cast<int64_t>(patch_nums_.size())) return;
        const int64_t start = complete_run_start(st.runs, scale, tokens_of(scale));
        if (start < 0) return;
        if (complete_run_start(keep_runs(st.runs, keep), scale, tokens_of(scale)) >= 0) return;
        st.stash = cache.keys(ctx.layer, start, tokens_of(scale)).clone();
        st.stash_scale = scale;
    }

    void emit(const BlockContext& ctx) {
        if (!probe_) return;
        const int64_t L = static_cast<int64_t>(layers_.size());
        const int64_t S = static_cast<int64_t>(patch_nums_.size());
        for (const auto& seg : ctx.scale.segments) {
            if (wants(probe_kinds::kKvBytes)) {
                auto bytes = at::empty({L}, at::kLong);
                int64_t sum = 0;
                // From the policy's bookkeeping: a rolling layer's cache drops the tokens it
                // evicts only when it is next read (the last layer's after this hook).
                for (int64_t l = 0; l < L; ++l) {
                    const int64_t b = total(layers_[l].runs) * ctx.cache.token_bytes();
                    bytes[l] = b;
                    sum += b;
                }
                AccelRecord r{kMethod, probe_kinds::kKvBytes, seg.scale, -1, bytes, {}};
                r.values["total"] = static_cast<double>(sum);
                probe_->on_accel(std::move(r));
            }
            if (wants(probe_kinds::kKvOccupancy)) {
                auto occ = at::zeros({L, S}, at::kLong);
                auto acc = occ.accessor<int64_t, 2>();
                for (int64_t l = 0; l < L; ++l)
                    for (const auto& r : layers_[l].runs) acc[l][r.scale] += r.tokens;
                probe_->on_accel({kMethod, probe_kinds::kKvOccupancy, seg.scale, -1, occ, {}});
            }
            if (wants(probe_kinds::kAmsKvDemanding)) {
                auto dem = at::zeros({L}, at::kBool);
                AccelRecord r{kMethod, probe_kinds::kAmsKvDemanding, seg.scale, -1, {}, {}};
                for (int64_t l = 0; l < L; ++l) {
                    dem[l] = layers_[l].demanding;
                    if (!std::isnan(layers_[l].similarity))
                        r.values["similarity." + std::to_string(l)] = layers_[l].similarity;
                }
                r.data = dem;
                r.values["theta"] = cfg_.theta;
                r.values["c_min"] = static_cast<double>(b_.c_min);
                r.values["c_max"] = static_cast<double>(b_.c_max);
                probe_->on_accel(std::move(r));
            }
        }
    }

    AmsKvConfig cfg_;
    AmsKvBudgets b_;
    std::vector<int64_t> patch_nums_;
    bool normalize_keys_;  // false when the model's keys are unit vectors per head already
    ProbeSink* probe_;
    std::vector<LayerState> layers_;
};

}  // namespace

namespace ams_kv {

std::vector<std::pair<int64_t, int64_t>> clru_ranges(int64_t length, int64_t condensed,
                                                     int64_t budget, int64_t keep_tail) {
    if (length <= budget) return {{0, length}};  // no rolling within the budget
    condensed = std::min(condensed, length);
    const int64_t tail = std::min(std::max(budget - condensed, keep_tail), length - condensed);
    std::vector<std::pair<int64_t, int64_t>> out;
    if (condensed > 0) out.push_back({0, condensed});
    if (tail > 0) out.push_back({length - tail, tail});
    return out;
}

at::Tensor upsample_weights(int64_t pn_prev, int64_t pn_cur, const at::TensorOptions& options) {
    return kernels::bilinear_upsample_weights(pn_prev, pn_cur, options);
}

double similarity(const at::Tensor& k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                  int64_t pn_cur, bool normalize, kernels::KernelPath path,
                  const kernels::KernelPolicy& policy) {
    return similarity(at::TensorList(k_prev), pn_prev, k_cur, pn_cur, normalize, path, policy);
}

double similarity(at::TensorList k_prev, int64_t pn_prev, const at::Tensor& k_cur, int64_t pn_cur,
                  bool normalize, kernels::KernelPath path, const kernels::KernelPolicy& policy) {
    // The fused CUDA kernel on CUDA devices (one pass over the keys, no GEMM; measured in
    // ams_kv_v3.md), the Gram-matrix reference elsewhere (kernels/scale_similarity.h).
    const double sq =
        kernels::scale_sq_distance(k_prev, pn_prev, k_cur, pn_cur, normalize, path, policy);
    const double n =
        static_cast<double>(k_cur.size(0) * k_cur.size(1) * k_cur.size(2) * k_cur.size(3));
    return -sq / n;
}

}  // namespace ams_kv

const MethodSpec& AmsKvConfig::spec() {
    static const MethodSpec s{
        "ams_kv",
        "AMS-KV",
        "ams-kv.txt Alg. 1-2, Eq. 3, App. E-F",
        "Bound each layer's KV cache: keep the condensed and the most recent scales; layers "
        "whose keys change most between scales get the larger budget.",
        {counting(
             {"c_cds", "Condensed scales", "C_cds",
              "First scales always kept in every layer's cache (paper: 2, the 1x1 and 2x2 maps).",
              ParamKind::Int, 0, 8, 2},
             ParamCount::Scales, -1),
         counting({"c_min", "Cache-efficient budget (tokens)", "C_min",
                   "Tokens a cache-efficient layer keeps. 0 = the paper's setting: the penultimate "
                   "scale plus the condensed scales (174 on the 10-scale 256px schedule).",
                   ParamKind::Int, 0, static_cast<double>(kBudgetLimit), 0},
                  ParamCount::Tokens, 0),
         counting(
             {"c_max", "Cache-demanding budget (tokens)", "C_max",
              "Tokens a cache-demanding layer keeps. 0 = the paper's setting: the last two scales "
              "plus the condensed scales (430 on the 10-scale 256px schedule). A budget of at "
              "least the schedule's total tokens for both never evicts (the baseline).",
              ParamKind::Int, 0, static_cast<double>(kBudgetLimit), 0},
             ParamCount::Tokens, 0),
         {"theta", "Similarity threshold", "θ",
          "A layer whose key similarity -mean((k_i - up(k_{i-1}))^2) falls below θ when its "
          "cache first overflows C_min becomes cache-demanding (paper: -0.008; stable in "
          "[-0.01, -0.007]).",
          ParamKind::Real, -1.0, 0.0, -0.008},
         {"key_tile", "Round budgets to a key tile (tokens)", "",
          "Not in the paper: C_min and C_max (given or the paper's) rounded up to a multiple of "
          "this many tokens; 0 or 1 = as they are. 128 matches cuDNN's key tile on Hopper, "
          "whose attention over a key count off that tile runs ~15 % slower (VAR-d30 1024^2: "
          "the paper's C_min 2,309 -> 2,432).",
          ParamKind::Int, 0, 4096, 0}}};
    return s;
}

AmsKvConfig AmsKvConfig::from_json(const nlohmann::json& j) {
    ParamReader r(j, spec());
    AmsKvConfig c;
    c.enabled = r.enabled();
    c.c_cds = r.get_int("c_cds");
    c.c_min = r.get_int("c_min");
    c.c_max = r.get_int("c_max");
    c.theta = r.get_real("theta");
    c.key_tile = r.get_int("key_tile");
    return c;
}

nlohmann::json AmsKvConfig::to_json() const {
    return {{"enabled", enabled}, {"c_cds", c_cds}, {"c_min", c_min},
            {"c_max", c_max},     {"theta", theta}, {"key_tile", key_tile}};
}

AmsKvBudgets resolve_ams_kv_budgets(const AmsKvConfig& cfg, const VarConfig& model) {
    const int64_t S = model.num_scales();
    const auto fail = [](const std::string& key, const std::string& msg) {
        throw AccelConfigError("ams_kv." + key + ": " + msg);
    };
    if (cfg.c_cds < 0 || cfg.c_cds >= S)
        fail("c_cds", "must be below the model's " + std::to_string(S) + " scales, got " +
                          std::to_string(cfg.c_cds));
    AmsKvBudgets b;
    b.c_cds = cfg.c_cds;
    b.cds_tokens = model.scale_begin(cfg.c_cds);
    const auto tokens = [&](int64_t si) { return model.patch_nums[si] * model.patch_nums[si]; };
    const int64_t last = tokens(S - 1), penultimate = S >= 2 ? tokens(S - 2) : 0;
    b.c_min = cfg.c_min > 0 ? cfg.c_min : penultimate + b.cds_tokens;
    b.c_max = cfg.c_max > 0 ? cfg.c_max : last + penultimate + b.cds_tokens;
    if (cfg.key_tile > 1) {
        const auto round_up = [t = cfg.key_tile](int64_t n) { return (n + t - 1) / t * t; };
        b.c_min = round_up(b.c_min);
        b.c_max = round_up(b.c_max);
    }
    // An auto value is named as such: the user did not type it.
    const auto value = [](int64_t given, int64_t used, const char* key) {
        return given > 0 ? std::to_string(given)
                         : "the paper's setting " + std::to_string(used) + " (" + key + " = 0)";
    };
    if (b.c_min <= b.cds_tokens)
        fail("c_min", "must exceed the " + std::to_string(b.cds_tokens) + " tokens of the " +
                          std::to_string(b.c_cds) + " condensed scales, got " +
                          value(cfg.c_min, b.c_min, "c_min"));
    if (b.c_max < b.c_min)
        fail("c_max", "must be at least c_min (" + std::to_string(b.c_min) + " tokens), got " +
                          value(cfg.c_max, b.c_max, "c_max"));
    b.bounded = b.c_max < model.total_tokens();
    return b;
}

std::shared_ptr<SamplingHooks> make_ams_kv(const AmsKvConfig& cfg, const VarConfig& model,
                                           ProbeSink* probe) {
    const auto budgets = resolve_ams_kv_budgets(cfg, model);
    return std::make_shared<AmsKv>(cfg, budgets, model, probe);
}

}  // namespace varscope
