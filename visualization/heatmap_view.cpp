#include "visualization/heatmap_view.h"

#include <QMouseEvent>
#include <QPainter>
#include <cmath>

namespace varscope::viz {
namespace {
constexpr int kLegendWidth = 14;
constexpr int kLegendTextWidth = 58;
constexpr int kMargin = 6;
}  // namespace

HeatmapView::HeatmapView(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
    empty_text_ = tr("No data");
}

void HeatmapView::setGrid(const FloatGrid& grid, std::optional<ValueRange> range) {
    grid_ = grid;
    if (range) {
        range_ = *range;
    } else {
        auto [lo, hi] = grid_.range();
        range_ = {lo, hi};
    }
    hover_ = {-1, -1};
    readout_.clear();
    kept_.clear();  // a mask and its note belong to one grid: set again after it
    corner_.clear();
    rebuild();
}

void HeatmapView::clear() {
    grid_ = {};
    image_ = {};
    background_ = {};
    row_parts_.clear();
    col_parts_.clear();
    readout_.clear();
    kept_.clear();
    corner_.clear();
    row_labels_.clear();
    col_labels_.clear();
    update();
}

void HeatmapView::setColormap(Colormap c) {
    cmap_ = c;
    rebuild();
}

void HeatmapView::setTitle(const QString& t) {
    title_ = t;
    update();
}

void HeatmapView::setEmptyText(const QString& t) {
    empty_text_ = t;
    update();
}

void HeatmapView::setBackground(const QImage& image, double alpha) {
    background_ = image;
    alpha_ = alpha;
    update();
}

void HeatmapView::setPartitions(std::vector<int> rows, std::vector<int> cols) {
    row_parts_ = std::move(rows);
    col_parts_ = std::move(cols);
    update();
}

void HeatmapView::setCellLabeler(std::function<QString(int, int)> f) {
    labeler_ = std::move(f);
}

void HeatmapView::setKeepAspect(bool keep) {
    keep_aspect_ = keep;
    update();
}

void HeatmapView::setLegendLabel(const QString& label) {
    legend_label_ = label;
    update();
}

void HeatmapView::setKeptMask(std::vector<uint8_t> kept) {
    kept_ = std::move(kept);
    rebuild();
}

void HeatmapView::setAxisLabels(QStringList rows, QStringList cols) {
    row_labels_ = std::move(rows);
    col_labels_ = std::move(cols);
    update();
}

void HeatmapView::setCornerText(const QString& t) {
    corner_ = t;
    update();
}

void HeatmapView::rebuild() {
    image_ = render_heatmap(grid_, cmap_, range_);
    // Dropped entries keep their colour at a quarter of its brightness: still readable, clearly
    // apart from what the method keeps.
    if (!kept_.empty() && kept_.size() == grid_.values.size() && !image_.isNull()) {
        image_ = image_.convertToFormat(QImage::Format_RGB32);
        for (int r = 0; r < grid_.rows; ++r) {
            auto* line = reinterpret_cast<QRgb*>(image_.scanLine(r));
            for (int c = 0; c < grid_.cols; ++c)
                if (!kept_[size_t(r) * grid_.cols + c]) {
                    const QRgb v = line[c];
                    line[c] = qRgb(qRed(v) / 4, qGreen(v) / 4, qBlue(v) / 4);
                }
        }
    }
    update();
}

QRectF HeatmapView::mapRect() const {
    return mapRect(size());
}

QRectF HeatmapView::mapRect(QSize size) const {
    const int top = kMargin + (title_.isEmpty() ? 0 : fontMetrics().height() + 2);
    const int bottom = fontMetrics().height() + kMargin + 2 +
                       (col_labels_.isEmpty() ? 0 : fontMetrics().height() + 2);
    int left = kMargin;
    for (const QString& l : row_labels_)
        left = std::max(left, kMargin + fontMetrics().horizontalAdvance(l) + 4);
    QRectF area(left, top, size.width() - left - kMargin - kLegendWidth - kLegendTextWidth,
                size.height() - top - bottom);
    if (area.width() <= 0 || area.height() <= 0 || grid_.empty()) return area;
    if (keep_aspect_) {
        const double aspect = double(grid_.cols) / grid_.rows;
        QSizeF s = area.size();
        if (s.width() / s.height() > aspect)
            s.setWidth(s.height() * aspect);
        else
            s.setHeight(s.width() / aspect);
        area = QRectF(area.topLeft(), s);
    }
    return area;
}

QPoint HeatmapView::cellAt(const QPointF& pos) const {
    const QRectF r = mapRect();
    if (grid_.empty() || !r.contains(pos)) return {-1, -1};
    const int c = std::min(grid_.cols - 1, int((pos.x() - r.left()) / r.width() * grid_.cols));
    const int row = std::min(grid_.rows - 1, int((pos.y() - r.top()) / r.height() * grid_.rows));
    return {c, row};
}

void HeatmapView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    paint(p, size(), hover_);
}

