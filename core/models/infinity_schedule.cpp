#include "core/models/infinity_schedule.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

namespace varscope {
namespace {

using Grid = std::vector<std::array<int64_t, 2>>;

// The official ratio2hws table: h/w >= 1 templates, 13 scales each.
const std::vector<std::pair<double, Grid>>& base_table() {
    static const std::vector<std::pair<double, Grid>> t = {
        {1.000,
         {{1, 1},
          {2, 2},
          {4, 4},
          {6, 6},
          {8, 8},
          {12, 12},
          {16, 16},
          {20, 20},
          {24, 24},
          {32, 32},
          {40, 40},
          {48, 48},
          {64, 64}}},
        {1.250,
         {{1, 1},
          {2, 2},
          {3, 3},
          {5, 4},
          {10, 8},
          {15, 12},
          {20, 16},
          {25, 20},
          {30, 24},
          {35, 28},
          {45, 36},
          {55, 44},
          {70, 56}}},
        {1.333,
         {{1, 1},
          {2, 2},
          {4, 3},
          {8, 6},
          {12, 9},
          {16, 12},
          {20, 15},
          {24, 18},
          {28, 21},
          {36, 27},
          {48, 36},
          {60, 45},
          {72, 54}}},
        {1.500,
         {{1, 1},
          {2, 2},
          {3, 2},
          {6, 4},
          {9, 6},
          {15, 10},
          {21, 14},
          {27, 18},
          {33, 22},
          {39, 26},
          {48, 32},
          {63, 42},
          {78, 52}}},
        {1.750,
         {{1, 1},
          {2, 2},
          {3, 3},
          {7, 4},
          {11, 6},
          {14, 8},
          {21, 12},
          {28, 16},
          {35, 20},
          {42, 24},
          {56, 32},
          {70, 40},
          {84, 48}}},
        {2.000,
         {{1, 1},
          {2, 2},
          {4, 2},
          {6, 3},
          {10, 5},
          {16, 8},
          {22, 11},
          {30, 15},
          {38, 19},
          {46, 23},
          {60, 30},
          {74, 37},
          {90, 45}}},
        {2.500,
         {{1, 1},
          {2, 2},
          {5, 2},
          {10, 4},
          {15, 6},
          {20, 8},
          {25, 10},
          {30, 12},
          {40, 16},
          {50, 20},
          {65, 26},
          {80, 32},
          {100, 40}}},
        {3.000,
         {{1, 1},
          {2, 2},
          {6, 2},
          {9, 3},
          {15, 5},
          {21, 7},
          {27, 9},
          {36, 12},
          {45, 15},
          {54, 18},
          {72, 24},
          {90, 30},
          {111, 37}}},
    };
    return t;
}

// Every template in the official order: each base ratio, then (unless 1) its inverse, written
// as int(1 / ratio * 1000) / 1000 with the grids transposed.
const std::vector<std::pair<double, Grid>>& full_table() {
    static const std::vector<std::pair<double, Grid>> t = [] {
        std::vector<std::pair<double, Grid>> out;
        for (const auto& [ratio, grid] : base_table()) {
            out.emplace_back(ratio, grid);
            if (ratio == 1.0) continue;
            Grid tr;
            for (const auto& hw : grid) tr.push_back({hw[1], hw[0]});
            out.emplace_back(static_cast<int64_t>(1.0 / ratio * 1000) / 1000.0, tr);
        }
        return out;
    }();
    return t;
}

int64_t budget_scales(const std::string& pixels) {
    static const std::map<std::string, int64_t> n = {
        {"0.06M", 7}, {"0.25M", 10}, {"0.60M", 12}, {"1M", 13}};
    auto it = n.find(pixels);
    if (it == n.end())
        throw std::invalid_argument("Infinity schedule: unknown pixel budget '" + pixels +
                                    "' (known: 0.06M, 0.25M, 0.60M, 1M)");
    return it->second;
}

}  // namespace

int64_t InfinitySchedule::scale_begin(int64_t si) const {
    int64_t b = 0;
    for (int64_t i = 0; i < si; ++i) b += tokens(i);
    return b;
}

int64_t InfinitySchedule::total_tokens() const {
    return scale_begin(num_scales());
}

InfinitySchedule InfinitySchedule::first(int64_t n) const {
    if (n < 1 || n > num_scales())
        throw std::invalid_argument("Infinity schedule: cannot keep " + std::to_string(n) + " of " +
                                    std::to_string(num_scales()) + " scales");
    InfinitySchedule s = *this;
    s.scales.resize(static_cast<size_t>(n));
    return s;
}

const std::vector<double>& infinity_h_div_w_templates() {
    static const std::vector<double> t = [] {
        std::vector<double> v;
        for (const auto& e : full_table()) v.push_back(e.first);
        return v;
    }();
    return t;
}

const std::vector<std::string>& infinity_pixel_budgets() {
    static const std::vector<std::string> b = {"0.06M", "0.25M", "0.60M", "1M"};
    return b;
}

double nearest_h_div_w_template(double h_div_w) {
    if (!(h_div_w > 0) || !std::isfinite(h_div_w))
        throw std::invalid_argument("Infinity schedule: h_div_w must be a positive number");
    const auto& t = infinity_h_div_w_templates();
    size_t best = 0;
    for (size_t i = 1; i < t.size(); ++i)
        if (std::abs(h_div_w - t[i]) < std::abs(h_div_w - t[best])) best = i;
    return t[best];
}

InfinitySchedule infinity_schedule(double h_div_w, const std::string& pixels) {
    const int64_t n = budget_scales(pixels);
    const double tmpl = nearest_h_div_w_template(h_div_w);
    for (const auto& [ratio, grid] : full_table()) {
        if (ratio != tmpl) continue;
        InfinitySchedule s;
        s.scales.assign(grid.begin(), grid.begin() + n);
        s.rope_h = grid.back()[0];
        s.rope_w = grid.back()[1];
        s.h_div_w = ratio;
        s.pixels = pixels;
        return s;
    }
    throw std::logic_error("Infinity schedule: template table is inconsistent");
}

}  // namespace varscope
