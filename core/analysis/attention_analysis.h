// One analysis of a method against the dense baseline (issue #35), for the CLI's `analyze` and
// the app: run the method with its records on (its mask, method_masks.h), then the dense
// baseline (same settings and seed) with AttentionCapture, which measures every selected block
// as it runs (attention_measures.h) and keeps only the numbers: records per scale x layer x
// head, cheap to query by (scale, layer, head), plus optional per-query maps.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/analysis/attention_measures.h"
#include "core/analysis/method_masks.h"
#include "core/runner/runner.h"

namespace varscope::analysis {

struct AnalysisOptions {
    MeasureOptions measure;       // its `heads` is set from max_heads
    int64_t max_heads = 0;        // 0 = every head; else this many, evenly spaced
    std::vector<int64_t> scales;  // empty = every scale
    std::vector<int64_t> layers;  // empty = every layer
    TypingRule typing;
    bool time_dense = true;  // also run the dense baseline without capture (overhead)
    // Dense runs timed; the fastest is the reference. The first run of a settings on CUDA
    // includes capturing its graphs, so a fair overhead on the GPU needs 2 or more.
    int64_t dense_runs = 1;
};

// Heads 0..heads-1 sampled evenly (all when max_heads is 0 or >= heads).
std::vector<int64_t> sampled_heads(int64_t heads, int64_t max_heads);

struct QueryMaps {
    int64_t scale = 0, layer = 0;
    std::vector<int64_t> heads;
    at::Tensor entropy, recall;  // float (heads, pn * pn), raster order of the scale
};

// Measures the dense run's blocks as they run (a ProbeSink: no accelerator records, so it does
// not slow anything else down; the attention inputs make the run eager).
class AttentionCapture : public ProbeSink {
  public:
    AttentionCapture(ScheduleLayout layout, MaskSet masks, AnalysisOptions options);
    bool wants_accel(const std::string&, const std::string&) const override { return false; }
    bool wants_attention_inputs(int64_t scale, int64_t layer) const override;
    void on_attention_inputs(const AttentionInputs& in) override;

    const std::vector<HeadMeasures>& records() const { return records_; }
    const std::vector<QueryMaps>& maps() const { return maps_; }
    double millis() const { return millis_; }  // spent measuring (device-synchronised)

  private:
    ScheduleLayout layout_;
    MaskSet masks_;
    AnalysisOptions options_;
    std::vector<HeadMeasures> records_;
    std::vector<QueryMaps> maps_;
    double millis_ = 0.0;
};

struct AttentionAnalysis {
    std::string family, model, method;  // method: the plan's summary
    nlohmann::json accel;               // the plan's JSON
    ScheduleLayout layout;
    std::vector<int64_t> heads;         // measured heads
    std::vector<HeadMeasures> records;  // scale-major, then layer, then head
    std::vector<QueryMaps> maps;
    std::vector<HeadType> head_types;
    std::vector<LayerType> layer_types;
    int64_t masked_blocks = 0;  // (scale, layer) entries where the method drops something
    TypingRule typing;          // the rule the types follow
    int64_t sink_scales = 2;    // mass_sink's scales
    double method_ms = 0, dense_ms = 0, capture_run_ms = 0, capture_ms = 0;
    double dense_first_ms = 0;  // the first dense run (graph capture included on CUDA)
    int64_t dense_runs = 0;
    int64_t dense_peak_bytes = 0, capture_peak_bytes = 0;  // CUDA peak allocation; 0 elsewhere

    // The record of (scale, layer, head), or nullptr when it was not measured.
    const HeadMeasures* find(int64_t scale, int64_t layer, int64_t head) const;
};

// std::invalid_argument for a family without next-scale attention (MAR) or a plan of another
// family. The method's run uses `settings` as given; the dense runs the same without
// accelerators.
AttentionAnalysis analyze_attention(Runner& runner, const SampleSettings& settings,
                                    const AccelPlan& method, const AnalysisOptions& options);

// {"family", "model", "method", "accel", "schedule", "heads", "timing": {...}, "records": [...],
// "head_types": [...], "layer_types": [...], "typing_rule": {...}, "sink_scales"}
// (docs/analysis.md): what `varscope-cli analyze` and the app's grid export write.
nlohmann::json to_json(const AttentionAnalysis& a);
// One line per record: scale,layer,head,queries,keys,query_kept,pair_density,recall,
// recall_computed,output_error,mass_sink,mass_local,mass_rest,entropy,entropy_normalized,
// verticality,mass_scale_0..mass_scale_{S-1} (empty where the scale is after the query's).
std::string to_csv(const AttentionAnalysis& a);

}  // namespace varscope::analysis