QImage HeatmapView::render(QSize size, double dpr) const {
    QImage img((QSizeF(size) * dpr).toSize(), QImage::Format_RGB32);
    img.setDevicePixelRatio(dpr);
    QPainter p(&img);
    p.setFont(font());
    paint(p, size, {-1, -1});  // no hovered cell: what the map is, not where the mouse was
    return img;
}

void HeatmapView::paint(QPainter& p, QSize size, QPoint hover) const {
    const QRect rect(QPoint(0, 0), size);
    const int width = size.width(), height = size.height();
    p.fillRect(rect, palette().base());
    if (!title_.isEmpty()) {
        QFont f = font();
        f.setBold(true);
        p.setFont(f);
        // Elided, not cut mid-word, where the view is narrower than the title (a figure's panel,
        // a narrow dock).
        const int w = width - 2 * kMargin;
        p.drawText(QRect(kMargin, kMargin / 2, w, fontMetrics().height() + 2),
                   Qt::AlignLeft | Qt::AlignVCenter,
                   QFontMetrics(f).elidedText(title_, Qt::ElideRight, w));
        p.setFont(font());
    }
    if (grid_.empty()) {
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(rect.adjusted(12, 12, -12, -12), Qt::AlignCenter | Qt::TextWordWrap,
                   empty_text_);
        return;
    }
    const QRectF r = mapRect(size);
    if (!background_.isNull()) {
        p.setRenderHint(QPainter::SmoothPixmapTransform, true);
        p.drawImage(r, background_);
        p.setOpacity(alpha_);
    }
    p.setRenderHint(QPainter::SmoothPixmapTransform, false);
    p.drawImage(r, image_);
    p.setOpacity(1.0);

    // Partition lines.
    p.setPen(QPen(QColor(255, 255, 255, 200), 1.0));
    for (int c : col_parts_)
        if (c > 0 && c < grid_.cols) {
            const double x = r.left() + r.width() * c / grid_.cols;
            p.drawLine(QPointF(x, r.top()), QPointF(x, r.bottom()));
        }
    for (int row : row_parts_)
        if (row > 0 && row < grid_.rows) {
            const double y = r.top() + r.height() * row / grid_.rows;
            p.drawLine(QPointF(r.left(), y), QPointF(r.right(), y));
        }
    // Tick labels, every n-th where the cells are smaller than the text.
    p.setPen(palette().color(QPalette::Text));
    const int lh = fontMetrics().height();
    if (!row_labels_.isEmpty() && grid_.rows > 0) {
        const double ch = r.height() / grid_.rows;
        const int step = std::max(1, int(std::ceil(lh / std::max(ch, 1.0))));
        for (int row = 0; row < grid_.rows && row < row_labels_.size(); row += step)
            p.drawText(QRectF(0, r.top() + row * ch + ch / 2 - lh / 2.0, r.left() - 3, lh),
                       Qt::AlignRight | Qt::AlignVCenter, row_labels_[row]);
    }
    if (!col_labels_.isEmpty() && grid_.cols > 0) {
        const double cw = r.width() / grid_.cols;
        int widest = 0;
        for (const QString& l : col_labels_)
            widest = std::max(widest, fontMetrics().horizontalAdvance(l));
        const int step = std::max(1, int(std::ceil((widest + 4) / std::max(cw, 1.0))));
        for (int c = 0; c < grid_.cols && c < col_labels_.size(); c += step)
            p.drawText(QRectF(r.left() + c * cw + cw / 2 - widest, r.bottom() + 1, 2 * widest, lh),
                       Qt::AlignHCenter | Qt::AlignTop, col_labels_[c]);
    }
    // Hovered cell.
    if (hover.x() >= 0) {
        const double cw = r.width() / grid_.cols, ch = r.height() / grid_.rows;
        p.setPen(QPen(Qt::white, 1.5));
        p.setBrush(Qt::NoBrush);
        p.drawRect(QRectF(r.left() + hover.x() * cw, r.top() + hover.y() * ch, std::max(cw, 2.0),
                          std::max(ch, 2.0)));
    }
    if (!corner_.isEmpty()) {
        const QFontMetrics fm = fontMetrics();
        const int w = fm.horizontalAdvance(corner_) + 8, h = fm.height() + 4;
        const QRectF box(r.right() - w - 2, r.top() + 2, w, h);
        p.fillRect(box, QColor(0, 0, 0, 170));
        p.setPen(Qt::white);
        p.drawText(box, Qt::AlignCenter, corner_);
    }
    // Legend: vertical colour bar with max / mid / min labels.
    const QRectF bar(r.right() + kMargin + 2, r.top(), kLegendWidth, r.height());
    QImage strip = colormap_strip(cmap_, 256, 1).transformed(QTransform().rotate(-90));
    p.drawImage(bar, strip);
    p.setPen(palette().color(QPalette::Text));
    p.drawRect(bar);
    const int fh = fontMetrics().height();
    auto label = [&](double frac, double value) {
        const double y = bar.bottom() - frac * bar.height();
        p.drawText(QRectF(bar.right() + 4, y - fh / 2.0, kLegendTextWidth - 4, fh),
                   Qt::AlignLeft | Qt::AlignVCenter, format_value(value));
    };
    label(1.0, range_.hi);
    label(0.5, (double(range_.lo) + range_.hi) / 2);
    label(0.0, range_.lo);
    if (!legend_label_.isEmpty())
        p.drawText(QRectF(bar.left() - 4, bar.bottom() + 2, kLegendTextWidth + kLegendWidth, fh),
                   Qt::AlignLeft, legend_label_);
    // Readout.
    const QString text = readout_.isEmpty() ? tr("%1 × %2, range %3 … %4")
                                                  .arg(grid_.rows)
                                                  .arg(grid_.cols)
                                                  .arg(format_value(range_.lo))
                                                  .arg(format_value(range_.hi))
                                            : readout_;
    p.drawText(QRect(kMargin, height - fh - kMargin / 2, width - 2 * kMargin, fh),
               Qt::AlignLeft | Qt::AlignVCenter,
               fontMetrics().elidedText(text, Qt::ElideRight, width - 2 * kMargin));
}

QString HeatmapView::cellLabel(int row, int col) const {
    return labeler_ ? labeler_(row, col) : tr("row %1, col %2").arg(row).arg(col);
}

void HeatmapView::mouseMoveEvent(QMouseEvent* e) {
    const QPoint cell = cellAt(e->position());
    if (cell == hover_) return;
    hover_ = cell;
    if (cell.x() < 0) {
        readout_.clear();
    } else {
        const float v = grid_.at(cell.y(), cell.x());
        readout_ = tr("%1: %2").arg(cellLabel(cell.y(), cell.x()), format_value(v));
        emit hovered(cell.y(), cell.x(), v);
    }
    if (cell_tooltips_) setToolTip(readout_);
    update();
}

void HeatmapView::mousePressEvent(QMouseEvent* e) {
    const QPoint cell = cellAt(e->position());
    if (e->button() == Qt::LeftButton && cell.x() >= 0) emit cellClicked(cell.y(), cell.x());
    QWidget::mousePressEvent(e);
}

void HeatmapView::leaveEvent(QEvent*) {
    hover_ = {-1, -1};
    readout_.clear();
    update();
}

void HeatmapView::resizeEvent(QResizeEvent*) {
    update();
}

}  // namespace varscope::viz
