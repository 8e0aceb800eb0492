// `varscope-cli bench e2e`: the whole sampling loop of a model of any family (written once
// against core's Runner) for the baseline and each accelerator setting, side by side in one
// run: per-step latency, total, attention FLOPs, KV bytes, peak device memory, and how the
// result compares with the baseline's for the same seed (VAR: identical tokens per scale; MAR:
// the latents' relative difference). The VAE decode is excluded as the papers measure it
// (--decode includes it). The dense baseline replays CUDA graphs on CUDA (captured during the
// warm-up; capture time reported separately); a method name with the suffix "@eager" runs
// without them (e.g. "baseline@eager"). Accelerators whose hooks declare a graph signature
// replay graphs too; with both "X" and "X@eager" the JSON says whether their results agree.
//
// Cost model (core/sampling/step_cost.h; VAR, Infinity; --no-cost-model turns it off): per method
// and step, the device time and FLOPs of the input, projections, attention, Infinity's attention
// over the text (cross_attention), FFN, the method's own overhead and the head, the time outside
// the transformer forward (sampling, f_hat update, step-level hooks), and the kernels each step's
// CUDA graph launches. The part times come from two extra runs with CUDA events between the parts
// (the second is read; the events cost a little, so these runs are not the timed ones:
// "cost_model.timed_total_ms" says how much); on the CPU from one extra run timed by the host
// clock. From them each method's work ceiling (core/sampling/work_ceiling.h: its FLOPs at the
// dense run's rates, its overhead free) and the most it can gain over the dense run, the short
// table's "ceiling" column: a speed target above it is bounded by the method's arithmetic.
//
// --max-batch [CAP] (issue #30: a memory saving shown as throughput): per method, the largest
// batch that fits is searched in this process first (core/runner/batch_search.h: one run per
// try, doubling from --batch, then bisection; everything the try held is released after it),
// then the method is timed at its own largest batch. The report puts the methods side by side:
// largest batch, the first batch that ran out of memory, peak device memory beside the estimate,
// images/s, and both as ratios over the baseline's. The memory pre-check does not apply there:
// the search measures.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/mar_cli_common.h"  // check_output_file
#include "app/cli/run_args.h"
#include "app/cli/run_report.h"
#include "app/cli/torch_trace.h"
#include "core/io/checkpoint.h"
#include "core/runner/batch_search.h"
#include "core/sampling/step_cost_json.h"
#include "core/sampling/work_ceiling.h"
#include "kernels/memory_stats.h"

