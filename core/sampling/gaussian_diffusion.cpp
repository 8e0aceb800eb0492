#include "core/sampling/gaussian_diffusion.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "core/models/diffloss.h"
#include "kernels/cuda_path.h"
#include "kernels/diffloss_ops.h"

namespace varscope {
namespace {

double alpha_bar(double t) {
    // Same operation order as the original lambda, evaluated in double.
    return std::pow(std::cos((t + 0.008) / 1.008 * M_PI / 2), 2.0);
}

// Python's round(): half to even.
int64_t round_half_even(double v) {
    const int mode = std::fegetround();
    std::fesetround(FE_TONEAREST);
    const double r = std::nearbyint(v);
    std::fesetround(mode);
    return static_cast<int64_t>(r);
}

std::vector<int64_t> parse_counts(const std::string& spec) {
    std::vector<int64_t> out;
    std::stringstream ss(spec);
    std::string part;
    while (std::getline(ss, part, ',')) {
        size_t used = 0;
        int64_t v = 0;
        try {
            v = std::stoll(part, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != part.size() || v < 0)
            throw std::invalid_argument(
                "num_sampling_steps: expected comma-separated step counts "
                "or ddimN, got '" +
                spec + "'");
        out.push_back(v);
    }
    if (out.empty()) throw std::invalid_argument("num_sampling_steps: empty");
    return out;
}

float f32(double v) {
    return static_cast<float>(v);
}

}  // namespace

std::vector<double> cosine_betas(int64_t num_steps) {
    std::vector<double> betas;
    betas.reserve(num_steps);
    for (int64_t i = 0; i < num_steps; ++i) {
        const double t1 = double(i) / double(num_steps), t2 = double(i + 1) / double(num_steps);
        betas.push_back(std::min(1 - alpha_bar(t2) / alpha_bar(t1), 0.999));
    }
    return betas;
}

std::vector<int64_t> space_timesteps(int64_t num_steps, const std::string& spec) {
    if (spec.rfind("ddim", 0) == 0) {
        const int64_t desired = parse_counts(spec.substr(4)).at(0);
        for (int64_t stride = 1; stride < num_steps; ++stride) {
            if ((num_steps + stride - 1) / stride == desired) {
                std::vector<int64_t> out;
                for (int64_t t = 0; t < num_steps; t += stride) out.push_back(t);
                return out;
            }
        }
        throw std::invalid_argument("num_sampling_steps: cannot create exactly " +
                                    std::to_string(num_steps) + " steps with an integer stride");
    }
    const auto counts = parse_counts(spec);
    const int64_t sections = static_cast<int64_t>(counts.size());
    const int64_t size_per = num_steps / sections, extra = num_steps % sections;
    std::set<int64_t> steps;
    int64_t start = 0;
    for (int64_t i = 0; i < sections; ++i) {
        const int64_t size = size_per + (i < extra ? 1 : 0);
        if (size < counts[i])
            throw std::invalid_argument("num_sampling_steps: cannot divide a section of " +
                                        std::to_string(size) + " steps into " +
                                        std::to_string(counts[i]));
        const double stride = counts[i] <= 1 ? 1.0 : double(size - 1) / double(counts[i] - 1);
        double cur = 0.0;
        for (int64_t k = 0; k < counts[i]; ++k) {
            steps.insert(start + round_half_even(cur));
            cur += stride;
        }
        start += size;
    }
    return {steps.begin(), steps.end()};
}

DiffusionSchedule DiffusionSchedule::from_betas(std::vector<double> betas) {
    DiffusionSchedule s;
    const size_t n = betas.size();
    if (n == 0) throw std::invalid_argument("diffusion: no steps");
    for (double b : betas)
        if (!(b > 0 && b <= 1)) throw std::invalid_argument("diffusion: betas must be in (0, 1]");
    s.betas = std::move(betas);
    s.alphas_cumprod.resize(n);
    double acc = 1.0;
    for (size_t i = 0; i < n; ++i) s.alphas_cumprod[i] = acc *= (1.0 - s.betas[i]);
    s.alphas_cumprod_prev.resize(n);
    for (size_t i = 0; i < n; ++i) s.alphas_cumprod_prev[i] = i ? s.alphas_cumprod[i - 1] : 1.0;
    for (size_t i = 0; i < n; ++i) {
        const double ac = s.alphas_cumprod[i], prev = s.alphas_cumprod_prev[i], b = s.betas[i];
        s.sqrt_recip_alphas_cumprod.push_back(std::sqrt(1.0 / ac));
        s.sqrt_recipm1_alphas_cumprod.push_back(std::sqrt(1.0 / ac - 1));
        s.posterior_variance.push_back(b * (1.0 - prev) / (1.0 - ac));
        s.posterior_mean_coef1.push_back(b * std::sqrt(prev) / (1.0 - ac));
        s.posterior_mean_coef2.push_back((1.0 - prev) * std::sqrt(1.0 - b) / (1.0 - ac));
        s.log_betas.push_back(std::log(b));
    }
    // The posterior variance is 0 at the first step: its log is clipped to the second one.
    for (size_t i = 0; i < n; ++i)
        s.posterior_log_variance_clipped.push_back(
            n > 1 ? std::log(s.posterior_variance[i == 0 ? 1 : i]) : 0.0);
    for (size_t i = 0; i < n; ++i) s.timestep_map.push_back(static_cast<int64_t>(i));
    return s;
}

DiffusionSchedule DiffusionSchedule::respaced(const std::string& spec, int64_t base_steps) {
    const auto base = from_betas(cosine_betas(base_steps));
    const auto keep = space_timesteps(base_steps, spec);
    std::vector<double> betas;
    double last = 1.0;
    for (int64_t t : keep) {
        betas.push_back(1 - base.alphas_cumprod[t] / last);
        last = base.alphas_cumprod[t];
    }
    auto s = from_betas(std::move(betas));
    s.timestep_map = keep;
    return s;
}

DiffusionSampler::StepOutput DiffusionSampler::step(const SimpleMlpAdaLNImpl& net,
                                                    const at::Tensor& x, int64_t i,
                                                    const at::Tensor& t_emb,
                                                    const at::Tensor& c_emb,
                                                    const at::Tensor& cfg_scale) const {
    return step_modulated(net, x, i, net.modulations(t_emb + c_emb), cfg_scale);
}

DiffusionSampler::StepOutput DiffusionSampler::step_modulated(
    const SimpleMlpAdaLNImpl& net, const at::Tensor& x, int64_t i, const DiffModulation& mod,
    const at::Tensor& cfg_scale, const at::Tensor& cached_delta, at::Tensor* delta_out,
    HeadMlpCache* mlp_cache) const {
    const auto& s = schedule_;
    const int64_t N = x.size(0), C = x.size(1);
    const bool guided = cfg_scale.defined();
    auto forward = [&](const at::Tensor& in, const DiffModulation& m) {
        return mlp_cache && mlp_cache->step != HeadMlpStep::Off
                   ? forward_mlp_cached(net, in, m, *mlp_cache)
                   : net.forward_modulated(in, m);
    };
    at::Tensor eps, var_values;
    if (guided && cached_delta.defined()) {
        // Conditional half only (its modulation rows come first); the released code's order.
        const at::Tensor out = forward(x, mod.rows(0, N));
        const auto cond = out.narrow(1, 0, C);
        const auto uncond = cond - cached_delta;
        eps = uncond + cfg_scale * (cond - uncond);
        var_values = out.narrow(1, C, C);
    } else {
        // With CFG both halves of the original's running sample are its conditional half.
        const at::Tensor input = guided ? at::cat({x, x}) : x;
        const at::Tensor out = forward(input, mod);
        eps = out.narrow(1, 0, C);
        var_values = out.narrow(1, C, C);
        if (guided) {
            const auto cond = eps.narrow(0, 0, N), uncond = eps.narrow(0, N, N);
            if (delta_out) *delta_out = cond - uncond;
            eps = uncond + cfg_scale * (cond - uncond);
            var_values = var_values.narrow(0, 0, N);
        }
    }
    // Learned range: interpolate between the clipped posterior and the beta log-variance.
    const auto frac = (var_values + 1) / 2;
    auto log_variance =
        frac * f32(s.log_betas[i]) + (1 - frac) * f32(s.posterior_log_variance_clipped[i]);
    const auto x0 =
        f32(s.sqrt_recip_alphas_cumprod[i]) * x - f32(s.sqrt_recipm1_alphas_cumprod[i]) * eps;
    auto mean = f32(s.posterior_mean_coef1[i]) * x0 + f32(s.posterior_mean_coef2[i]) * x;
    return {mean, log_variance, eps};
}

namespace {

// A kept tensor for a step with `rows` rows: its first rows (the conditional half) when it has
// more, itself twice when it has half as many (the released code's cat([c, c])).
at::Tensor fit_rows(const at::Tensor& kept, int64_t rows) {
    TORCH_CHECK(kept.defined(), "head MLP cache: nothing kept before a reusing step");
    const int64_t have = kept.size(0);
    if (have == rows) return kept;
    if (have > rows) return kept.narrow(0, 0, rows);
    TORCH_CHECK(2 * have == rows, "head MLP cache: kept ", have, " rows, step has ", rows);
    return at::cat({kept, kept});
}

// The AdaLN modulations of a reverse diffusion's steps. They depend on the timestep and the
// condition only, so they are computed for many steps at once (one pass over those weights),
// and only what each step uses: its rows (both CFG halves, or the conditional one where the
// head condition cache skips the other) and per block everything, the gate alone (a block
// whose kept MLP term the head MLP cache replays) or nothing (one whose kept output change it
// replays). Steps with the same needs form a group, computed `window` steps at a time when the
// first of them is reached; y's rows are step-major, ascending steps. With neither cache every
// step needs everything and the windows are [i - window + 1, i] as the loop meets them.
class StepModulations {
  public:
    struct Need {
        int64_t rows = 0;
        std::vector<ModulationNeed> blocks;
        bool operator==(const Need& o) const { return rows == o.rows && blocks == o.blocks; }
    };

