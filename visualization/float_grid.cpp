#include "visualization/float_grid.h"

#include <QPainter>
#include <algorithm>
#include <cmath>
#include <limits>

namespace varscope::viz {

std::pair<float, float> FloatGrid::range() const {
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (float v : values)
        if (std::isfinite(v)) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
    if (!(lo <= hi)) return {0.f, 1.f};
    return {lo, hi};
}

double FloatGrid::mean() const {
    double s = 0;
    size_t n = 0;
    for (float v : values)
        if (std::isfinite(v)) {
            s += v;
            ++n;
        }
    return n ? s / n : 0.0;
}

double FloatGrid::zero_fraction() const {
    if (values.empty()) return 0.0;
    const auto zeros = std::count(values.begin(), values.end(), 0.f);
    return double(zeros) / double(values.size());
}

static double normalise(float v, ValueRange r) {
    if (!std::isfinite(v)) return std::numeric_limits<double>::quiet_NaN();
    const double span = double(r.hi) - double(r.lo);
    return span > 0 ? (double(v) - r.lo) / span : 0.5;
}

QImage render_heatmap(const FloatGrid& g, Colormap cmap, ValueRange range) {
    if (g.empty()) return {};
    QImage img(g.cols, g.rows, QImage::Format_RGB32);
    for (int r = 0; r < g.rows; ++r) {
        auto* line = reinterpret_cast<QRgb*>(img.scanLine(r));
        for (int c = 0; c < g.cols; ++c) line[c] = colormap_rgb(cmap, normalise(g.at(r, c), range));
    }
    return img;
}

QImage token_overlay(const QImage& image, const FloatGrid& grid, Colormap cmap, ValueRange range,
                     double alpha) {
    QImage out = image.convertToFormat(QImage::Format_ARGB32_Premultiplied);
    if (grid.empty() || out.isNull()) return out;
    QPainter p(&out);
    const double cw = double(out.width()) / grid.cols, ch = double(out.height()) / grid.rows;
    p.setPen(Qt::NoPen);
    p.setOpacity(std::clamp(alpha, 0.0, 1.0));
    for (int r = 0; r < grid.rows; ++r)
        for (int c = 0; c < grid.cols; ++c) {
            const double t = normalise(grid.at(r, c), range);
            if (std::isnan(t)) continue;
            p.fillRect(QRectF(c * cw, r * ch, cw, ch), colormap_color(cmap, t));
        }
    return out;
}

FloatGrid image_difference(const QImage& a, const QImage& b) {
    if (a.isNull() || b.isNull()) return {};
    const QImage x = a.convertToFormat(QImage::Format_RGB32);
    const QImage y =
        (b.size() == a.size() ? b
                              : b.scaled(a.size(), Qt::IgnoreAspectRatio, Qt::SmoothTransformation))
            .convertToFormat(QImage::Format_RGB32);
    FloatGrid g = FloatGrid::filled(x.height(), x.width(), 0.f);
    for (int r = 0; r < x.height(); ++r) {
        const auto* lx = reinterpret_cast<const QRgb*>(x.constScanLine(r));
        const auto* ly = reinterpret_cast<const QRgb*>(y.constScanLine(r));
        for (int c = 0; c < x.width(); ++c) {
            const int d = std::abs(qRed(lx[c]) - qRed(ly[c])) +
                          std::abs(qGreen(lx[c]) - qGreen(ly[c])) +
                          std::abs(qBlue(lx[c]) - qBlue(ly[c]));
            g.at(r, c) = float(d) / (3.f * 255.f);
        }
    }
    return g;
}

QString format_value(double v) {
    if (!std::isfinite(v)) return QStringLiteral("n/a");
    const double m = std::abs(v);
    if (m >= 1e4) {  // compact SI suffixes: 1.76M, 12.4k
        const char* suffix[] = {"k", "M", "G", "T"};
        int i = 0;
        double x = v / 1e3;
        while (std::abs(x) >= 1e3 && i < 3) {
            x /= 1e3;
            ++i;
        }
        return QString::number(x, 'g', 3) + suffix[i];
    }
    if (m != 0 && m < 1e-3) return QString::number(v, 'e', 2);
    return QString::number(v, 'g', 4);
}

}  // namespace varscope::viz
