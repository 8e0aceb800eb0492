#include "core/analysis/measure_grid.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace varscope::analysis {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Averages values into cells; cells without any stay NaN.
struct CellMeans {
    std::vector<double> sum;
    std::vector<int64_t> count;
    explicit CellMeans(size_t n) : sum(n, 0.0), count(n, 0) {}
    void add(size_t i, double v) {
        sum[i] += v;
        ++count[i];
    }
    std::vector<double> means() const {
        std::vector<double> out(sum.size(), kNaN);
        for (size_t i = 0; i < sum.size(); ++i)
            if (count[i] > 0) out[i] = sum[i] / static_cast<double>(count[i]);
        return out;
    }
};

}  // namespace

const std::vector<std::string>& grid_measure_names() {
    static const std::vector<std::string> names{"recall",     "recall_computed",    "output_error",
                                                "entropy",    "entropy_normalized", "mass_sink",
                                                "mass_local", "mass_rest",          "verticality",
                                                "query_kept", "pair_density",       "head_type"};
    return names;
}

std::string grid_measure_name(GridMeasure m) {
    return grid_measure_names().at(static_cast<size_t>(m));
}

GridMeasure grid_measure_from_name(const std::string& name) {
    const auto& names = grid_measure_names();
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
        std::string known;
        for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
        throw std::invalid_argument("unknown measure '" + name + "' (known: " + known + ")");
    }
    return static_cast<GridMeasure>(it - names.begin());
}

double measure_value(const HeadMeasures& r, GridMeasure m, const TypingRule& rule) {
    switch (m) {
        case GridMeasure::Recall:
            return r.recall;
        case GridMeasure::RecallComputed:
            return r.recall_computed;
        case GridMeasure::OutputError:
            return r.output_error;
        case GridMeasure::Entropy:
            return r.entropy;
        case GridMeasure::EntropyNormalized:
            return r.entropy_normalized;
        case GridMeasure::MassSink:
            return r.mass_sink;
        case GridMeasure::MassLocal:
            return r.mass_local;
        case GridMeasure::MassRest:
            return r.mass_rest;
        case GridMeasure::Verticality:
            return r.verticality;
        case GridMeasure::QueryKept:
            return r.query_kept;
        case GridMeasure::PairDensity:
            return r.pair_density;
        case GridMeasure::HeadType:
            return r.verticality >= rule.verticality_threshold ? 1.0 : 0.0;
    }
    return kNaN;
}

void MeasureGrid::locate(int64_t row, int64_t col, int64_t& scale_out, int64_t& layer_out,
                         int64_t& head_out) const {
    if (axes == Axes::ScaleLayer) {
        scale_out = row;
        layer_out = col;
        head_out = -1;
    } else {
        scale_out = scale;
        layer_out = row;
        head_out = col;
    }
}

std::pair<double, double> MeasureGrid::range() const {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (double v : values)
        if (std::isfinite(v)) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
    return lo <= hi ? std::make_pair(lo, hi) : std::make_pair(0.0, 1.0);
}

MeasureGrid scale_layer_grid(const std::vector<HeadMeasures>& records, GridMeasure m,
                             int64_t scales, int64_t layers, const TypingRule& rule) {
    MeasureGrid g;
    g.axes = MeasureGrid::Axes::ScaleLayer;
    g.rows = std::max<int64_t>(scales, 0);
    g.cols = std::max<int64_t>(layers, 0);
    CellMeans cells(static_cast<size_t>(g.rows * g.cols));
    for (const auto& r : records) {
        if (r.scale < 0 || r.scale >= g.rows || r.layer < 0 || r.layer >= g.cols) continue;
        // Head types say nothing on tiny maps (the rule's min_queries), as in type_heads.
        if (m == GridMeasure::HeadType && r.queries < rule.min_queries) continue;
        cells.add(static_cast<size_t>(r.scale * g.cols + r.layer), measure_value(r, m, rule));
    }
    g.values = cells.means();
    g.heads = cells.count;
    return g;
}

MeasureGrid layer_head_grid(const std::vector<HeadMeasures>& records, GridMeasure m, int64_t scale,
                            int64_t layers, int64_t heads, const TypingRule& rule) {
    MeasureGrid g;
    g.axes = MeasureGrid::Axes::LayerHead;
    g.scale = scale;
    g.rows = std::max<int64_t>(layers, 0);
    g.cols = std::max<int64_t>(heads, 0);
    CellMeans cells(static_cast<size_t>(g.rows * g.cols));
    if (m == GridMeasure::HeadType) {
        // The head's type over the whole run (the documented rule), the same at every scale.
        for (const auto& t : type_heads(records, rule))
            if (t.layer >= 0 && t.layer < g.rows && t.head >= 0 && t.head < g.cols)
                cells.add(static_cast<size_t>(t.layer * g.cols + t.head),
                          t.type == "contextual" ? 1.0 : 0.0);
    } else {
        for (const auto& r : records)
            if (r.scale == scale && r.layer >= 0 && r.layer < g.rows && r.head >= 0 &&
                r.head < g.cols)
                cells.add(static_cast<size_t>(r.layer * g.cols + r.head),
                          measure_value(r, m, rule));
    }
    g.values = cells.means();
    g.heads = cells.count;
    return g;
}

std::string grid_csv(const MeasureGrid& g, GridMeasure m) {
    std::ostringstream os;
    os << std::setprecision(9) << "scale,layer,head," << grid_measure_name(m) << "\n";
    for (int64_t r = 0; r < g.rows; ++r)
        for (int64_t c = 0; c < g.cols; ++c) {
            const double v = g.at(r, c);
            if (!std::isfinite(v)) continue;
            int64_t s = 0, l = 0, h = 0;
            g.locate(r, c, s, l, h);
            os << s << ',' << l << ',';
            if (h >= 0) os << h;
            os << ',' << v << "\n";
        }
    return os.str();
}

double map_recall(const std::vector<float>& probs, const std::vector<uint8_t>& kept, int64_t q,
                  int64_t k) {
    const size_t n = static_cast<size_t>(std::max<int64_t>(q, 0) * std::max<int64_t>(k, 0));
    if (probs.size() < n || kept.size() < n)
        throw std::invalid_argument("map_recall: " + std::to_string(q) + " x " + std::to_string(k) +
                                    " entries needed, got " + std::to_string(probs.size()) +
                                    " probabilities and " + std::to_string(kept.size()) +
                                    " mask entries");
    if (q <= 0) return 1.0;
    double total = 0.0;
    for (int64_t i = 0; i < q; ++i) {
        double row = 0.0;
        for (int64_t j = 0; j < k; ++j)
            if (kept[size_t(i * k + j)]) row += probs[size_t(i * k + j)];
        total += row;
    }
    return total / static_cast<double>(q);
}

}  // namespace varscope::analysis