    // needs[i]: step i's.
    StepModulations(const SimpleMlpAdaLNImpl& net, const at::Tensor& t_all, const at::Tensor& c_emb,
                    int64_t window, std::vector<Need> needs)
        : net_(net), t_all_(t_all), c_emb_(c_emb), window_(window), needs_(std::move(needs)) {
        const auto S = static_cast<int64_t>(needs_.size());
        group_.resize(needs_.size());
        position_.resize(needs_.size());
        for (int64_t i = S - 1; i >= 0; --i) {  // the loop's order
            const auto& n = needs_[size_t(i)];
            size_t g = 0;
            while (g < members_.size() && !(needs_[size_t(members_[g].front())] == n)) ++g;
            if (g == members_.size()) members_.emplace_back();
            group_[size_t(i)] = g;
            position_[size_t(i)] = static_cast<int64_t>(members_[g].size());
            members_[g].push_back(i);
        }
        chunks_.resize(members_.size());
    }

    DiffModulation at(int64_t i) {
        const auto& need = needs_[size_t(i)];
        Chunk& c = chunks_[group_[size_t(i)]];
        if (i < c.lowest || i > c.highest) compute(i, c);
        int64_t k = 0;  // i's index among the chunk's steps, ascending
        while (c.steps[size_t(k)] != i) ++k;
        return c.m.rows(k * need.rows, need.rows);
    }