namespace varscope::cli {
namespace {

struct E2eArgs {
    ModelArgs model;
    SampleArgs sampling;
    std::vector<std::string> methods;  // empty: the family's default list
    int64_t repeat = 5, warmup = 2;
    std::string json, tokens_out;
    bool force = false;
    bool decode = false;         // time the VAE decode too (as the official samplers return images)
    bool no_scale_sync = false;  // no device sync per scale (per-scale times are then host times)
    bool no_cost_model = false;  // no extra runs with part times
    int64_t max_batch = 0;       // --max-batch's cap; 0 = off (time at --batch)
    std::string trace_dir;       // --trace: one more run per method under the profiler
};

constexpr const char* kEagerSuffix = "@eager";
constexpr const char* kOutOfDeviceMemory = "out of device memory";

// What a bench compares when no --methods are given.
std::vector<std::string> default_methods(Family f) {
    if (f == Family::Mar) return {"baseline", "lazymar"};
    // The papers' Infinity-2B settings (issue #32's table: FastVAR, LazyVAR, SparVAR, SparVAR +
    // skip-2 over our dense run), then the generic presets that fit any schedule.
    if (f == Family::Infinity)
        return {"baseline",
                "infinity-fastvar",
                "infinity-lazyvar",
                "infinity-sparvar",
                "infinity-sparvar+skip",
                "skip",
                "ams_kv"};
    return {"baseline", "skip",         "fastvar",        "sparvar",     "lazyvar",
            "ams_kv",   "sparvar+skip", "fastvar+ams_kv", "lazyvar+skip"};
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct MethodResult {
    std::string name, summary, error;
    std::string cost_error;  // the cost model's runs failed (the timings stand)
    nlohmann::json config;
    std::vector<double> totals;
    std::vector<std::vector<double>> scale_ms;
    RunResult last;
    int64_t peak_bytes = 0;
    double capture_ms = 0.0;  // CUDA graph capture, summed over all runs (the first one captures)
    std::optional<RunResult> cost;      // the run with part times (CUDA, cost model on)
    int64_t batch = 0;                  // the images of each run
    std::optional<BatchSearch> search;  // --max-batch: how the batch was found
    MemoryEstimate estimate;            // the estimate for this method's batch
    std::string trace;                  // --trace: the profiled run's file
    double images_per_s() const { return totals.empty() ? 0.0 : batch / (median(totals) / 1000.0); }
};

// The cost table's column heads.
const char* cost_part_label(CostPart p) {
    switch (p) {
        case CostPart::Projection:
            return "proj";
        case CostPart::Attention:
            return "attn";
        case CostPart::CrossAttention:
            return "xattn";
        case CostPart::Overhead:
            return "ovhd";
        default:
            return cost_part_name(p);
    }
}

// The cost model of one method: per step, from the timed runs' median scale times, the FLOPs
// and launches of the last timed run and the part times of the cost run.
nlohmann::json cost_model_json(const MethodResult& r, const std::vector<double>& median_scale_ms) {
    nlohmann::json steps = nlohmann::json::array();
    std::array<double, kCostParts> ms_sum{}, flops_sum{};
    double outside_sum = 0.0;
    int64_t launches = 0;
    bool all_graphs = true, all_timed = r.cost.has_value();
    for (size_t i = 0; i < r.last.step_costs.size(); ++i) {
        const auto& sc = r.last.step_costs[i];
        nlohmann::json st = {{"scale", sc.scale},
                             {"scales", sc.scales},
                             {"ms", median_scale_ms.at(sc.scale)},
                             {"launches", sc.launches},
                             {"flops", cost_parts_json(sc.flops)}};
        for (int p = 0; p < kCostParts; ++p) flops_sum[p] += sc.flops[p];
        if (sc.launches >= 0)
            launches += sc.launches;
        else
            all_graphs = false;
        const StepCost* timed =
            r.cost && i < r.cost->step_costs.size() && r.cost->step_costs[i].timed
                ? &r.cost->step_costs[i]
                : nullptr;
        if (timed) {
            double parts = 0.0;
            for (int p = 0; p < kCostParts; ++p) {
                ms_sum[p] += timed->ms[p];
                parts += timed->ms[p];
            }
            // The step's device-synchronised time in the same run, less its forward's parts.
            const double outside = r.cost->step_millis.at(sc.scale) - parts;
            outside_sum += outside;
            st["part_ms"] = cost_parts_json(timed->ms);
            st["outside_ms"] = outside;
            st["timed_step_ms"] = r.cost->step_millis.at(sc.scale);
        } else {
            all_timed = false;
        }
        steps.push_back(st);
    }
    nlohmann::json j = {{"steps", steps}, {"flops", cost_parts_json(flops_sum)}};
    if (all_graphs) j["launches"] = launches;
    if (all_timed) {
        j["part_ms"] = cost_parts_json(ms_sum);
        j["outside_ms"] = outside_sum;
        double total = 0.0;
        for (double v : r.cost->step_millis) total += v;
        j["timed_total_ms"] = total;
    }
    return j;
}

// The readable cost table of one method: one line per step, then the sums. The text's attention
// (Infinity) gets a column where the model has one.
void print_cost_table(const nlohmann::json& m) {
    const auto& cm = m["cost_model"];
    const bool timed = cm.contains("part_ms");
    const bool cross = cm["flops"].value(cost_part_name(CostPart::CrossAttention), 0.0) > 0.0;
    std::vector<CostPart> columns = {CostPart::Input, CostPart::Projection, CostPart::Attention};
    if (cross) columns.push_back(CostPart::CrossAttention);
    for (auto p : {CostPart::Ffn, CostPart::Overhead, CostPart::Head}) columns.push_back(p);
    std::cout << "\n"
              << m["name"].get<std::string>() << ": per-step cost"
              << (timed ? " (ms from the event-timed run; 'clean' = the timed runs' median)"
                        : " (no part times)")
              << "\n";
    std::cout << std::right << std::setw(5) << "scale" << std::setw(8) << "clean" << std::setw(7)
              << "launch";
    for (const auto p : columns) std::cout << std::setw(8) << cost_part_label(p);
    std::cout << std::setw(8) << "outside";
    std::cout << std::setw(9) << "GFLOP" << std::setw(7) << "attn%"
              << "\n";
    auto line = [&](const std::string& label, double clean, int64_t launches,
                    const nlohmann::json* part_ms, const nlohmann::json* outside,
                    const nlohmann::json& flops) {
        std::cout << std::setw(5) << label << std::fixed << std::setprecision(2) << std::setw(8)
                  << clean << std::setw(7) << (launches >= 0 ? std::to_string(launches) : "-");
        double parts = 0.0, attn = 0.0;
        if (part_ms)  // every part, shown or not (a part without a column is 0)
            for (int p = 0; p < kCostParts; ++p)
                parts += (*part_ms)[cost_part_name(static_cast<CostPart>(p))].get<double>();
        for (const auto p : columns) {
            if (part_ms) {
                const double v = (*part_ms)[cost_part_name(p)].get<double>();
                if (p == CostPart::Attention) attn = v;
                std::cout << std::setw(8) << v;
            } else {
                std::cout << std::setw(8) << "-";
            }
        }
        if (outside)
            std::cout << std::setw(8) << outside->get<double>();
        else
            std::cout << std::setw(8) << "-";
        double gflop = 0.0;
        for (const auto& [k, v] : flops.items()) gflop += v.get<double>() / 1e9;
        std::cout << std::setw(9) << std::setprecision(1) << gflop << std::setw(6)
                  << std::setprecision(0) << (parts > 0 ? 100.0 * attn / parts : 0.0) << "%\n";
    };
    double clean_sum = 0.0;
    for (const auto& st : cm["steps"]) {
        clean_sum += st["ms"].get<double>();
        line(std::to_string(st["scale"].get<int64_t>()), st["ms"].get<double>(),
             st["launches"].get<int64_t>(), st.contains("part_ms") ? &st["part_ms"] : nullptr,
             st.contains("outside_ms") ? &st["outside_ms"] : nullptr, st["flops"]);
    }
    line("sum", clean_sum, cm.contains("launches") ? cm["launches"].get<int64_t>() : -1,
         timed ? &cm["part_ms"] : nullptr, timed ? &cm["outside_ms"] : nullptr, cm["flops"]);
}

// The accelerator a method name runs (null for "baseline"); "X@eager" is X with CUDA graphs off
// in `opt`. Throws what the --accel parser throws for a name it cannot read.
std::shared_ptr<const AccelPlan> method_plan(const Runner& runner, const std::string& name,
                                             SampleSettings& opt, const E2eArgs& a) {
    std::string accel = name;
    if (ends_with(name, kEagerSuffix)) {
        opt.cuda_graphs = false;
        accel = name.substr(0, name.size() - std::string(kEagerSuffix).size());
    }
    return a.sampling.accel(runner, accel == "baseline" ? "" : accel);
}

// --trace: the file of the method at `index` (NN-<method>.trace.json in the folder).
std::string trace_path(const E2eArgs& a, size_t index, const std::string& name) {
    return (std::filesystem::path(a.trace_dir) / trace_file_name(static_cast<int>(index), name))
        .string();
}

MethodResult run_method(Runner& runner, SampleSettings opt, const std::string& name,
                        const E2eArgs& a, int index) {
    MethodResult m;
    m.name = name;
    m.batch = opt.images();
    m.estimate = runner.estimate_memory(opt);
    const at::Device device = runner.device();
    const bool cuda = device.is_cuda();
    const int dev = cuda ? device.index() < 0 ? 0 : device.index() : 0;
    std::shared_ptr<const AccelPlan> plan;
    try {
        plan = method_plan(runner, name, opt, a);
        m.estimate = runner.estimate_memory(opt, plan.get());  // the method's own KV bound
        m.summary = plan ? plan->describe() : "baseline";
        m.config = plan ? plan->to_json() : nlohmann::json::object();
        if (cuda) kernels::empty_cuda_cache();
        const int64_t before = cuda ? kernels::cuda_memory(dev).allocated : 0;
        if (cuda) kernels::reset_cuda_peak_memory(dev);
        for (int64_t i = 0; i < a.warmup; ++i)
            m.capture_ms += runner.generate(opt, plan.get()).graph_capture_millis;
        // Without per-step syncs the last warm-up may still run on the device.
        synchronize_device(device);
        for (int64_t r = 0; r < a.repeat; ++r) {
            // Wall time to the device's last result (the loop syncs only per step, if asked).
            const auto t0 = std::chrono::steady_clock::now();
            m.last = runner.generate(opt, plan.get());
            synchronize_device(device);
            const double wall =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
            m.capture_ms += m.last.graph_capture_millis;
            // Capture is host work on the first call only: it is reported, not timed.
            m.totals.push_back(wall - m.last.graph_capture_millis);
            m.scale_ms.push_back(m.last.step_millis);
        }
        if (cuda) m.peak_bytes = kernels::cuda_memory(dev).peak_allocated - before;
        if (!a.trace_dir.empty()) {  // after the timed runs: the graphs are captured by now
            const std::string path = trace_path(a, static_cast<size_t>(index), name);
            try {  // a trace that fails costs the trace only, never the timings above
                run_traced(path, cuda, [&] {
                    runner.generate(opt, plan.get());
                    synchronize_device(device);
                });
                m.trace = path;
            } catch (const std::exception& e) {
                std::cerr << " (trace failed: " << e.what() << ")" << std::flush;
            }
        }
    } catch (const std::exception& e) {
        m.error = is_out_of_memory(e) ? kOutOfDeviceMemory : e.what();
    }
    if (m.error.empty() && !a.no_cost_model && !m.last.step_costs.empty()) {
        // The event-timed steps are graphs of their own (another key): the timed runs' set,
        // with its KV cache, goes first, or a batch that fits once would need room for two.
        // Out of memory here costs the breakdown only, never the timings above.
        runner.release_graphs();
        if (cuda) kernels::empty_cuda_cache();
        try {
            // CUDA: the first run captures the event-timed graphs (a graph run), the second is
            // read. The CPU times its parts by the host clock in one run.
            SampleSettings timed = opt;
            timed.time_parts = true;
            for (int i = 0; i < (cuda ? 2 : 1); ++i) m.cost = runner.generate(timed, plan.get());
        } catch (const std::exception& e) {
            m.cost.reset();
            m.cost_error = is_out_of_memory(e) ? kOutOfDeviceMemory : e.what();
        }
    }
    // Each method's graph sets hold a KV cache of their own: free them before the next method.
    runner.release_graphs();
    if (cuda) kernels::empty_cuda_cache();
    return m;
}

// --max-batch: the method's largest batch, one run per try (try_runner_batch: the graphs it
// captures included, everything it held released after it); then the method timed at that batch
// as run_method times it.
MethodResult run_method_at_max_batch(Runner& runner, const SampleSettings& opt,
                                     const std::string& name, const E2eArgs& a, int index) {
    SampleSettings s = opt;
    std::shared_ptr<const AccelPlan> plan;
    try {
        plan = method_plan(runner, name, s, a);
    } catch (const std::exception& e) {
        MethodResult m;
        m.name = name;
        m.error = e.what();
        return m;
    }
    auto attempt = [&](int64_t b) {
        std::cerr << " " << b << std::flush;
        const BatchTry t = try_runner_batch(runner, s, plan.get(), b);
        std::cerr << (t.outcome == BatchOutcome::Fits          ? " fits,"
                      : t.outcome == BatchOutcome::OutOfMemory ? " out of memory,"
                                                               : " failed,");
        return t;
    };
    std::cerr << " batch" << std::flush;
    const BatchSearch search = search_largest_batch(attempt, a.max_batch, opt.images());
    std::cerr << " largest " << search.describe() << std::flush;
    MethodResult m;
    if (search.largest > 0) {
        // The timed runs repeat the try that fit. Should they still run out of memory (the
        // allocator's state is not exactly the try's), a somewhat smaller batch is timed, twice
        // at most, rather than none: the report's batch then differs from largest_batch.
        int64_t b = search.largest;
        for (int retry = 0;; ++retry) {
            std::cerr << "; at batch " << b << ":" << std::flush;
            m = run_method(runner, with_images(opt, b), name, a, index);
            if (m.error != kOutOfDeviceMemory || retry == 2 || b == 1) break;
            std::cerr << " " << kOutOfDeviceMemory << std::flush;
            b = std::max<int64_t>(1, b - std::max<int64_t>(1, b / 8));
        }
    } else {
        m.name = name;
        m.estimate = runner.estimate_memory(with_images(opt, 1));
        m.error = search.error
                      ? "batch " + std::to_string(search.error->batch) + ": " + search.error->error
                      : "not even batch 1 fits: " + search.tries.back().error;
    }
    m.search = search;
    return m;
}

std::string fixed_text(double v, int decimals) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(decimals) << v;
    return o.str();
}

// --max-batch's table: per method its largest batch and what that batch gives.
void print_max_batch_table(const nlohmann::json& methods) {
    const double gib = 1024.0 * 1024 * 1024;
    std::cout << "\n"
              << std::left << std::setw(18) << "method" << std::right << std::setw(8) << "batch"
              << std::setw(26) << "first failed" << std::setw(11) << "peak GiB" << std::setw(11)
              << "est. GiB" << std::setw(12) << "total ms" << std::setw(10) << "images/s"
              << std::setw(9) << "x img/s" << std::setw(9) << "x batch"
              << "\n";
    for (const auto& m : methods) {
        std::cout << std::left << std::setw(18) << m["name"].get<std::string>() << std::right;
        const auto* search = m.contains("max_batch") ? &m["max_batch"] : nullptr;
        std::string failed = "-";
        if (search && (*search)["fits_up_to_cap"].get<bool>())
            failed = "none: fits up to the cap";
        else if (search && !(*search)["first_failed_batch"].is_null())
            failed = std::to_string((*search)["first_failed_batch"].get<int64_t>());
        if (m.contains("error")) {
            std::cout << std::setw(8) << "-" << std::setw(26) << failed << "  "
                      << m["error"].get<std::string>() << "\n";
            continue;
        }
        // No device memory is measured off CUDA (a CPU run is a smoke test of the search).
        const auto peak = m["peak_device_bytes"].get<int64_t>();
        std::cout << std::setw(8) << m["batch"].get<int64_t>() << std::setw(26) << failed
                  << std::fixed << std::setprecision(2) << std::setw(11)
                  << (peak > 0 ? fixed_text(peak / gib, 2) : std::string("-")) << std::setw(11)
                  << m["memory_estimate"]["bytes"].get<int64_t>() / gib << std::setw(12)
                  << m["median_total_ms"].get<double>() << std::setw(10)
                  << m["images_per_s"].get<double>();
        if (m.contains("images_per_s_ratio"))
            std::cout << std::setw(8) << m["images_per_s_ratio"].get<double>() << "x"
                      << std::setw(8) << m["batch_ratio"].get<double>() << "x";
        std::cout << "\n";
        if (search && (*search)["largest_batch"] != m["batch"])
            std::cout << "    timed at batch " << m["batch"] << ": the timed runs at "
                      << (*search)["largest_batch"] << " ran out of memory\n";
        if (search && search->contains("error"))
            std::cout << "    search stopped at batch " << (*search)["error"]["batch"] << ": "
                      << (*search)["error"]["message"].get<std::string>() << "\n";
    }
}

// Share of identical results over all steps, from the runner's per-step comparison (VAR:
// "identical_tokens" per scale, weighted by the scale's tokens); nullopt for a family that
// compares otherwise.
std::optional<double> identical_share(const Runner& runner, const RunResult& base,
                                      const RunResult& other, std::vector<double>* per_step) {
    const auto steps = runner.compare_steps(base, other);
    double same = 0, total = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
        if (!steps[i].contains("identical_tokens")) return std::nullopt;
        const double f = steps[i]["identical_tokens"].get<double>();
        const double n = i < base.step_tokens.size() ? double(base.step_tokens[i].numel()) : 1.0;
        same += f * n;
        total += n;
        if (per_step) per_step->push_back(f);
    }
    return total > 0 ? same / total : 1.0;
}

int run(const E2eArgs& a) {
    check_output_file(a.json, a.force, "--json");  // a bad path fails now, not after the runs
    check_output_file(a.tokens_out, a.force, "--tokens-out");
    check_distinct_outputs({{"--json", a.json}, {"--tokens-out", a.tokens_out}});
    if (!a.trace_dir.empty()) prepare_output_dir(a.trace_dir, "--trace");
    auto runner = a.model.build();
    SampleSettings opt = a.sampling.resolve(*runner);
    opt.decode = a.decode;
    opt.time_steps = !a.no_scale_sync;
    runner->validate(opt);
    const std::vector<std::string> names =
        a.methods.empty() ? default_methods(runner->family()) : a.methods;
    // The trace files too, before any run: an earlier run's are kept unless --force.
    std::vector<std::pair<std::string, std::string>> outputs = {{"--json", a.json},
                                                                {"--tokens-out", a.tokens_out}};
    if (!a.trace_dir.empty())
        for (size_t i = 0; i < names.size(); ++i) {
            outputs.push_back({"--trace", trace_path(a, i, names[i])});
            check_output_file(outputs.back().second, a.force, "--trace");
        }
    check_distinct_outputs(outputs);
    // Each method against its own estimate (AMS-KV's bounded cache fits batches the baseline's
    // would not). --max-batch measures what fits: no estimate refuses its tries.
    if (a.max_batch == 0)
        for (const auto& name : names) {
            SampleSettings own = opt;  // "X@eager" turns graphs off in it
            std::shared_ptr<const AccelPlan> plan;
            try {
                plan = method_plan(*runner, name, own, a);
            } catch (const std::exception&) {
                continue;  // run_method reports a method it cannot parse
            }
            try {
                a.sampling.check_memory(*runner, own, plan.get());
            } catch (const std::invalid_argument& e) {
                throw std::invalid_argument(name + ": " + e.what());
            }
        }
    std::cerr << runner->describe() << "\n"
              << "device " << runner->device() << ", "
              << (a.max_batch ? "largest batch up to " + std::to_string(a.max_batch) + " from " +
                                    std::to_string(opt.images())
                              : "batch " + std::to_string(opt.images()))
              << ", " << a.warmup << " warm-up + " << a.repeat << " timed runs per method\n";

    std::vector<MethodResult> results;
    for (const auto& name : names) {
        std::cerr << "  " << name << " ..." << std::flush;
        const int index = static_cast<int>(results.size());
        results.push_back(a.max_batch ? run_method_at_max_batch(*runner, opt, name, a, index)
                                      : run_method(*runner, opt, name, a, index));
        const auto& r = results.back();
        std::cerr << (r.error.empty() ? " " + std::to_string(median(r.totals)) + " ms"
                                      : " failed: " + r.error)
                  << (r.cost_error.empty() ? "" : " (cost model failed: " + r.cost_error + ")")
                  << "\n";
    }
    const MethodResult* base = nullptr;
    for (const auto& r : results)
        if (r.name == "baseline" && r.error.empty()) base = &r;

    nlohmann::json j = environment_json(runner->device().str());
    j.update({{"model", runner->describe()},
              {"family", family_id(runner->family())},
              {"config", runner->config_json()},
              {"precision", a.model.precision},
              {"batch", a.max_batch ? nlohmann::json(nullptr) : nlohmann::json(opt.images())},
              {"settings", runner->settings_json(opt)},
              {"seed", a.sampling.seed},
              {"runs", a.repeat},
              {"warmup_runs", a.warmup},
              {"cuda_graphs", opt.cuda_graphs},
              {"step_sync", opt.time_steps},
              {"memory_estimate",
               a.max_batch ? nlohmann::json(nullptr) : runner->estimate_memory(opt).to_json()},
              {"timing",
               std::string("transformer + sampling per ") + runner->step_noun() + ", VAE decode " +
                   (opt.decode ? "included" : "excluded") + "; median of runs" +
                   (opt.cuda_graphs ? "; CUDA graph capture excluded (graph_capture_ms)" : "")}});
    if (a.max_batch)
        j["max_batch"] = {
            {"cap", a.max_batch},
            {"start", opt.images()},
            {"meaning",
             "per method, the largest batch whose run (with this run's CUDA graphs and settings) "
             "fit on this device in this process: doubling from start, then bisection, one run "
             "per try, everything released between tries; each method is timed at its own "
             "largest batch"}};
    nlohmann::json methods = nlohmann::json::array();
    for (const auto& r : results) {
        nlohmann::json m = {{"name", r.name},
                            {"summary", r.summary},
                            {"accel", r.config},
                            {"batch", r.batch},
                            {"memory_estimate", r.estimate.to_json()}};
        if (r.search) m["max_batch"] = r.search->to_json();
        if (!r.trace.empty()) m["trace"] = r.trace;
        if (!r.error.empty()) {
            m["error"] = r.error;
            methods.push_back(m);
            continue;
        }
        std::vector<double> per_scale;
        for (size_t si = 0; si < r.last.step_millis.size(); ++si) {
            std::vector<double> v;
            for (const auto& run : r.scale_ms) v.push_back(run[si]);
            per_scale.push_back(median(v));
        }
        m.update({{"median_total_ms", median(r.totals)},
                  {"cuda_graphs", r.last.cuda_graphs},
                  {"graph_capture_ms", r.capture_ms},
                  {"total_ms_each", r.totals},
                  {"median_step_ms", per_scale},
                  {"attention_flops", r.last.attention_flops},
                  {"kv_bytes_end", r.last.kv_bytes},
                  {"kv_bytes_peak", r.last.kv_bytes_peak},
                  {"peak_device_bytes", r.peak_bytes},
                  {"images_per_s", r.images_per_s()},
                  {"flops", r.last.flops}});
        if (!r.last.step_costs.empty()) m["cost_model"] = cost_model_json(r, per_scale);
        if (!r.cost_error.empty()) m["cost_model_error"] = r.cost_error;
        // "X" and "X@eager" in one run: the same seed, so the graphs must draw the eager tokens.
        const std::string partner_name =
            ends_with(r.name, kEagerSuffix)
                ? r.name.substr(0, r.name.size() - std::string(kEagerSuffix).size())
                : r.name + kEagerSuffix;
        for (const auto& q : results)
            if (q.name == partner_name && q.error.empty() && q.batch == r.batch) {
                if (const auto same = identical_share(*runner, q.last, r.last, nullptr))
                    m["identical_tokens_graphs_vs_eager"] = *same;
                else
                    m["graphs_vs_eager"] = runner->compare_summary(q.last, r.last);
            }
        if (base && a.max_batch) {
            // Different batches: throughput and batch are compared, not times or tokens.
            m["images_per_s_ratio"] = r.images_per_s() / base->images_per_s();
            // The largest batches found (the timed batch is the same unless it had to step down).
            const auto largest = [](const MethodResult& x) {
                return x.search ? x.search->largest : x.batch;
            };
            m["batch_ratio"] = static_cast<double>(largest(r)) / largest(*base);
            m["peak_device_ratio"] =
                base->peak_bytes ? static_cast<double>(r.peak_bytes) / base->peak_bytes : 0.0;
        } else if (base) {
            m.update(
                {{"speedup", median(base->totals) / median(r.totals)},
                 {"attention_flops_ratio", base->last.attention_flops > 0
                                               ? r.last.attention_flops / base->last.attention_flops
                                               : 0.0},
                 {"kv_bytes_ratio",
                  base->last.kv_bytes_peak > 0
                      ? static_cast<double>(r.last.kv_bytes_peak) / base->last.kv_bytes_peak
                      : 0.0},
                 {"peak_device_ratio",
                  base->peak_bytes ? static_cast<double>(r.peak_bytes) / base->peak_bytes : 0.0},
                 {"vs_baseline", runner->compare_summary(base->last, r.last)}});
            // The most the method's arithmetic can gain over this dense run (work_ceiling.h).
            if (r.cost && base->cost)
                if (const auto wc = work_ceiling(r.cost->step_costs, base->cost->step_costs,
                                                 base->cost->step_millis))
                    m["work_ceiling"] = {
                        {"ms", wc->ms}, {"dense_ms", wc->dense_ms}, {"speedup", wc->speedup()}};
            std::vector<double> fr;
            if (const auto same = identical_share(*runner, base->last, r.last, &fr)) {
                m["identical_tokens_per_step"] = fr;
                m["identical_tokens"] = *same;
            } else {
                m["per_step_vs_baseline"] = runner->compare_steps(base->last, r.last);
            }
        }
        methods.push_back(m);
    }
    j["methods"] = methods;
    if (!a.json.empty()) write_json(j, a.json, a.force);
    if (!a.tokens_out.empty() && !results.empty() && results.front().error.empty()) {
        // The first method's tokens of its last run in the family's layout, for parity checks.
        save_safetensors(results.front().last.tensors, a.tokens_out,
                         {{"seed", std::to_string(a.sampling.seed)},
                          {"method", results.front().name},
                          {"family", family_id(runner->family())}});
    }

    for (const auto& m : methods)
        if (m.contains("cost_model")) print_cost_table(m);
    if (a.max_batch) {
        print_max_batch_table(methods);
        return 0;
    }
    // The short table, last.
    std::cout << "\n"
              << std::left << std::setw(18) << "method" << std::right << std::setw(11) << "total ms"
              << std::setw(9) << "speedup" << std::setw(9) << "ceiling" << std::setw(11)
              << "attn FLOPs" << std::setw(10) << "KV peak" << std::setw(12) << "device MB"
              << std::setw(11) << "same tok" << std::setw(8) << "graphs"
              << "\n";
    for (const auto& m : methods) {
        std::cout << std::left << std::setw(18) << m["name"].get<std::string>() << std::right;
        if (m.contains("error")) {
            std::cout << "  " << m["error"].get<std::string>() << "\n";
            continue;
        }
        std::cout << std::fixed << std::setprecision(2) << std::setw(11)
                  << m["median_total_ms"].get<double>();
        if (m.contains("speedup")) {
            std::cout << std::setw(8) << m["speedup"].get<double>() << "x";
            if (m.contains("work_ceiling"))
                std::cout << std::setw(8) << m["work_ceiling"]["speedup"].get<double>() << "x";
            else
                std::cout << std::setw(9) << "-";
            std::cout << std::setw(10) << 100 * m["attention_flops_ratio"].get<double>() << "%"
                      << std::setw(9) << 100 * m["kv_bytes_ratio"].get<double>() << "%";
        } else {
            std::cout << std::setw(39) << "";
        }
        std::cout << std::setw(12) << std::setprecision(0)
                  << m["peak_device_bytes"].get<int64_t>() / 1048576.0;
        if (m.contains("identical_tokens"))
            std::cout << std::setw(10) << std::setprecision(1)
                      << 100 * m["identical_tokens"].get<double>() << "%";
        std::cout << std::setw(8) << (m["cuda_graphs"].get<bool>() ? "yes" : "no") << "\n";
    }
    return 0;
}

}  // namespace

