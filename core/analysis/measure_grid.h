// Grids of one attention measure (issue #35), without LibTorch, for the app's grid view, its
// exports and the CLI's grid figure: scale x layer (each cell the mean over the measured heads)
// or layer x head at one scale. The app and `varscope-cli analyze` draw the same numbers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/analysis/head_measures.h"

namespace varscope::analysis {

enum class GridMeasure {
    Recall,
    RecallComputed,
    OutputError,
    Entropy,
    EntropyNormalized,
    MassSink,
    MassLocal,
    MassRest,
    Verticality,
    QueryKept,
    PairDensity,
    // The head typing rule (TypingRule): layer x head, 1 = contextual, 0 = structural (the
    // head's type over the run, type_heads); scale x layer, the share of measured heads whose
    // verticality at that scale reaches the threshold (not defined below min_queries queries).
    HeadType,
};

// The measures' names as in measures.json ("recall", "output_error", ..., "head_type"), in
// enum order.
const std::vector<std::string>& grid_measure_names();
std::string grid_measure_name(GridMeasure m);
// std::invalid_argument naming the unknown name and the known ones.
GridMeasure grid_measure_from_name(const std::string& name);
// The record's value of a per-record measure (HeadType: 1 when the record's verticality reaches
// the rule's threshold, else 0).
double measure_value(const HeadMeasures& r, GridMeasure m, const TypingRule& rule = {});

struct MeasureGrid {
    enum class Axes { ScaleLayer, LayerHead };
    Axes axes = Axes::ScaleLayer;
    int64_t scale = -1;  // LayerHead: the scale
    int64_t rows = 0, cols = 0;
    std::vector<double> values;  // row-major; NaN where nothing was measured
    std::vector<int64_t> heads;  // per cell, the records averaged (ScaleLayer) or 0/1
    double at(int64_t r, int64_t c) const { return values[size_t(r * cols + c)]; }
    // The cell's record coordinates: (scale, layer, head); head -1 = mean over heads.
    void locate(int64_t row, int64_t col, int64_t& scale_out, int64_t& layer_out,
                int64_t& head_out) const;
    // The finite minimum and maximum (0, 1 without any).
    std::pair<double, double> range() const;
};

// Rows = scales 0..scales-1, columns = layers 0..layers-1.
MeasureGrid scale_layer_grid(const std::vector<HeadMeasures>& records, GridMeasure m,
                             int64_t scales, int64_t layers, const TypingRule& rule = {});
// Rows = layers, columns = heads 0..heads-1, at `scale`.
MeasureGrid layer_head_grid(const std::vector<HeadMeasures>& records, GridMeasure m, int64_t scale,
                            int64_t layers, int64_t heads, const TypingRule& rule = {});

// "scale,layer,head,<measure>" per measured cell (head empty for a scale x layer mean).
std::string grid_csv(const MeasureGrid& g, GridMeasure m);

// The recall of a kept set on one attention map: the mean over the q rows of the probability
// mass on the kept entries; probs and kept are (q, k) row-major. An empty map has recall 1.
double map_recall(const std::vector<float>& probs, const std::vector<uint8_t>& kept, int64_t q,
                  int64_t k);

}  // namespace varscope::analysis