  private:
    struct Chunk {
        std::vector<int64_t> steps;  // ascending
        int64_t lowest = 0, highest = -1;
        DiffModulation m;
    };

    void compute(int64_t i, Chunk& c) {
        const auto& members = members_[group_[size_t(i)]];
        const int64_t from = position_[size_t(i)];
        const int64_t n = std::min<int64_t>(window_, static_cast<int64_t>(members.size()) - from);
        c.steps.assign(members.begin() + from, members.begin() + from + n);
        std::reverse(c.steps.begin(), c.steps.end());
        c.lowest = c.steps.front();
        c.highest = c.steps.back();
        // The chunk's timestep rows: runs of consecutive steps as views, one cat if several.
        std::vector<at::Tensor> runs;
        for (size_t a = 0; a < c.steps.size();) {
            size_t e = a + 1;
            while (e < c.steps.size() && c.steps[e] == c.steps[e - 1] + 1) ++e;
            runs.push_back(t_all_.narrow(0, c.steps[a], static_cast<int64_t>(e - a)));
            a = e;
        }
        const auto t = runs.size() == 1 ? runs.front() : at::cat(runs);
        const auto& need = needs_[size_t(i)];
        const auto y = (t.unsqueeze(1) + c_emb_.narrow(0, 0, need.rows).unsqueeze(0))
                           .reshape({-1, c_emb_.size(1)});
        c.m = net_.modulations(y, need.blocks);
    }

