#include "visualization/grid_figure.h"

#include <QFileInfo>
#include <QFontMetrics>
#include <QSaveFile>
#include <QSvgGenerator>
#include <cmath>

namespace varscope::viz {
namespace {

constexpr int kMargin = 12;
constexpr int kBarWidth = 14;
constexpr int kTicks = 5;  // colour-scale labels

QFont figure_font(int pt, bool bold = false) {
    QFont f;
    f.setPointSize(pt);
    f.setBold(bold);
    return f;
}

QString label_of(const QStringList& labels, int i) {
    return i < labels.size() ? labels[i] : QString::number(i);
}

// The sizes every part needs, shared by grid_figure_size and paint_grid_figure.
struct Layout {
    int title_h, tick_w, tick_h, axis_h, legend_w, map_w, map_h;
};

Layout layout_of(const GridFigure& f) {
    const QFontMetrics title(figure_font(12, true)), text(figure_font(9));
    Layout l{};
    l.title_h = f.title.isEmpty() ? 0 : title.height() + 6;
    int rw = 0;
    for (int r = 0; r < f.grid.rows; ++r)
        rw = std::max(rw, text.horizontalAdvance(label_of(f.row_labels, r)));
    l.tick_w = rw + 6;
    l.tick_h = text.height() + 4;
    l.axis_h = text.height() + 4;
    int lw = text.horizontalAdvance(f.legend);
    for (const char* s : {"-0.000", "0.0000e-00"}) lw = std::max(lw, text.horizontalAdvance(s));
    l.legend_w = kBarWidth + 8 + lw;
    l.map_w = f.grid.cols * f.cell;
    l.map_h = f.grid.rows * f.cell;
    return l;
}

ValueRange range_of(const GridFigure& f) {
    if (f.range) return *f.range;
    const auto [lo, hi] = f.grid.range();
    return {lo, hi};
}

}  // namespace

QSize grid_figure_size(const GridFigure& f) {
    const Layout l = layout_of(f);
    const int w = kMargin + l.axis_h + l.tick_w + l.map_w + kMargin + l.legend_w + kMargin;
    const int h = kMargin + l.title_h + l.map_h + l.tick_h + l.axis_h + kMargin;
    // The title may be wider than the map.
    const int title_w =
        QFontMetrics(figure_font(12, true)).horizontalAdvance(f.title) + 2 * kMargin;
    return {std::max(w, title_w), std::max(h, 120)};
}

void paint_grid_figure(QPainter& p, const GridFigure& f) {
    const QSize size = grid_figure_size(f);
    const Layout l = layout_of(f);
    p.fillRect(QRect(QPoint(0, 0), size), Qt::white);
    p.setPen(Qt::black);
    if (!f.title.isEmpty()) {
        p.setFont(figure_font(12, true));
        p.drawText(QRect(kMargin, kMargin, size.width() - 2 * kMargin, l.title_h),
                   Qt::AlignLeft | Qt::AlignTop, f.title);
    }
    p.setFont(figure_font(9));
    const QRect map(kMargin + l.axis_h + l.tick_w, kMargin + l.title_h, l.map_w, l.map_h);
    const ValueRange range = range_of(f);
    const double span = range.hi > range.lo ? double(range.hi) - range.lo : 1.0;
    // Cells, with a thin white gap so neighbours with close values stay apart.
    for (int r = 0; r < f.grid.rows; ++r)
        for (int c = 0; c < f.grid.cols; ++c) {
            const float v = f.grid.at(r, c);
            const QColor colour = std::isfinite(v)
                                      ? colormap_color(f.cmap, (double(v) - range.lo) / span)
                                      : QColor(190, 190, 190);
            p.fillRect(
                QRectF(map.left() + c * f.cell, map.top() + r * f.cell, f.cell - 1, f.cell - 1),
                colour);
        }
    // Tick labels: every row; columns thinned so their labels do not collide.
    const QFontMetrics fm(p.font());
    for (int r = 0; r < f.grid.rows; ++r)
        p.drawText(QRect(map.left() - l.tick_w, map.top() + r * f.cell, l.tick_w - 4, f.cell),
                   Qt::AlignRight | Qt::AlignVCenter, label_of(f.row_labels, r));
    int widest = 0;
    for (int c = 0; c < f.grid.cols; ++c)
        widest = std::max(widest, fm.horizontalAdvance(label_of(f.col_labels, c)));
    const int step = std::max(1, (widest + 4 + f.cell - 1) / std::max(1, f.cell));
    for (int c = 0; c < f.grid.cols; c += step)
        p.drawText(QRect(map.left() + c * f.cell - f.cell, map.bottom() + 2, 3 * f.cell, l.tick_h),
                   Qt::AlignHCenter | Qt::AlignTop, label_of(f.col_labels, c));
    // Axis names: columns under their ticks, rows turned along the left edge.
    p.drawText(QRect(map.left(), map.bottom() + l.tick_h, map.width(), l.axis_h),
               Qt::AlignHCenter | Qt::AlignTop, f.col_axis);
    p.save();
    p.translate(kMargin, map.top() + map.height() / 2.0);
    p.rotate(-90);
    p.drawText(QRectF(-map.height() / 2.0, 0, map.height(), l.axis_h),
               Qt::AlignHCenter | Qt::AlignTop, f.row_axis);
    p.restore();
    // Colour scale: high values on top, kTicks labels, the measure's name above.
    // Below the name by half a line more, so the top value's label does not touch it.
    const int bar_top = map.top() + fm.height() + fm.height() / 2 + 2;
    const QRect bar(map.right() + kMargin + 1, bar_top, kBarWidth,
                    std::max(40, map.bottom() - bar_top));
    p.drawImage(bar, colormap_strip(f.cmap, 256, 1).transformed(QTransform().rotate(-90)));
    p.drawRect(bar);
    p.drawText(QRect(bar.left(), map.top() - 2, l.legend_w, fm.height()),
               Qt::AlignLeft | Qt::AlignTop, f.legend);
    for (int i = 0; i < kTicks; ++i) {
        const double t = double(i) / (kTicks - 1);
        const double y = bar.bottom() - t * bar.height();
        p.drawLine(QPointF(bar.right(), y), QPointF(bar.right() + 3, y));
        p.drawText(
            QRectF(bar.right() + 5, y - fm.height() / 2.0, l.legend_w - kBarWidth - 5, fm.height()),
            Qt::AlignLeft | Qt::AlignVCenter, format_value(range.lo + t * span));
    }
}

QImage render_grid_figure(const GridFigure& f, double scale) {
    const QSize size = grid_figure_size(f);
    QImage img((QSizeF(size) * scale).toSize(), QImage::Format_RGB32);
    img.fill(Qt::white);
    QPainter p(&img);
    p.scale(scale, scale);
    p.setRenderHint(QPainter::TextAntialiasing);
    paint_grid_figure(p, f);
    p.end();
    return img;
}

bool write_grid_figure(const GridFigure& f, const QString& path, QString* error) {
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        if (error) *error = QObject::tr("cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    bool ok = true;
    if (QFileInfo(path).suffix().toLower() == "svg") {
        const QSize size = grid_figure_size(f);
        QSvgGenerator svg;
        svg.setOutputDevice(&file);
        svg.setSize(size);
        svg.setViewBox(QRect(QPoint(0, 0), size));
        svg.setTitle(f.title);
        QPainter p(&svg);
        paint_grid_figure(p, f);
        p.end();
    } else {
        ok = render_grid_figure(f).save(&file, "PNG");
    }
    if (!ok) {
        file.cancelWriting();
        if (error) *error = QObject::tr("could not encode %1").arg(path);
        return false;
    }
    if (!file.commit()) {
        if (error) *error = QObject::tr("cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

}  // namespace varscope::viz
