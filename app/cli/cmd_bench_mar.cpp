// `varscope-cli bench mar`: MAR models with random weights (official sizes: mar_base, mar_large,
// mar_huge), the baseline and LazyMAR settings side by side in one run: median latency of the
// whole sampling loop (transformer and DiffLoss head; no VAE), FLOPs (blocks, attention, head),
// and the ratios to the baseline measured in the same run. With --split, one more run per method
// splits each step into transformer and DiffLoss-head time (device syncs in between).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <thread>

#include "app/cli/commands.h"
#include "app/cli/mar_cli_common.h"
#include "app/cli/run_report.h"
#include "core/accel/mar_accel_config.h"
#include "core/accel/mar_flops.h"
#include "kernels/cuda_graph.h"
#include "kernels/cuda_timing.h"
#include "kernels/diffloss_ops.h"

namespace varscope::cli {
namespace {

struct BenchMarArgs {
    std::vector<std::string> models = {"mar_base", "mar_large", "mar_huge"};
    std::vector<std::string> methods = {"baseline", "lazymar"};
    std::string device = "cuda", precision = "bf16";
    int64_t batch = 1, num_iter = 64, repeat = 3, warmup = 1;
    double cfg = 3.0;
    std::string sampling_steps = "100";
    std::string json;
    bool force = false;
    bool split = false;    // one more run per method, timing transformer and head apart
    bool planned = false;  // FLOPs from the step plan only, no runs
    bool no_cuda_graphs = false;
    bool compare_eager = false;  // one more run per method without CUDA graphs
    // Methods whose hooks run inside whole-step graphs: the timed runs again with the
    // transformer eager and only the diffusion graphed (VARSCOPE_MAR_HOOK_GRAPHS=diffusion).
    bool compare_hook_graphs = false;
    // Timed runs per method again with the LibTorch module path of the DiffLoss head
    // (MarSampleOptions::fused_head = false): time and token difference to the fused runs.
    bool compare_modules = false;
    // DiffLoss head alone: one 100-step reverse diffusion for N decoded tokens (2N rows with
    // CFG) as a CUDA graph, module path vs fused kernels (PDL on/off): time, kernels, diffs.
    std::vector<int64_t> head_rows;
    int64_t head_iters = 30;
};

using Clock = std::chrono::steady_clock;

// Splits each step into the transformer (step begin .. condition) and the DiffLoss head
// (condition .. step end), synchronising the device at each boundary.
class StepSplitTimer : public MarSamplingHooks {
  public:
    explicit StepSplitTimer(at::Device d) : device_(d) {}
    void on_step_begin(MarStepContext&) override { t0_ = now(); }
    void on_condition(const MarStepContext&, at::Tensor&) override { t1_ = now(); }
    void on_step_end(const MarStepContext&, const at::Tensor&, const at::Tensor&) override {
        const auto t2 = now();
        transformer_ms += ms(t0_, t1_);
        head_ms += ms(t1_, t2);
    }
    double transformer_ms = 0.0, head_ms = 0.0;

