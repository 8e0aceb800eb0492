// The numbers of one (scale, layer, head) of an attention analysis and the head/layer typing
// rule (issue #35), without LibTorch: the app's Qt side and the grids (measure_grid.h) read
// them. The definitions are in attention_measures.h, which computes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace varscope::analysis {

struct HeadMeasures {
    int64_t scale = 0, layer = 0, head = 0;
    int64_t queries = 0, keys = 0;
    double query_kept = 1.0;    // share of queries computed
    double pair_density = 1.0;  // share of (query, key) pairs attended
    double recall = 1.0, recall_computed = 1.0, output_error = 0.0;
    std::vector<double> mass_by_scale;  // source scales 0..scale
    double mass_sink = 0.0, mass_local = 0.0, mass_rest = 0.0;
    double entropy = 0.0, entropy_normalized = 0.0;
    double verticality = 1.0;
};

// Head and layer types from the measures, over the scales with at least `min_queries` queries
// (1x1 and tiny maps say nothing about patterns).
//   head (layer, head): "contextual" when the mean verticality >= verticality_threshold, else
//                       "structural" (HACK's two kinds, arXiv 2504.09261).
//   layer:              "refiner" when the mean over heads and scales of mass_local >=
//                       local_threshold (the layer looks mostly at the map being drawn), else
//                       "drafter" (its attention is spread over the earlier scales): ScaleKV's
//                       two kinds (arXiv 2505.19602).
struct TypingRule {
    int64_t min_queries = 4;
    double verticality_threshold = 0.5;
    double local_threshold = 0.5;
};
struct HeadType {
    int64_t layer = 0, head = 0;
    double verticality = 0.0;
    std::string type;  // "contextual" | "structural"
};
struct LayerType {
    int64_t layer = 0;
    double mass_local = 0.0;
    std::string type;  // "drafter" | "refiner"
};
std::vector<HeadType> type_heads(const std::vector<HeadMeasures>& records,
                                 const TypingRule& rule = {});
std::vector<LayerType> type_layers(const std::vector<HeadMeasures>& records,
                                   const TypingRule& rule = {});

}  // namespace varscope::analysis
