// Infinity's scale schedules (FoundationVision/Infinity, infinity/utils/dynamic_resolution.py):
// one table of (h, w) token grids per aspect-ratio template, cut at 7 / 10 / 12 / 13 scales for
// the "0.06M" / "0.25M" / "0.60M" / "1M" pixel budgets (1024 x 1024 = 13 scales up to 64 x 64).
// The 2-D RoPE of a schedule is laid out on its template's 1M final grid (rope_h, rope_w): the
// official cache is built per template from that grid and shared by its shorter schedules.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace varscope {

struct InfinitySchedule {
    std::vector<std::array<int64_t, 2>> scales;  // (h, w) per scale, coarse to fine
    int64_t rope_h = 0, rope_w = 0;              // the template's 1M final grid
    double h_div_w = 1.0;                        // the template
    std::string pixels;                          // "0.06M", "0.25M", "0.60M", "1M"

    int64_t num_scales() const { return static_cast<int64_t>(scales.size()); }
    int64_t tokens(int64_t si) const { return scales.at(si)[0] * scales.at(si)[1]; }
    int64_t scale_begin(int64_t si) const;  // first token of scale si in the sequence
    int64_t total_tokens() const;
    // A prefix of this schedule (same RoPE layout), as the official trunk_scale runs it.
    InfinitySchedule first(int64_t n) const;
};

// The 15 templates in the official order (1.0, 1.25, 0.8, 1.333, 0.75, ...).
const std::vector<double>& infinity_h_div_w_templates();
// The pixel budgets in order of size: "0.06M", "0.25M", "0.60M", "1M".
const std::vector<std::string>& infinity_pixel_budgets();

// The template nearest to h_div_w (the official argmin of |h_div_w - template|; the first one
// on ties).
double nearest_h_div_w_template(double h_div_w);

// The official schedule of the template nearest to h_div_w at a pixel budget.
// std::invalid_argument naming the budget when it is unknown, or h_div_w when it is not > 0.
InfinitySchedule infinity_schedule(double h_div_w, const std::string& pixels = "1M");

}  // namespace varscope
