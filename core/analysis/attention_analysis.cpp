#include "core/analysis/attention_analysis.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/sampling/var_sampler.h"  // synchronize_device
#include "kernels/memory_stats.h"

namespace varscope::analysis {
namespace {

using Clock = std::chrono::steady_clock;

double millis_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

bool selected(const std::vector<int64_t>& v, int64_t x) {
    return v.empty() || std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<int64_t> sampled_heads(int64_t heads, int64_t max_heads) {
    std::vector<int64_t> out;
    const int64_t n = max_heads <= 0 || max_heads >= heads ? heads : max_heads;
    for (int64_t i = 0; i < n; ++i) out.push_back(i * heads / n);
    return out;
}

AttentionCapture::AttentionCapture(ScheduleLayout layout, MaskSet masks, AnalysisOptions options)
    : layout_(std::move(layout)), masks_(std::move(masks)), options_(std::move(options)) {
    options_.measure.heads = sampled_heads(layout_.heads, options_.max_heads);
}

bool AttentionCapture::wants_attention_inputs(int64_t scale, int64_t layer) const {
    return selected(options_.scales, scale) && selected(options_.layers, layer);
}

void AttentionCapture::on_attention_inputs(const AttentionInputs& in) {
    synchronize_device(in.q.device());  // the block's own work is not the capture's
    const auto t = Clock::now();
    std::vector<int64_t> tokens;
    for (int64_t s = 0; s <= in.scale; ++s) tokens.push_back(layout_.tokens(s));
    auto m = measure_block(in.scale, in.layer, in.q, in.k, in.v, in.softmax_scale, tokens,
                           masks_.at(in.scale, in.layer), options_.measure, in.mask);
    for (auto& r : m.heads) records_.push_back(std::move(r));
    if (options_.measure.query_maps)
        maps_.push_back({in.scale, in.layer, options_.measure.heads, m.entropy_map, m.recall_map});
    synchronize_device(in.q.device());
    millis_ += millis_since(t);
}

const HeadMeasures* AttentionAnalysis::find(int64_t scale, int64_t layer, int64_t head) const {
    // Records are sorted by (scale, layer, head): a binary search, no index to keep in sync.
    const auto key = std::make_tuple(scale, layer, head);
    const auto it = std::lower_bound(records.begin(), records.end(), key,
                                     [](const HeadMeasures& r, const auto& k) {
                                         return std::make_tuple(r.scale, r.layer, r.head) < k;
                                     });
    return it != records.end() && std::make_tuple(it->scale, it->layer, it->head) == key ? &*it
                                                                                         : nullptr;
}

AttentionAnalysis analyze_attention(Runner& runner, const SampleSettings& settings,
                                    const AccelPlan& method, const AnalysisOptions& options) {
    if (runner.family() == Family::Mar)
        throw std::invalid_argument(
            "attention analysis needs a next-scale model (VAR or Infinity); MAR's attention has "
            "no scales");
    if (method.family() != runner.family())
        throw std::invalid_argument(std::string("the accelerator config is for ") +
                                    family_id(method.family()) + ", the model is " +
                                    family_id(runner.family()));
    const auto shape = runner.shape();
    AttentionAnalysis a;
    a.family = family_id(runner.family());
    a.model = runner.describe();
    a.method = method.summary();
    a.accel = method.to_json();
    a.layout = {shape.step_sides, shape.layers, shape.heads};
    for (auto s : options.scales)
        if (s < 0 || s >= static_cast<int64_t>(shape.step_sides.size()))
            throw std::invalid_argument("scale " + std::to_string(s) +
                                        " does not exist (the model has " +
                                        std::to_string(shape.step_sides.size()) + " scales)");
    for (auto l : options.layers)
        if (l < 0 || l >= shape.layers)
            throw std::invalid_argument("layer " + std::to_string(l) +
                                        " does not exist (the model has " +
                                        std::to_string(shape.layers) + " layers)");

    // The method's own run, with its records: what it keeps.
    ProbeRecorder recorder;
    const RunResult method_run = runner.generate(settings, &method, &recorder);
    a.method_ms = method_run.total_millis;
    const MaskSet masks = masks_of_run(AccelConfig::from_json(a.accel), recorder.accel(),
                                       recorder.scales(), a.layout);
    a.masked_blocks = static_cast<int64_t>(masks.size());

    // The dense baseline: once as it runs (the overhead's reference), once measured. On CUDA
    // the peak allocation of each is kept too: the measures' chunks must fit beside the run.
    const auto device = runner.device();
    const auto peak_of = [&](auto&& run) {
        if (device.is_cuda()) kernels::reset_cuda_peak_memory(device.index());
        const double ms = run();
        const int64_t peak =
            device.is_cuda() ? kernels::cuda_memory(device.index()).peak_allocated : 0;
        return std::make_pair(ms, peak);
    };
    if (options.time_dense)
        for (int64_t i = 0; i < std::max<int64_t>(1, options.dense_runs); ++i) {
            const auto [ms, peak] = peak_of([&] { return runner.generate(settings).total_millis; });
            if (i == 0) a.dense_first_ms = ms;
            a.dense_ms = i == 0 ? ms : std::min(a.dense_ms, ms);
            a.dense_peak_bytes = std::max(a.dense_peak_bytes, peak);
        }
    AttentionCapture capture(a.layout, masks, options);
    std::tie(a.capture_run_ms, a.capture_peak_bytes) =
        peak_of([&] { return runner.generate(settings, nullptr, &capture).total_millis; });
    a.capture_ms = capture.millis();
    a.heads = sampled_heads(shape.heads, options.max_heads);
    a.records = capture.records();
    std::stable_sort(a.records.begin(), a.records.end(), [](const auto& x, const auto& y) {
        return std::make_tuple(x.scale, x.layer, x.head) <
               std::make_tuple(y.scale, y.layer, y.head);
    });
    a.maps = capture.maps();
    a.head_types = type_heads(a.records, options.typing);
    a.layer_types = type_layers(a.records, options.typing);
    a.typing = options.typing;
    a.dense_runs = options.time_dense ? std::max<int64_t>(1, options.dense_runs) : 0;
    a.sink_scales = options.measure.sink_scales;
    return a;
}

nlohmann::json to_json(const AttentionAnalysis& a) {
    using nlohmann::json;
    json records = json::array();
    for (const auto& r : a.records)
        records.push_back({{"scale", r.scale},
                           {"layer", r.layer},
                           {"head", r.head},
                           {"queries", r.queries},
                           {"keys", r.keys},
                           {"query_kept", r.query_kept},
                           {"pair_density", r.pair_density},
                           {"recall", r.recall},
                           {"recall_computed", r.recall_computed},
                           {"output_error", r.output_error},
                           {"mass_by_scale", r.mass_by_scale},
                           {"mass_sink", r.mass_sink},
                           {"mass_local", r.mass_local},
                           {"mass_rest", r.mass_rest},
                           {"entropy", r.entropy},
                           {"entropy_normalized", r.entropy_normalized},
                           {"verticality", r.verticality}});
    json heads = json::array(), layers = json::array();
    for (const auto& h : a.head_types)
        heads.push_back({{"layer", h.layer},
                         {"head", h.head},
                         {"verticality", h.verticality},
                         {"type", h.type}});
    for (const auto& l : a.layer_types)
        layers.push_back({{"layer", l.layer}, {"mass_local", l.mass_local}, {"type", l.type}});
    const double overhead = a.dense_ms > 0 ? a.capture_run_ms / a.dense_ms : 0.0;
    return {{"family", a.family},
            {"model", a.model},
            {"method", a.method},
            {"accel", a.accel},
            {"schedule", a.layout.sides},
            {"layers", a.layout.layers},
            {"heads_total", a.layout.heads},
            {"heads", a.heads},
            {"masked_blocks", a.masked_blocks},
            {"timing",
             {{"method_ms", a.method_ms},
              {"dense_ms", a.dense_ms},  // the fastest of dense_runs
              {"dense_first_ms", a.dense_first_ms},
              {"dense_runs", a.dense_runs},
              {"dense_with_capture_ms", a.capture_run_ms},
              {"capture_ms", a.capture_ms},
              {"capture_slowdown", overhead},
              {"dense_peak_bytes", a.dense_peak_bytes},  // 0 off CUDA
              {"capture_peak_bytes", a.capture_peak_bytes}}},
            {"records", records},
            {"head_types", heads},
            {"layer_types", layers},
            {"typing_rule",
             {{"min_queries", a.typing.min_queries},
              {"verticality_threshold", a.typing.verticality_threshold},
              {"local_threshold", a.typing.local_threshold}}},
            {"sink_scales", a.sink_scales}};
}

std::string to_csv(const AttentionAnalysis& a) {
    std::ostringstream os;
    os << std::setprecision(9);
    const size_t S = a.layout.sides.size();
    os << "scale,layer,head,queries,keys,query_kept,pair_density,recall,recall_computed,"
          "output_error,mass_sink,mass_local,mass_rest,entropy,entropy_normalized,verticality";
    for (size_t j = 0; j < S; ++j) os << ",mass_scale_" << j;
    os << "\n";
    for (const auto& r : a.records) {
        os << r.scale << ',' << r.layer << ',' << r.head << ',' << r.queries << ',' << r.keys << ','
           << r.query_kept << ',' << r.pair_density << ',' << r.recall << ',' << r.recall_computed
           << ',' << r.output_error << ',' << r.mass_sink << ',' << r.mass_local << ','
           << r.mass_rest << ',' << r.entropy << ',' << r.entropy_normalized << ','
           << r.verticality;
        for (size_t j = 0; j < S; ++j) {
            os << ',';
            if (j < r.mass_by_scale.size()) os << r.mass_by_scale[j];
        }
        os << "\n";
    }
    return os.str();
}

}  // namespace varscope::analysis
