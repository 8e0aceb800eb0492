// A widget that shows a FloatGrid as a heatmap (optionally over an image) with a colour legend,
// partition lines (e.g. between key scales of an attention map) and the value under the mouse.
#pragma once

#include <QImage>
#include <QStringList>
#include <QWidget>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "visualization/float_grid.h"

class QPainter;

namespace varscope::viz {

class HeatmapView : public QWidget {
    Q_OBJECT
  public:
    explicit HeatmapView(QWidget* parent = nullptr);

    // range: nullopt = the grid's own min..max.
    void setGrid(const FloatGrid& grid, std::optional<ValueRange> range = std::nullopt);
    void clear();
    void setColormap(Colormap c);
    Colormap colormap() const { return cmap_; }
    void setTitle(const QString& t);
    const QString& title() const { return title_; }
    void setEmptyText(const QString& t);
    const QString& emptyText() const { return empty_text_; }
    // Overlay mode: the grid is drawn over `image` with the given opacity.
    void setBackground(const QImage& image, double alpha = 0.55);
    // Lines before these rows / columns (cell indices), drawn over the map.
    void setPartitions(std::vector<int> rows, std::vector<int> cols);
    // Hover text for a cell; default "row r, col c".
    void setCellLabeler(std::function<QString(int row, int col)> f);
    QString cellLabel(int row, int col) const;  // what the hover readout names a cell
    void setKeepAspect(bool keep);
    // Cells where kept[i] == 0 are drawn dimmed (a method's dropped entries); empty = none.
    void setKeptMask(std::vector<uint8_t> kept);
    const std::vector<uint8_t>& keptMask() const { return kept_; }
    // A short text in the map's top-right corner (e.g. the kept set's recall); empty = none.
    void setCornerText(const QString& t);
    const QString& cornerText() const { return corner_; }
    // Tick labels left of the rows and under the columns (thinned where they would collide);
    // empty = none. Kept until clear() or the next call.
    void setAxisLabels(QStringList rows, QStringList cols);
    // The hover readout also as the widget's tooltip.
    void setCellToolTips(bool on) { cell_tooltips_ = on; }
    void setLegendLabel(const QString& label);

    const FloatGrid& grid() const { return grid_; }
    bool hasData() const { return !grid_.empty(); }
    QString readout() const { return readout_; }
    // The cell under a widget position, or (-1, -1).
    QPoint cellAt(const QPointF& pos) const;

    // The view as it would paint at `size` (logical pixels, `dpr` device pixels each), whatever
    // its size on screen: a figure's panel keeps its text readable at print size however narrow
    // or wide the dock is.
    QImage render(QSize size, double dpr = 2.0) const;
    QSize sizeHint() const override { return {360, 320}; }
    QSize minimumSizeHint() const override { return {160, 140}; }

  signals:
    void hovered(int row, int col, float value);
    void cellClicked(int row, int col);

  protected:
    void paintEvent(QPaintEvent*) override;
    void mouseMoveEvent(QMouseEvent*) override;
    void mousePressEvent(QMouseEvent*) override;
    void leaveEvent(QEvent*) override;
    void resizeEvent(QResizeEvent*) override;

  private:
    QRectF mapRect() const;
    QRectF mapRect(QSize size) const;
    void paint(QPainter& p, QSize size, QPoint hover) const;
    void rebuild();

    FloatGrid grid_;
    ValueRange range_;
    Colormap cmap_ = Colormap::Viridis;
    QImage image_;       // the rendered map, one pixel per cell
    QImage background_;  // overlay mode when set
    double alpha_ = 0.55;
    QString title_, empty_text_, readout_, legend_label_;
    std::vector<int> row_parts_, col_parts_;
    std::function<QString(int, int)> labeler_;
    bool keep_aspect_ = true;
    std::vector<uint8_t> kept_;
    QString corner_;
    QStringList row_labels_, col_labels_;
    bool cell_tooltips_ = false;
    QPoint hover_{-1, -1};
};

}  // namespace varscope::viz
