// A labelled heatmap figure: a title, the grid's cells with row and column tick labels and axis
// names, and a colour scale with its values; painted once and written as PNG or SVG. For grids
// of a few dozen rows and columns (the attention grid of issue #35), readable when printed.
#pragma once

#include <QImage>
#include <QPainter>
#include <QString>
#include <QStringList>
#include <optional>

#include "visualization/float_grid.h"

namespace varscope::viz {

struct GridFigure {
    FloatGrid grid;  // NaN cells are drawn grey ("not measured")
    QString title;
    QString row_axis, col_axis;          // axis names ("scale", "layer")
    QStringList row_labels, col_labels;  // one per row / column; empty = the indices
    QString legend;                      // the colour scale's name (the measure)
    Colormap cmap = Colormap::Viridis;
    std::optional<ValueRange> range;  // nullopt = the grid's finite min..max
    int cell = 22;                    // cell side in points
};

QSize grid_figure_size(const GridFigure& f);
void paint_grid_figure(QPainter& p, const GridFigure& f);  // in grid_figure_size() units
QImage render_grid_figure(const GridFigure& f, double scale = 2.0);
// PNG, or SVG by the suffix ".svg"; atomic (QSaveFile); false and *error on failure.
bool write_grid_figure(const GridFigure& f, const QString& path, QString* error);

}  // namespace varscope::viz