  private:
    Clock::time_point now() {
        synchronize_device(device_);
        return Clock::now();
    }
    static double ms(Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
    }
    at::Device device_;
    Clock::time_point t0_, t1_;
};

struct MethodRun {
    std::string name, summary;
    nlohmann::json config;
    std::vector<double> totals;
    double transformer_ms = 0.0, head_ms = 0.0;
    MarFlops flops;
    MarSampleResult last;
    double computed_share = 1.0;  // block positions computed / baseline's, over the run
    int64_t skipped_unconditional = 0;
    bool graphs = false;                      // the timed runs replayed CUDA graphs
    bool step_graphs = false;                 // ... whole steps (transformer too)
    std::vector<double> hook_eager_totals;    // --compare-hook-graphs: transformer eager
    double hook_eager_max_abs_diff = -1.0;    // ... its tokens vs the last whole-step run
    double eager_ms = 0.0;                    // --compare-eager: one run without graphs
    double eager_max_abs_diff = -1.0;         // ... and its tokens vs the last graphed run
    std::vector<double> modules_totals;       // --compare-modules: the module-path head
    double modules_max_abs_diff = -1.0;       // ... its tokens vs the last fused run
    double kernels_per_step = 0.0;            // graph kernel nodes per decoding step (mean)
    double kernels_per_diffusion_step = 0.0;  // per reverse step, from diffusion graphs
};

// Mean kernel nodes per captured whole-step graph and per reverse step of the diffusion
// graphs (LazyMAR's path), from the sampler's graphs.
void count_kernels(MethodRun& m, int64_t diffusion_steps) {
    double steps = 0, step_nodes = 0, diff = 0, diff_nodes = 0;
    for (const auto& [name, n] : m.last.graph_kernel_nodes) {
        if (name.rfind("step_", 0) == 0) {
            steps += 1;
            step_nodes += double(n);
        } else if (name.rfind("diffusion_", 0) == 0) {
            diff += 1;
            diff_nodes += double(n);
        }
    }
    if (steps > 0) m.kernels_per_step = step_nodes / steps;
    if (diff > 0) m.kernels_per_diffusion_step = diff_nodes / diff / double(diffusion_steps);
}

MethodRun run_method(MarPipeline& pipe, MarSampleOptions opt, const std::string& name,
                     const BenchMarArgs& a) {
    MethodRun m;
    m.name = name;
    const MarAccelConfig accel = MarAccelConfig::from_argument(name);
    m.summary = accel.summary();
    m.config = accel.to_json();
    const auto& c = pipe.config();
    auto lazy = make_lazymar_hooks(accel.lazymar, c, nullptr);  // head caches included
    // Timed runs carry only the method's hooks: without any (the baseline) or with hooks that
    // have a graph signature (LazyMAR without probes or threshold) each step is one CUDA graph
    // replay, with other hooks the transformer runs eagerly (mar_cuda_graph.h). FLOPs come
    // from the step plan, which equals what a counted run gives (tested).
    MarSamplingHooks* hooks = lazy.chain.get();
    for (int64_t i = 0; i < a.warmup; ++i) pipe.generate(opt, hooks);
    // VARSCOPE_BENCH_PAUSE_MS: the GPU idles that long before each timed run after the first
    // (does a run after idle time run faster than one right after another?).
    const char* pause_env = std::getenv("VARSCOPE_BENCH_PAUSE_MS");
    const long pause_ms = pause_env != nullptr ? std::strtol(pause_env, nullptr, 10) : 0;
    for (int64_t r = 0; r < a.repeat; ++r) {
        if (r > 0 && pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
        m.last = pipe.generate(opt, hooks);
        m.totals.push_back(m.last.total_millis - m.last.decode_millis);
        std::cerr << "    " << name << " run " << r + 1 << ": " << m.totals.back() << " ms"
                  << (m.last.cuda_graphs ? " (CUDA graphs)" : "")
                  << std::endl;  // flushed: a run cut short by a time limit still reports
    }
    m.graphs = m.last.cuda_graphs;
    m.step_graphs = m.graphs && (!hooks || hooks->graph_signature().has_value());
    count_kernels(m, pipe.sampler().diffusion().schedule().num_steps());
    // The warm-up and timed runs again with other options (`what` names them in the log): their
    // times into `totals`; returns the last run.
    auto rerun = [&](const MarSampleOptions& o, const char* what, std::vector<double>& totals) {
        for (int64_t i = 0; i < a.warmup; ++i) pipe.generate(o, hooks);
        MarSampleResult r;
        for (int64_t i = 0; i < a.repeat; ++i) {
            r = pipe.generate(o, hooks);
            totals.push_back(r.total_millis - r.decode_millis);
            std::cerr << "    " << name << " " << what << " run " << i + 1 << ": " << totals.back()
                      << " ms" << std::endl;
        }
        return r;
    };
    if (a.compare_hook_graphs && m.step_graphs && hooks) {
        setenv("VARSCOPE_MAR_HOOK_GRAPHS", "diffusion", 1);  // read by each sample() call
        const MarSampleResult r = rerun(opt, "eager-transformer", m.hook_eager_totals);
        unsetenv("VARSCOPE_MAR_HOOK_GRAPHS");
        m.hook_eager_max_abs_diff = (r.tokens - m.last.tokens).abs().max().item<double>();
        std::cerr << "    " << name << " max |whole-step graphs - eager transformer| token "
                  << "difference " << m.hook_eager_max_abs_diff << std::endl;
    }
    if (a.compare_modules) {  // the same runs with the module-path head
        MarSampleOptions mod = opt;
        mod.fused_head = false;
        const MarSampleResult r = rerun(mod, "module-path head", m.modules_totals);
        m.modules_max_abs_diff = (r.tokens - m.last.tokens).abs().max().item<double>();
        MethodRun tmp;
        tmp.last = r;
        count_kernels(tmp, pipe.sampler().diffusion().schedule().num_steps());
        std::cerr << "    " << name << " max |fused - module| token difference "
                  << m.modules_max_abs_diff << " (max |token| "
                  << m.last.tokens.abs().max().item<double>() << "); kernels per decoding step "
                  << m.kernels_per_step << " fused vs " << tmp.kernels_per_step
                  << " module path; per diffusion step " << m.kernels_per_diffusion_step << " vs "
                  << tmp.kernels_per_diffusion_step << std::endl;
    }
    m.flops = lazymar_planned_flops(c, accel.lazymar, opt.num_iter, int64_t(opt.class_ids.size()),
                                    opt.cfg, pipe.sampler().diffusion().schedule().num_steps());
    if (a.compare_eager && opt.cuda_graphs) {  // one eager run: its time and its tokens
        MarSampleOptions eager = opt;
        eager.cuda_graphs = false;
        const auto e = pipe.generate(eager, hooks);
        m.eager_ms = e.total_millis - e.decode_millis;
        m.eager_max_abs_diff = (e.tokens - m.last.tokens).abs().max().item<double>();
        std::cerr << "    " << name << " eager run: " << m.eager_ms
                  << " ms, max |graphed - eager| token difference " << m.eager_max_abs_diff
                  << std::endl;
    }
    if (a.split) {  // an extra run with device syncs around the transformer and the head
        auto chain = std::make_shared<MarHookChain>();
        if (lazy.chain) chain->add(lazy.chain);
        auto timer = std::make_shared<StepSplitTimer>(pipe.device());
        chain->add(timer);
        pipe.generate(opt, chain.get());
        m.transformer_ms = timer->transformer_ms;
        m.head_ms = timer->head_ms;
    }
    m.skipped_unconditional = int64_t(lazy.skipped_unconditional_steps().size());
    double num = 0, den = 0;
    for (const auto& st : lazy.token_stats())
        for (size_t l = 0; l < st.computed.size(); ++l) {
            num += double(st.rows * st.computed[l]);
            den += double(st.rows * st.total[l]);
        }
    if (den > 0) m.computed_share = num / den;
    return m;
}

// FLOPs of each method from the step plan (lazymar_planned_flops), without building the model.
nlohmann::json planned_model(const std::string& preset, const BenchMarArgs& a) {
    MarConfig c = mar_config_argument(preset);
    c.num_sampling_steps = a.sampling_steps;
    const int64_t steps = DiffusionSchedule::respaced(a.sampling_steps).num_steps();
    nlohmann::json methods = nlohmann::json::array();
    MarFlops base;
    std::cerr << preset << " (planned FLOPs, batch " << a.batch << ", " << a.num_iter
              << " steps, cfg " << a.cfg << ")\n";
    for (const auto& name : a.methods) {
        const MarAccelConfig accel = MarAccelConfig::from_argument(name);
        const MarFlops f =
            lazymar_planned_flops(c, accel.lazymar, a.num_iter, a.batch, a.cfg, steps);
        if (methods.empty()) base = f;
        const double ratio = f.total() > 0 ? base.total() / f.total() : 0.0;
        const double tr = (f.linear + f.attention) > 0
                              ? (base.linear + base.attention) / (f.linear + f.attention)
                              : 0.0;
        std::cerr << "  " << std::left << std::setw(18) << name << std::right << std::fixed
                  << std::setprecision(2) << std::setw(8) << f.total() / 1e12 << " TFLOPs  ratio "
                  << ratio << "x  (transformer " << (f.linear + f.attention) / 1e12 << " T, ratio "
                  << tr << "x; head " << f.diffusion / 1e12 << " T)\n";
        methods.push_back({{"method", name},
                           {"summary", accel.summary()},
                           {"config", accel.to_json()},
                           {"flops", f.to_json()},
                           {"flops_ratio", ratio},
                           {"transformer_flops_ratio", tr}});
    }
    return {{"model", preset}, {"config", c.to_json()}, {"methods", methods}};
}

// The pipelines' device, precision and this run's execution policy.
LoadOptions load_options_of(const BenchMarArgs& a) {
    LoadOptions o{a.device, parse_precision(a.precision)};
    o.exec = exec_policy();
    return o;
}

// The DiffLoss head alone (--head-rows): per decoded-token count N, one reverse diffusion
// (2N rows with CFG) captured as a CUDA graph per head path and replayed.
nlohmann::json bench_head(const std::string& preset, const BenchMarArgs& a) {
    MarConfig c = mar_config_argument(preset);
    c.num_sampling_steps = a.sampling_steps;
    MarPipeline pipe = MarPipeline::random(c, 0, load_options_of(a));
    c10::InferenceMode guard;
    const auto& net = *pipe.sampler().transformer()->diffloss->net;
    const auto& diffusion = pipe.sampler().diffusion();
    const at::Device device = pipe.device();
    TORCH_CHECK(device.is_cuda() && kernels::cuda_graphs_built(), "--head-rows needs CUDA");
    const int dev = device.index() < 0 ? 0 : int(device.index());
    const int64_t S = diffusion.schedule().num_steps(), C = net.in_channels();
    const auto dtype = net.input_proj->weight.scalar_type();
    const auto f32 = at::TensorOptions(device).dtype(at::kFloat);
    const auto t_all = diffusion.time_embeddings(net, device);
    std::cerr << preset << " DiffLoss head (width " << c.diffloss_w << ", depth " << c.diffloss_d
              << ", " << S << " steps, CFG " << a.cfg << ", " << a.precision << ")\n"
              << "  N  path            ms/diffusion  us/step  kernels/step  max|d| vs modules\n";
    struct Variant {
        std::string name;
        HeadPath path;
        bool pdl, row_split;
        int64_t cfg_period = 0, mlp_period = 0;  // the released LazyMAR code's head caches
        // DiffLossPolicy::cached_layout (Channels: as before the layouts existed)
        kernels::DiffCachedLayout layout = kernels::DiffCachedLayout::Channels;
        bool hybrid = false;  // ExecPolicy::mar_hybrid_cached_step (with Auto)
        // This run's policy with the variant's switches.
        ExecPolicy policy() const {
            ExecPolicy p = exec_policy();
            p.kernels.diff.pdl = pdl;
            p.kernels.diff.row_split = row_split;
            p.kernels.diff.cached_layout = layout;
            p.mar_hybrid_cached_step = hybrid;
            return p;
        }
    };
    using Layout = kernels::DiffCachedLayout;
    // The cached variants differ from "modules" by what the caches change, not by rounding.
    const std::vector<Variant> variants{
        {"modules", HeadPath::Modules, true, false},
        {"fused", HeadPath::FusedCuda, true, false},
        {"fused_no_pdl", HeadPath::FusedCuda, false, false},
        {"fused_row_split", HeadPath::FusedCuda, true, true},
        {"fused_row_split_no_pdl", HeadPath::FusedCuda, false, true},
        {"modules_mlp7", HeadPath::Modules, true, true, 0, 7},
        {"fused_mlp7", HeadPath::FusedCuda, true, true, 0, 7},
        {"fused_cfg7_mlp7", HeadPath::FusedCuda, true, true, 7, 7},
        {"fused_mlp7_split", HeadPath::FusedCuda, true, true, 0, 7, Layout::Split},
        {"fused_mlp7_rows", HeadPath::FusedCuda, true, true, 0, 7, Layout::Rows},
        // Auto: the fused chain up to its row limit, else the module path with the one-kernel
        // reuse steps.
        {"auto_hybrid_mlp7", HeadPath::Auto, true, true, 0, 7, Layout::Split, true},
        {"auto_hybrid_mlp7_rows", HeadPath::Auto, true, true, 0, 7, Layout::Rows, true}};
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t N : a.head_rows) {
        const auto z = at::randn({2 * N, c.decoder_embed_dim}, f32).to(dtype);
        const auto cfg = at::full({}, a.cfg, f32);
        const auto start = at::randn({N, C}, f32).to(dtype);
        const auto steps = at::randn({S, 2 * N, C}, f32).to(dtype);
        at::Tensor ref;
        nlohmann::json row{{"tokens", N}, {"rows", 2 * N}};
        for (const auto& v : variants) {
            const DiffusionSampler head(diffusion.schedule(), v.policy());
            std::string why;
            if (v.path == HeadPath::FusedCuda &&
                !head.uses_fused_head(net, z, true, HeadPath::Auto, &why, v.mlp_period)) {
                std::cerr << "  " << N << "  " << v.name << ": not run (" << why << ")\n";
                continue;
            }
            at::Tensor out;
            auto fn = [&] {
                out = head.sample_with_noise(net, z, cfg, 1.0, start, steps, t_all, v.cfg_period,
                                             v.path, v.mlp_period);
            };
            kernels::run_on_capture_stream(dev, fn);
            kernels::CudaGraph graph;
            graph.capture(dev, fn);
            const auto t =
                kernels::time_on_gpu([&] { graph.replay(); }, dev, 3, a.head_iters, false);
            const auto result = out.to(at::kFloat).clone();
            if (!ref.defined()) ref = result;
            const double diff = (result - ref).abs().max().item<double>();
            const double kps = double(graph.kernel_nodes()) / double(S);
            std::cerr << "  " << std::setw(2) << N << " " << std::left << std::setw(16) << v.name
                      << std::right << std::fixed << std::setprecision(3) << std::setw(10)
                      << t.median_ms << std::setprecision(1) << std::setw(9)
                      << 1000.0 * t.median_ms / double(S) << std::setw(14) << kps
                      << std::setprecision(5) << std::setw(12) << diff << "\n";
            row[v.name] = {{"median_ms", t.median_ms},
                           {"min_ms", t.min_ms},
                           {"max_ms", t.max_ms},
                           {"us_per_diffusion_step", 1000.0 * t.median_ms / double(S)},
                           {"kernels_per_diffusion_step", kps},
                           {"graph_nodes", graph.nodes()},
                           {"max_abs_diff_vs_modules", diff},
                           {"max_abs_output", ref.abs().max().item<double>()}};
        }
        rows.push_back(row);
    }
    return {{"model", preset}, {"config", c.to_json()}, {"head_rows", rows}};
}

nlohmann::json bench_model(const std::string& preset, const BenchMarArgs& a) {
    if (a.planned) return planned_model(preset, a);
    if (!a.head_rows.empty()) return bench_head(preset, a);
    MarConfig c = mar_config_argument(preset);
    c.num_sampling_steps = a.sampling_steps;
    MarPipeline pipe = MarPipeline::random(c, 0, load_options_of(a));
    MarSampleOptions opt;
    opt.class_ids.assign(a.batch, 207);
    opt.seed = 0;
    opt.num_iter = a.num_iter;
    opt.cfg = a.cfg;
    opt.time_steps = false;  // one sync at the end of the run only
    opt.decode = false;
    opt.cuda_graphs = !a.no_cuda_graphs;
    opt.validate(c);
    std::cerr << pipe.describe() << "\n";

    std::vector<MethodRun> runs;
    for (const auto& name : a.methods) runs.push_back(run_method(pipe, opt, name, a));
    const MethodRun& base = runs.front();
    const double base_ms = median(base.totals);
    nlohmann::json methods = nlohmann::json::array();
    std::cerr << "  method              median ms   speedup   TFLOPs  FLOPs ratio  transformer ms  "
                 "head ms  computed\n";
    for (const auto& m : runs) {
        const double ms = median(m.totals);
        const double speedup = ms > 0 ? base_ms / ms : 0.0;
        const double fratio = m.flops.total() > 0 ? base.flops.total() / m.flops.total() : 0.0;
        const double rel = (m.last.tokens - base.last.tokens).norm().item<double>() /
                           std::max(base.last.tokens.norm().item<double>(), 1e-12);
        std::cerr << "  " << std::left << std::setw(18) << m.name << std::right << std::fixed
                  << std::setprecision(1) << std::setw(11) << ms << std::setprecision(2)
                  << std::setw(10) << speedup << std::setw(9) << m.flops.total() / 1e12
                  << std::setw(13) << fratio << std::setprecision(1) << std::setw(16)
                  << m.transformer_ms << std::setw(9) << m.head_ms << std::setw(9)
                  << 100.0 * m.computed_share << " %\n";
        methods.push_back({{"method", m.name},
                           {"summary", m.summary},
                           {"config", m.config},
                           {"median_total_ms", ms},
                           {"total_ms_each", m.totals},
                           {"speedup", speedup},
                           {"flops", m.flops.to_json()},
                           {"flops_ratio", fratio},
                           {"split_run_transformer_ms", m.transformer_ms},
                           {"split_run_head_ms", m.head_ms},
                           {"transformer_speedup",
                            m.transformer_ms > 0 ? base.transformer_ms / m.transformer_ms : 0.0},
                           {"computed_share", m.computed_share},
                           {"unconditional_skipped_steps", m.skipped_unconditional},
                           {"latent_relative_l2_vs_baseline", rel},
                           {"cuda_graphs", m.graphs},
                           {"whole_step_graphs", m.step_graphs},
                           {"graph_capture_ms", m.last.graph_capture_millis}});
        methods.back()["graph_kernels_per_decoding_step"] = m.kernels_per_step;
        methods.back()["graph_kernels_per_diffusion_step"] = m.kernels_per_diffusion_step;
        if (!m.modules_totals.empty()) {
            const double mm = median(m.modules_totals);
            methods.back()["modules_head_median_ms"] = mm;
            methods.back()["modules_head_ms_each"] = m.modules_totals;
            methods.back()["fused_speedup_vs_modules"] = ms > 0 ? mm / ms : 0.0;
            methods.back()["fused_vs_modules_max_abs_token_diff"] = m.modules_max_abs_diff;
            methods.back()["max_abs_token"] = m.last.tokens.abs().max().item<double>();
            std::cerr << "    " << m.name << ": fused head " << ms << " ms vs module-path head "
                      << mm << " ms (" << (ms > 0 ? mm / ms : 0.0) << "x)\n";
        }
        if (!m.hook_eager_totals.empty()) {
            const double em = median(m.hook_eager_totals);
            methods.back()["eager_transformer_median_ms"] = em;
            methods.back()["eager_transformer_ms_each"] = m.hook_eager_totals;
            methods.back()["step_graphs_speedup_vs_eager_transformer"] = ms > 0 ? em / ms : 0.0;
            methods.back()["step_graphs_vs_eager_transformer_max_abs_token_diff"] =
                m.hook_eager_max_abs_diff;
            methods.back()["eager_transformer_speedup_vs_baseline"] = em > 0 ? base_ms / em : 0.0;
            std::cerr << "    " << m.name << ": whole-step graphs " << ms
                      << " ms vs eager transformer " << em << " ms (" << (ms > 0 ? em / ms : 0.0)
                      << "x); vs baseline " << (em > 0 ? base_ms / em : 0.0) << "x before, "
                      << speedup << "x now\n";
        }
        if (m.eager_max_abs_diff >= 0) {
            methods.back()["eager_ms"] = m.eager_ms;
            methods.back()["graphs_speedup_vs_eager"] = ms > 0 ? m.eager_ms / ms : 0.0;
            methods.back()["graphed_vs_eager_max_abs_token_diff"] = m.eager_max_abs_diff;
        }
    }
    return {{"model", preset},
            {"description", pipe.describe()},
            {"config", c.to_json()},
            {"methods", methods}};
}

int run(const BenchMarArgs& a) {
    if (a.methods.empty() || a.methods.front() != "baseline")
        throw std::invalid_argument("--methods must start with baseline (ratios are to it)");
    check_output_file(a.json, a.force, "--json");  // a bad path fails now, not after the runs
    nlohmann::json j = environment_json(a.planned ? "none (planned FLOPs)" : a.device);
    j.update({{"precision", a.precision},
              {"batch", a.batch},
              {"num_iter", a.num_iter},
              {"cfg", a.cfg},
              {"cfg_schedule", "linear"},
              {"diffusion_steps", a.sampling_steps},
              {"warmup_runs", a.warmup},
              {"runs", a.repeat},
              {"timing", a.planned ? "none: FLOPs from the step plan (lazymar_planned_flops)"
                                   : "whole loop (transformer + DiffLoss head, no VAE), one device "
                                     "sync per run; FLOPs from the step plan"},
              {"models", nlohmann::json::array()}});
    for (const auto& m : a.models) j["models"].push_back(bench_model(m, a));
    if (!a.json.empty()) {
        write_json(j, a.json, a.force);
        std::cerr << "wrote " << a.json << "\n";
    }
    return 0;
}

}  // namespace

Command add_bench_mar(CLI::App& bench) {
    auto a = std::make_shared<BenchMarArgs>();
    auto* cmd = bench.add_subcommand(
        "mar", "MAR (random weights) baseline vs LazyMAR: latency, FLOPs, ratios");
    cmd->add_option("--models", a->models, "MAR presets or JSON configs")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--methods", a->methods,
                    "baseline first, then MAR presets or JSON (" + mar_preset_names() + ")")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--precision", a->precision, "transformer precision")
        ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
        ->capture_default_str();
    cmd->add_option("--batch", a->batch, "images per run")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    cmd->add_option("--num-iter", a->num_iter, "decoding steps")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd->add_option("--cfg", a->cfg, "classifier-free guidance (linear schedule)")
        ->capture_default_str();
    cmd->add_option("--num-sampling-steps", a->sampling_steps, "diffusion respacing")
        ->capture_default_str();
    cmd->add_option("--repeat", a->repeat, "timed runs per method")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->add_option("--warmup", a->warmup, "untimed runs per method first")
        ->check(CLI::Range(0, 100))
        ->capture_default_str();
    cmd->add_option("--json", a->json, "write the results as JSON");
    cmd->add_flag("--force", a->force, "overwrite --json");
    cmd->add_flag("--planned-flops", a->planned,
                  "no runs: FLOPs of each method from the step plan (equal to what a run counts)");
    cmd->add_flag("--no-cuda-graphs", a->no_cuda_graphs,
                  "run the MAR loop eagerly on CUDA (no graph replay)");
    cmd->add_flag("--compare-eager", a->compare_eager,
                  "one more run per method without CUDA graphs: its time and whether its tokens "
                  "equal the graphed ones");
    cmd->add_flag("--compare-hook-graphs", a->compare_hook_graphs,
                  "methods run as whole-step CUDA graphs (LazyMAR): time them again with the "
                  "transformer eager and only the diffusion graphed, and compare the tokens");
    cmd->add_flag("--compare-modules", a->compare_modules,
                  "time each method again with the LibTorch module path of the DiffLoss head (no "
                  "fused kernels) and compare the tokens");
    cmd->add_option("--head-rows", a->head_rows,
                    "benchmark the DiffLoss head alone for these decoded-token counts (CUDA "
                    "graphs: module path vs fused kernels, also with the released LazyMAR head "
                    "caches, period 7)")
        ->delimiter(',');
    cmd->add_option("--head-iters", a->head_iters, "timed graph replays per head variant")
        ->check(CLI::Range(1, 10000))
        ->capture_default_str();
    cmd->add_flag("--split", a->split,
                  "one more run per method with device syncs that splits each step into "
                  "transformer and DiffLoss-head time");
    return [a]() { return run(*a); };
}

}  // namespace varscope::cli