    const SimpleMlpAdaLNImpl& net_;
    at::Tensor t_all_, c_emb_;
    int64_t window_;
    std::vector<Need> needs_;
    std::vector<size_t> group_;                  // per step
    std::vector<int64_t> position_;              // per step: its index in its group
    std::vector<std::vector<int64_t>> members_;  // per group: steps, descending
    std::vector<Chunk> chunks_;                  // per group: the steps computed last
};

// ||now - before|| / ||now||, the rows of `before` matched to now's as the cache matches them.
double relative_drift(const at::Tensor& now, const at::Tensor& before) {
    const auto n = now.to(at::kFloat);
    const double norm = n.norm().item<double>();
    const double diff = (n - fit_rows(before, now.size(0)).to(at::kFloat)).norm().item<double>();
    return norm > 0.0 ? diff / norm : 0.0;
}

}  // namespace

at::Tensor DiffusionSampler::forward_mlp_cached(const SimpleMlpAdaLNImpl& net, const at::Tensor& x,
                                                const DiffModulation& m, HeadMlpCache& cache) {
    const int64_t rows = x.size(0), depth = net.depth();
    cache.mlp.resize(static_cast<size_t>(depth));
    cache.change.resize(static_cast<size_t>(depth));
    const bool refresh = cache.step == HeadMlpStep::Refresh;
    double drift = 0.0;  // summed over the blocks that had a kept term (stats only)
    int64_t drifted = 0;
    auto measure = [&](const at::Tensor& now, const at::Tensor& before) {
        if (!refresh || !cache.stats || !before.defined()) return;
        drift += relative_drift(now, before);
        ++drifted;
    };
    // The ops of net.forward_modulated in the same order, so a refresh step equals it exactly.
    at::Tensor h = at::linear(x, net.input_proj->weight, net.input_proj->bias);
    for (int64_t b = 0; b < depth; ++b) {
        const auto k = static_cast<size_t>(b);
        const bool skipped = head_mlp_skips_block(b);
        if (skipped && !refresh) {
            h = h + fit_rows(cache.change[k], rows);
            continue;
        }
        at::Tensor mlp;
        if (cache.step == HeadMlpStep::Reuse) {
            mlp = fit_rows(cache.mlp[k], rows);
        } else {
            mlp = net.block(b).mlp_modulated(h, m.shift[k], m.scale1[k]);
            if (!skipped) {  // the skipped blocks reuse their change instead
                measure(mlp, cache.mlp[k]);
                cache.mlp[k] = mlp;
            }
        }
        at::Tensor out = h + m.gate[k] * mlp;
        if (skipped) {
            at::Tensor change = out - h;
            measure(change, cache.change[k]);
            cache.change[k] = std::move(change);
        }
        h = std::move(out);
    }
    if (refresh && cache.stats) cache.stats->add_mlp_refresh(drift, drifted);
    return net.final_layer->forward_modulated(h, m.final_shift, m.final_scale1);
}

HeadMlpStep DiffusionSampler::head_mlp_step(int64_t i, int64_t num_steps, int64_t period) {
    if (period <= 0) return HeadMlpStep::Off;
    if (i == num_steps - 1 || i % period == 0) return HeadMlpStep::Refresh;
    // The released code's i > 0.9 S in integers (the same answer for every S up to 2000).
    if (10 * i > 9 * num_steps) return HeadMlpStep::Warmup;
    return HeadMlpStep::Reuse;
}

at::Tensor DiffusionSampler::time_embeddings(const SimpleMlpAdaLNImpl& net,
                                             const at::Device& device) const {
    const auto params = net.time_embed->parameters();
    const at::Tensor& w = params.front();
    // Keyed on the weight storage and its version: new values (a load copies in place), a
    // move to another device or dtype all recompute.
    const void* key = w.data_ptr();
    int64_t version = 0;
    bool trackable = true;  // inference tensors have no version counter: never cached
    for (const auto& p : params) {
        if (p.is_inference())
            trackable = false;
        else
            version += static_cast<int64_t>(p._version());
    }
    if (!trackable) {
        return net.time_embed->forward(at::tensor(schedule_.timestep_map, at::kLong).to(device));
    }
    if (!t_emb_cache_.defined() || t_emb_key_ != key || t_emb_version_ != version ||
        t_emb_cache_.device() != device || t_emb_cache_.scalar_type() != w.scalar_type()) {
        const auto times = at::tensor(schedule_.timestep_map, at::kLong).to(device);
        t_emb_cache_ = net.time_embed->forward(times);
        t_emb_key_ = key;
        t_emb_version_ = version;
    }
    return t_emb_cache_;
}

bool DiffusionSampler::hybrid_cached_step_runs(const SimpleMlpAdaLNImpl& net, const at::Tensor& z,
                                               bool guided) const {
    const auto& w = net.input_proj->weight;  // (W, C)
    return kernels::diff_cached_step_cuda_supported(w, z.size(0), w.size(0), exec_.kernels) &&
           z.device() == w.device() && (w.size(1) == 8 || w.size(1) == 16) && net.depth() <= 16 &&
           (!guided || z.size(0) % 2 == 0);
}

bool DiffusionSampler::uses_fused_head(const SimpleMlpAdaLNImpl& net, const at::Tensor& z,
                                       bool guided, HeadPath head, std::string* why_not,
                                       int64_t mlp_cache_period) const {
    auto no = [&](std::string why) { return kernels::unsupported(why_not, std::move(why)); };
    if (head == HeadPath::Modules) return no("the module path was asked for");
    if (head == HeadPath::FusedReference) return true;
    const auto& w = net.input_proj->weight;  // (W, C)
    const int64_t rows = z.size(0);          // 2N with CFG, N without: the most rows of a step
    if (head == HeadPath::Auto) {
        if (!exec_.mar_fused_head) return no("VARSCOPE_MAR_FUSED_HEAD=0");
        // Each CTA normalises every row itself, so the fused kernels lose to cuBLAS GEMMs as
        // rows grow (bench/results/2026-11-25-h100/mar_fused.md).
        const int64_t most = exec_.mar_fused_head_max_rows(w.size(0));
        if (rows > most)
            return no(std::to_string(rows) + " rows > " + std::to_string(most) +
                      " (VARSCOPE_MAR_FUSED_MAX_ROWS)");
    }
    std::string why;
    bool ok = kernels::diff_head_cuda_supported(w, rows, w.size(0), exec_.kernels, &why) &&
              z.device() == w.device();
    if (ok && (w.size(1) % 8 != 0 || w.size(1) > w.size(0))) {
        ok = false;
        why = "the latent width " + std::to_string(w.size(1)) + " is not a multiple of 8";
    }
    if (ok && mlp_cache_period > 0 && w.size(1) != 8 && w.size(1) != 16) {
        ok = false;  // diff_cached_step's one-kernel step
        why = "the head MLP cache's fused step takes latent widths 8 or 16, not " +
              std::to_string(w.size(1));
    }
    if (ok && mlp_cache_period > 0 && net.depth() > 16) {
        ok = false;
        why = "the head MLP cache's fused kernels replay at most 16 blocks";
    }
    (void)guided;
    TORCH_CHECK(ok || head != HeadPath::FusedCuda, "fused DiffLoss head requested but ", why);
    if (!ok) return no(why);
    return true;
}

at::Tensor DiffusionSampler::run(const SimpleMlpAdaLNImpl& net, const at::Tensor& z,
                                 const at::Tensor& cfg_scale, double temperature,
                                 std::optional<at::Generator> gen, const at::Tensor& start,
                                 const at::Tensor& step_noise, const at::Tensor& t_given,
                                 int64_t cfg_cache_period, HeadPath head, int64_t mlp_cache_period,
                                 HeadCacheStats* stats) const {
    const bool guided = cfg_scale.defined();
    TORCH_CHECK(!guided || z.size(0) % 2 == 0, "diffusion: CFG needs 2N condition rows");
    const int64_t N = guided ? z.size(0) / 2 : z.size(0);
    const int64_t C = net.in_channels();
    const auto opts = z.options().dtype(net.input_proj->weight.scalar_type());
    const int64_t S = schedule_.num_steps();
    // The condition is embedded once; every timestep embedding is one row, broadcast.
    const auto c_emb = net.embed_condition(z.to(opts.dtype()));
    const auto t_all = t_given.defined() ? t_given : time_embeddings(net, z.device());  // (S, W)

    at::Tensor x = start.defined() ? start.to(opts) : at::randn({N, C}, gen, opts);
    const float temp = f32(temperature);
    const bool fused = uses_fused_head(net, z, guided, head, nullptr, mlp_cache_period);
    const auto kpath = head == HeadPath::FusedReference ? kernels::KernelPath::Reference
                                                        : kernels::KernelPath::Cuda;
    const kernels::KernelPolicy& kp = exec_.kernels;
    std::vector<kernels::DiffBlockWeights> blocks;
    at::Tensor delta;        // head-side condition cache (cfg_cache_period > 0)
    HeadMlpCache mlp_cache;  // head MLP cache (mlp_cache_period > 0): its kept tensors
    // The fused path keeps each block's term (MLP term or output change) in a tensor of the
    // most rows a step has; kept_rows = the rows of the step that wrote it.
    std::vector<int64_t> kept_rows;
    mlp_cache.stats = mlp_cache_period > 0 ? stats : nullptr;
    if (fused) {
        // The CUDA kernels update x in place: it must not alias the caller's start noise.
        x = x.clone(at::MemoryFormat::Contiguous);
        for (int64_t b = 0; b < net.depth(); ++b) {
            const auto& blk = net.block(b);
            blocks.push_back({blk.in_ln->weight, blk.in_ln->bias, blk.in_ln->options.eps(),
                              blk.fc1()->weight, blk.fc1()->bias, blk.fc2()->weight,
                              blk.fc2()->bias});
        }
        if (guided && cfg_cache_period > 0) delta = at::zeros({N, C}, opts);
        if (mlp_cache_period > 0) {
            for (int64_t b = 0; b < net.depth(); ++b)
                mlp_cache.mlp.push_back(at::empty({guided ? 2 * N : N, net.width()}, opts));
            kept_rows.assign(static_cast<size_t>(net.depth()), 0);
        }
    }
    // The AdaLN modulations, many steps at once and only what each step uses
    // (StepModulations); a window keeps a group's under ~64M elements.
    const int64_t R = c_emb.size(0), W = net.width();
    const int64_t per_step = R * W * (3 * net.depth() + 2);
    const int64_t window = std::max<int64_t>(1, std::min<int64_t>(S, (64LL << 20) / per_step));
    // Every step's in full (one window for all steps) up to the fused kernels' rows, whichever
    // path runs (so the paths stay comparable bit for bit): there the modulations cost little
    // and more groups cost more kernels (MAR-B b1 lazymar-released 239.0 ms in full vs 251.7 ms
    // by need, H200, two calls with baselines 472.0 ms). Also with
    // ExecPolicy::mar_full_modulations (to time the difference).
    const bool all_mods = R <= exec_.mar_fused_head_max_rows(W) || exec_.mar_full_modulations;
    std::vector<StepModulations::Need> needs(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) {
        auto& n = needs[size_t(i)];
        if (all_mods) {
            n = {R, std::vector<ModulationNeed>(size_t(net.depth()), ModulationNeed::All)};
            continue;
        }
        n.rows = guided && !full_cfg_step(i, S, cfg_cache_period) ? N : R;
        const HeadMlpStep ms = head_mlp_step(i, S, mlp_cache_period);
        const bool replays = ms == HeadMlpStep::Reuse || ms == HeadMlpStep::Warmup;
        for (int64_t b = 0; b < net.depth(); ++b) {
            n.blocks.push_back(!replays                   ? ModulationNeed::All
                               : head_mlp_skips_block(b)  ? ModulationNeed::None
                               : ms == HeadMlpStep::Reuse ? ModulationNeed::Gate
                                                          : ModulationNeed::All);
        }
    }
    StepModulations mods(net, t_all, c_emb, window, std::move(needs));
    auto coefs_of = [&](int64_t i) {  // reverse step i's float32 coefficients for the kernels
        kernels::DiffStepCoefs k;
        k.sqrt_recip_ac = f32(schedule_.sqrt_recip_alphas_cumprod[i]);
        k.sqrt_recipm1_ac = f32(schedule_.sqrt_recipm1_alphas_cumprod[i]);
        k.coef1 = f32(schedule_.posterior_mean_coef1[i]);
        k.coef2 = f32(schedule_.posterior_mean_coef2[i]);
        k.log_beta = f32(schedule_.log_betas[i]);
        k.log_var_clipped = f32(schedule_.posterior_log_variance_clipped[i]);
        k.temperature = temp;
        k.last = i == 0;
        return k;
    };
    // Step i's noise, drawn at every step (also the last, where it is unused) to keep the
    // random stream of the original, which draws noise for its whole 2N-row sample.
    auto noise_of = [&](int64_t i) {
        return step_noise.defined() ? step_noise[S - 1 - i].to(opts)
                                    : at::randn({guided ? 2 * N : N, C}, gen, opts);
    };
    // The module path with the head MLP cache: its reuse steps through the one-kernel cached
    // step (ExecPolicy::mar_hybrid_cached_step; rows beyond the fused chain's, e.g. batch 16).
    // Only where Auto fell back to the module path: HeadPath::Modules stays LibTorch throughout.
    const bool hybrid = head == HeadPath::Auto && !fused && mlp_cache_period > 0 &&
                        exec_.mar_hybrid_cached_step && hybrid_cached_step_runs(net, z, guided);
    for (int64_t i = S - 1; i >= 0; --i) {
        const DiffModulation m_i = mods.at(i);  // the rows this step takes (half or both)
        const bool full = !guided || full_cfg_step(i, S, cfg_cache_period);
        // The head condition cache's drift (stats only): delta before this step rewrites it
        // (the first step, S - 1, always runs both halves and keeps the first delta).
        at::Tensor delta_before;
        if (stats && guided && full && cfg_cache_period > 0) {
            ++stats->cfg_refreshes;
            if (i < S - 1) delta_before = delta.clone();
        }
        auto measure_delta = [&] {
            if (delta_before.defined()) {
                stats->cfg_drift_sum += relative_drift(delta, delta_before);
                ++stats->cfg_drift_count;
            }
        };
        // How the kernels form eps this step, and the rows they take (the fused loop and the
        // module path's one-kernel reuse steps).
        using kernels::DiffCfgMode;
        const DiffCfgMode mode = !guided                ? DiffCfgMode::None
                                 : !full                ? DiffCfgMode::Cached
                                 : cfg_cache_period > 0 ? DiffCfgMode::FullKeep
                                                        : DiffCfgMode::Full;
        const bool half = mode == DiffCfgMode::None || mode == DiffCfgMode::Cached;
        const int64_t rows = half ? N : 2 * N;
        const auto& fl = net.final_layer->linear;
        // A step that replays every block (the head MLP cache's reuse steps), in one kernel.
        auto replay_step = [&](const std::vector<kernels::DiffKeptBlock>& kept,
                               const DiffModulation& m, const at::Tensor& noise) {
            x = kernels::diff_cached_step(x, net.input_proj->weight, net.input_proj->bias, rows,
                                          kept, m.final_shift, m.final_scale1, fl->weight, fl->bias,
                                          1e-6, noise.narrow(0, 0, N), cfg_scale, mode, delta,
                                          coefs_of(i), kpath, kp);
            measure_delta();
        };
        if (fused) {
            // One kernel per linear layer and one for the final layer + CFG + posterior update
            // (the module path's ops in the same order on the reference path).
            const auto m = m_i.rows(0, rows);  // both halves computed where all_mods
            // The head MLP cache (forward_mlp_cached's rule): a block computes, or replays its
            // kept term (the MLP term with this step's gate, or the output change).
            const HeadMlpStep ms = head_mlp_step(i, S, mlp_cache_period);
            auto replayed = [&](size_t b) {
                return ms == HeadMlpStep::Reuse ||
                       (ms == HeadMlpStep::Warmup && head_mlp_skips_block(int64_t(b)));
            };
            auto kept_block = [&](size_t b) {
                TORCH_CHECK(kept_rows[b] > 0, "head MLP cache: nothing kept before a reusing step");
                const auto term = mlp_cache.mlp[b].narrow(0, 0, kept_rows[b]);
                return kernels::DiffKeptBlock{
                    term, head_mlp_skips_block(int64_t(b)) ? at::Tensor() : m.gate[b]};
            };
            auto keep_of = [&](size_t b) {
                kernels::DiffKeep keep;
                if (ms == HeadMlpStep::Off) return keep;
                // Refresh keeps every block's term; a warm-up step the computed blocks' MLP term.
                kept_rows[b] = rows;
                auto& t = head_mlp_skips_block(int64_t(b)) ? keep.change : keep.mlp;
                t = mlp_cache.mlp[b].narrow(0, 0, rows);
                return keep;
            };
            const at::Tensor noise = noise_of(i);
            if (ms == HeadMlpStep::Reuse) {
                std::vector<kernels::DiffKeptBlock> kept;
                for (size_t b = 0; b < blocks.size(); ++b) kept.push_back(kept_block(b));
                replay_step(kept, m, noise);
                continue;
            }
            // The MLP cache's drift (stats only): the kept terms before this refresh.
            std::vector<at::Tensor> kept_before;
            if (stats && ms == HeadMlpStep::Refresh) {
                for (size_t b = 0; b < blocks.size(); ++b)
                    kept_before.push_back(kept_rows[b] > 0
                                              ? mlp_cache.mlp[b].narrow(0, 0, kept_rows[b]).clone()
                                              : at::Tensor());
            }
            at::Tensor h;
            size_t first = 0;
            if (blocks.empty()) {
                h = kernels::diff_input_proj(x, net.input_proj->weight, net.input_proj->bias, rows,
                                             kpath, kp);
            } else {
                // The input projection inside block 0's fc1 kernel (one kernel fewer a step).
                // Block 0 always computes (the cache replays blocks 1..4 at warm-up steps).
                auto [a, h0] = kernels::diff_proj_block_fc1(x, net.input_proj->weight,
                                                            net.input_proj->bias, rows, blocks[0],
                                                            m.shift[0], m.scale1[0], kpath, kp);
                h = kernels::diff_block_fc2(a, blocks[0], m.gate[0], h0, kpath, keep_of(0), kp);
                first = 1;
            }
            for (size_t b = first; b < blocks.size(); ++b) {
                if (replayed(b)) {
                    // The run of replayed blocks from b on, in one kernel.
                    std::vector<kernels::DiffKeptBlock> kept;
                    for (; b < blocks.size() && replayed(b); ++b) kept.push_back(kept_block(b));
                    h = kernels::diff_apply_kept(h, kept, kpath, kp);
                    if (b == blocks.size()) break;
                }
                const auto a =
                    kernels::diff_block_fc1(h, blocks[b], m.shift[b], m.scale1[b], kpath, kp);
                h = kernels::diff_block_fc2(a, blocks[b], m.gate[b], h, kpath, keep_of(b), kp);
            }
            x = kernels::diff_final_step(h, m.final_shift, m.final_scale1, fl->weight, fl->bias,
                                         1e-6, x, noise.narrow(0, 0, N), cfg_scale, mode, delta,
                                         coefs_of(i), kpath, kp);
            if (stats && ms == HeadMlpStep::Refresh) {
                double drift = 0.0;
                int64_t drifted = 0;
                for (size_t b = 0; b < kept_before.size(); ++b) {
                    if (!kept_before[b].defined()) continue;
                    drift += relative_drift(mlp_cache.mlp[b].narrow(0, 0, rows), kept_before[b]);
                    ++drifted;
                }
                stats->add_mlp_refresh(drift, drifted);
            }
            measure_delta();
            continue;
        }
        mlp_cache.step = head_mlp_step(i, S, mlp_cache_period);
        if (hybrid && mlp_cache.step == HeadMlpStep::Reuse) {
            // Every block replayed from the module path's kept tensors, in one kernel.
            const auto m = m_i.rows(0, rows);  // both halves computed where all_mods
            std::vector<kernels::DiffKeptBlock> kept;
            for (int64_t b = 0; b < net.depth(); ++b) {
                const auto k = static_cast<size_t>(b);
                const bool skipped = head_mlp_skips_block(b);
                kept.push_back({(skipped ? mlp_cache.change[k] : mlp_cache.mlp[k]).contiguous(),
                                skipped ? at::Tensor() : m.gate[k]});
            }
            if (mode == DiffCfgMode::FullKeep) delta = delta.contiguous();  // written in place
            replay_step(kept, m, noise_of(i));  // kpath is Cuda: hybrid needs Auto
            continue;
        }
        const auto out =
            step_modulated(net, x, i, m_i, cfg_scale, full ? at::Tensor() : delta,
                           full && cfg_cache_period > 0 ? &delta : nullptr, &mlp_cache);
        measure_delta();
        const at::Tensor noise = noise_of(i);
        if (i == 0) {
            x = out.mean;
        } else {
            x = out.mean + at::exp(0.5 * out.log_variance) * noise.narrow(0, 0, N) * temp;
        }
    }
    return x;
}

at::Tensor DiffusionSampler::sample(const SimpleMlpAdaLNImpl& net, const at::Tensor& z,
                                    const at::Tensor& cfg_scale, double temperature,
                                    std::optional<at::Generator> gen, int64_t cfg_cache_period,
                                    HeadPath head, int64_t mlp_cache_period,
                                    HeadCacheStats* stats) const {
    return run(net, z, cfg_scale, temperature, std::move(gen), {}, {}, {}, cfg_cache_period, head,
               mlp_cache_period, stats);
}

bool DiffusionSampler::full_cfg_step(int64_t i, int64_t num_steps, int64_t period) {
    return period <= 0 || i == num_steps - 1 || i % period == 0;
}

void DiffusionSampler::draw_noise(at::Tensor& start, at::Tensor& step_noise,
                                  std::optional<at::Generator> gen) {
    start.normal_(0.0, 1.0, gen);
    for (int64_t i = 0; i < step_noise.size(0); ++i) step_noise[i].normal_(0.0, 1.0, gen);
}

at::Tensor DiffusionSampler::sample_with_noise(const SimpleMlpAdaLNImpl& net, const at::Tensor& z,
                                               const at::Tensor& cfg_scale, double temperature,
                                               const at::Tensor& start,
                                               const at::Tensor& step_noise,
                                               const at::Tensor& t_all, int64_t cfg_cache_period,
                                               HeadPath head, int64_t mlp_cache_period,
                                               HeadCacheStats* stats) const {
    TORCH_CHECK(start.defined() && step_noise.defined(), "sample_with_noise: noise required");
    TORCH_CHECK(step_noise.size(0) == schedule_.num_steps(),
                "sample_with_noise: one noise tensor per diffusion step expected");
    return run(net, z, cfg_scale, temperature, std::nullopt, start, step_noise, t_all,
               cfg_cache_period, head, mlp_cache_period, stats);
}

}  // namespace varscope
