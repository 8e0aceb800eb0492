// `varscope-cli bench mar`: MAR models with random weights (official sizes: mar_base, mar_large,
// mar_huge), the baseline and LazyMAR settings side by side in one run: median latency of the
// whole sampling loop (transformer and DiffLoss head; no VAE), FLOPs (blocks, attention, head),
// and the ratios to the baseline measured in the same run. With --split, one more run per method
// splits each step into transformer and DiffLoss-head time (device syncs in between).
#include <ATen/ATen.h>

#include <chrono>
#include <iomanip>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/mar_cli_common.h"
#include "app/cli/run_report.h"
#include "core/accel/mar_accel_config.h"
#include "core/accel/mar_flops.h"

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
    bool split = false;  // one more run per method, timing transformer and head apart
    bool planned = false;  // FLOPs from the step plan only, no runs
    bool no_cuda_graphs = false;
    bool compare_eager = false;  // one more run per method without CUDA graphs
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
    bool graphs = false;                // the timed runs replayed CUDA graphs
    double eager_ms = 0.0;              // --compare-eager: one run without graphs
    double eager_max_abs_diff = -1.0;   // ... and its tokens vs the last graphed run
};

MethodRun run_method(MarPipeline& pipe, MarSampleOptions opt, const std::string& name,
                     const BenchMarArgs& a) {
    MethodRun m;
    m.name = name;
    const MarAccelConfig accel = MarAccelConfig::from_argument(name);
    m.summary = accel.summary();
    m.config = accel.to_json();
    const auto& c = pipe.config();
    auto lazy = make_lazymar_hooks(accel.lazymar, c, nullptr);
    opt.head_cfg_cache_period = lazymar_head_period(accel.lazymar);
    // Timed runs carry only the method's hooks: without any (the baseline) each step is one
    // CUDA graph replay, with hooks the transformer runs eagerly (mar_cuda_graph.h). FLOPs come
    // from the step plan, which equals what a counted run gives (tested).
    MarSamplingHooks* hooks = lazy.chain.get();
    for (int64_t i = 0; i < a.warmup; ++i) pipe.generate(opt, hooks);
    for (int64_t r = 0; r < a.repeat; ++r) {
        m.last = pipe.generate(opt, hooks);
        m.totals.push_back(m.last.total_millis - m.last.decode_millis);
        std::cerr << "    " << name << " run " << r + 1 << ": " << m.totals.back() << " ms"
                  << (m.last.cuda_graphs ? " (CUDA graphs)" : "")
                  << std::endl;  // flushed: a run cut short by a time limit still reports
    }
    m.graphs = m.last.cuda_graphs;
    m.flops = lazymar_planned_flops(c, accel.lazymar, opt.num_iter,
                                    int64_t(opt.class_ids.size()), opt.cfg,
                                    pipe.sampler().diffusion().schedule().num_steps());
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
                  << ratio << "x  (transformer " << (f.linear + f.attention) / 1e12
                  << " T, ratio " << tr << "x; head " << f.diffusion / 1e12 << " T)\n";
        methods.push_back({{"method", name},
                           {"summary", accel.summary()},
                           {"config", accel.to_json()},
                           {"flops", f.to_json()},
                           {"flops_ratio", ratio},
                           {"transformer_flops_ratio", tr}});
    }
    return {{"model", preset}, {"config", c.to_json()}, {"methods", methods}};
}

nlohmann::json bench_model(const std::string& preset, const BenchMarArgs& a) {
    if (a.planned) return planned_model(preset, a);
    MarConfig c = mar_config_argument(preset);
    c.num_sampling_steps = a.sampling_steps;
    MarPipeline pipe = MarPipeline::random(c, 0, {a.device, parse_precision(a.precision)});
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
                           {"graph_capture_ms", m.last.graph_capture_millis}});
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
    nlohmann::json j = environment_json(a.planned ? "none (planned FLOPs)" : a.device);
    j.update({{"precision", a.precision},
              {"batch", a.batch},
              {"num_iter", a.num_iter},
              {"cfg", a.cfg},
              {"cfg_schedule", "linear"},
              {"diffusion_steps", a.sampling_steps},
              {"warmup_runs", a.warmup},
              {"runs", a.repeat},
              {"timing", a.planned ? "none: FLOPs from the step plan (lazymar_planned_flops)" : "whole loop (transformer + DiffLoss head, no VAE), one device sync per run; FLOPs from the step plan"},
              {"models", nlohmann::json::array()}});
    for (const auto& m : a.models) j["models"].push_back(bench_model(m, a));
    if (!a.json.empty()) {
        write_json(j, a.json, a.force);
        std::cerr << "wrote " << a.json << "\n";
    }
    return 0;
}

}  // namespace

Runner add_bench_mar(CLI::App& bench) {
    auto a = std::make_shared<BenchMarArgs>();
    auto* cmd = bench.add_subcommand("mar", "MAR (random weights) baseline vs LazyMAR: latency, FLOPs, ratios");
    cmd->add_option("--models", a->models, "MAR presets or JSON configs")->delimiter(',')->capture_default_str();
    cmd->add_option("--methods", a->methods, "baseline first, then MAR presets or JSON (" + mar_preset_names() + ")")->delimiter(',')->capture_default_str();
    cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--precision", a->precision, "transformer precision")->check(CLI::IsMember({"fp32", "fp16", "bf16"}))->capture_default_str();
    cmd->add_option("--batch", a->batch, "images per run")->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--num-iter", a->num_iter, "decoding steps")->check(CLI::Range(1, 4096))->capture_default_str();
    cmd->add_option("--cfg", a->cfg, "classifier-free guidance (linear schedule)")->capture_default_str();
    cmd->add_option("--num-sampling-steps", a->sampling_steps, "diffusion respacing")->capture_default_str();
    cmd->add_option("--repeat", a->repeat, "timed runs per method")->check(CLI::Range(1, 1000))->capture_default_str();
    cmd->add_option("--warmup", a->warmup, "untimed runs per method first")->check(CLI::Range(0, 100))->capture_default_str();
    cmd->add_option("--json", a->json, "write the results as JSON");
    cmd->add_flag("--force", a->force, "overwrite --json");
    cmd->add_flag("--planned-flops", a->planned, "no runs: FLOPs of each method from the step plan (equal to what a run counts)");
    cmd->add_flag("--no-cuda-graphs", a->no_cuda_graphs, "run the MAR loop eagerly on CUDA (no graph replay)");
    cmd->add_flag("--compare-eager", a->compare_eager, "one more run per method without CUDA graphs: its time and whether its tokens equal the graphed ones");
    cmd->add_flag("--split", a->split, "one more run per method with device syncs that splits each step into transformer and DiffLoss-head time");
    return [a]() { return run(*a); };
}

}  // namespace varscope::cli