Command add_bench_e2e(CLI::App& bench) {
    auto a = std::make_shared<E2eArgs>();
    auto* cmd = bench.add_subcommand(
        "e2e", "whole sampling loop of any family: baseline vs accelerator settings, side by side");
    a->model.add_to(*cmd, Family::Var);
    a->sampling.add_to(*cmd);
    cmd->add_option(
           "--methods", a->methods,
           "presets, JSON files or inline JSON, ';'-separated, in order; 'baseline' first "
           "for ratios; a '@eager' suffix runs without CUDA graphs (default: VAR " +
               [] {
                   std::string s;
                   for (const auto& m : default_methods(Family::Var))
                       s += (s.empty() ? "" : ";") + m;
                   return s;
               }() +
               "; MAR baseline;lazymar)")
        ->delimiter(';');
    cmd->add_option("--repeat", a->repeat, "timed runs per method")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->add_option("--warmup", a->warmup, "untimed runs per method first")
        ->check(CLI::Range(0, 100))
        ->capture_default_str();
    cmd->add_option("--json", a->json,
                    "write the results (with device, date, torch version) as JSON");
    cmd->add_flag("--force", a->force, "overwrite --json, --tokens-out and --trace's files");
    cmd->add_option("--tokens-out", a->tokens_out,
                    "write the first method's tokens (last run, the family's layout) as "
                    ".safetensors");
    cmd->add_flag("--decode", a->decode, "include the VAE decode in the timings");
    cmd->add_flag("--no-scale-sync", a->no_scale_sync,
                  "no device sync per scale (totals only are device times)");
    cmd->add_flag("--no-cost-model", a->no_cost_model,
                  "skip the extra runs per method that time the parts of each step (CUDA: two, "
                  "CPU: one)");
    cmd->add_option("--max-batch", a->max_batch,
                    "per method, find the largest batch that fits (up to CAP, default 256; "
                    "doubling from --batch, then bisection, in this process), then time each "
                    "method at its own largest batch: batch and images/s side by side")
        ->expected(0, 1)
        ->default_str("256")
        ->type_name("[CAP]")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd->add_option("--trace", a->trace_dir,
                    "after each method's timed runs, one more run under the PyTorch profiler, "
                    "written to DIR as a Chrome trace (NN-<method>.trace.json)")
        ->type_name("DIR");
    return [a]() { return run(*a); };
}

}  // namespace varscope::cli
