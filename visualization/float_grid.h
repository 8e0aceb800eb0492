// A 2-D float array (row-major) and the images made from it: heatmaps, token overlays on a
// picture, and the per-pixel difference of two pictures. No model knowledge.
#pragma once

#include <QImage>
#include <QString>
#include <optional>
#include <utility>
#include <vector>

#include "visualization/colormap.h"

namespace varscope::viz {

struct FloatGrid {
    int rows = 0;
    int cols = 0;
    std::vector<float> values;

    FloatGrid() = default;
    FloatGrid(int r, int c, std::vector<float> v) : rows(r), cols(c), values(std::move(v)) {}
    static FloatGrid filled(int r, int c, float v) {
        return {r, c, std::vector<float>(static_cast<size_t>(r) * c, v)};
    }
    bool empty() const { return rows <= 0 || cols <= 0 || values.empty(); }
    float at(int r, int c) const { return values[static_cast<size_t>(r) * cols + c]; }
    float& at(int r, int c) { return values[static_cast<size_t>(r) * cols + c]; }
    std::pair<float, float> range() const;  // finite min / max; (0, 1) when none
    double mean() const;
    // Fraction of entries equal to zero (mask sparsity).
    double zero_fraction() const;
};

struct ValueRange {
    float lo = 0, hi = 1;
};

// One pixel per cell; NaN cells are grey.
QImage render_heatmap(const FloatGrid& g, Colormap cmap, ValueRange range);

// `image` with each cell of `grid` (rows x cols tokens covering the image) tinted by its value;
// alpha in [0, 1]. Cells with NaN are left untinted.
QImage token_overlay(const QImage& image, const FloatGrid& grid, Colormap cmap, ValueRange range,
                     double alpha);

// Mean absolute difference over RGB in [0, 1], per pixel; images are scaled to a's size.
FloatGrid image_difference(const QImage& a, const QImage& b);

// Text for a value in a legend or readout: few digits, scientific for tiny magnitudes.
QString format_value(double v);

}  // namespace varscope::viz
