#include "visualization/image_metrics.h"

#include <cmath>
#include <limits>
#include <vector>

namespace varscope::viz {
namespace {

struct Plane {
    int w = 0, h = 0;
    std::vector<double> v;
    double& at(int x, int y) { return v[size_t(y) * w + x]; }
    double at(int x, int y) const { return v[size_t(y) * w + x]; }
};

QImage as_rgb(const QImage& img, QSize size) {
    QImage s = img.size() == size ? img : img.scaled(size, Qt::IgnoreAspectRatio, Qt::SmoothTransformation);
    return s.convertToFormat(QImage::Format_RGB32);
}

Plane channel(const QImage& rgb, int ch) {
    Plane p{rgb.width(), rgb.height(), std::vector<double>(size_t(rgb.width()) * rgb.height())};
    for (int y = 0; y < p.h; ++y) {
        const auto* line = reinterpret_cast<const QRgb*>(rgb.constScanLine(y));
        for (int x = 0; x < p.w; ++x)
            p.at(x, y) = ch == 0 ? qRed(line[x]) : ch == 1 ? qGreen(line[x]) : qBlue(line[x]);
    }
    return p;
}

// Separable Gaussian filter, borders handled by renormalising the truncated window.
Plane blur(const Plane& in) {
    constexpr int R = 5;
    double k[2 * R + 1];
    for (int i = -R; i <= R; ++i) k[i + R] = std::exp(-(i * i) / (2 * 1.5 * 1.5));
    auto pass = [&](const Plane& src, bool horizontal) {
        Plane out{src.w, src.h, std::vector<double>(src.v.size())};
        for (int y = 0; y < src.h; ++y)
            for (int x = 0; x < src.w; ++x) {
                double s = 0, wsum = 0;
                for (int i = -R; i <= R; ++i) {
                    const int xx = horizontal ? x + i : x, yy = horizontal ? y : y + i;
                    if (xx < 0 || yy < 0 || xx >= src.w || yy >= src.h) continue;
                    s += k[i + R] * src.at(xx, yy);
                    wsum += k[i + R];
                }
                out.at(x, y) = s / wsum;
            }
        return out;
    };
    return pass(pass(in, true), false);
}

Plane product(const Plane& a, const Plane& b) {
    Plane p = a;
    for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = a.v[i] * b.v[i];
    return p;
}

}  // namespace

double psnr(const QImage& a, const QImage& b) {
    if (a.isNull() || b.isNull()) return std::numeric_limits<double>::quiet_NaN();
    const QImage x = as_rgb(a, a.size()), y = as_rgb(b, a.size());
    double se = 0;
    for (int r = 0; r < x.height(); ++r) {
        const auto* lx = reinterpret_cast<const QRgb*>(x.constScanLine(r));
        const auto* ly = reinterpret_cast<const QRgb*>(y.constScanLine(r));
        for (int c = 0; c < x.width(); ++c) {
            const double dr = qRed(lx[c]) - qRed(ly[c]), dg = qGreen(lx[c]) - qGreen(ly[c]),
                         db = qBlue(lx[c]) - qBlue(ly[c]);
            se += dr * dr + dg * dg + db * db;
        }
    }
    const double mse = se / (3.0 * x.width() * x.height());
    if (mse == 0) return std::numeric_limits<double>::infinity();
    return 10.0 * std::log10(255.0 * 255.0 / mse);
}

double ssim(const QImage& a, const QImage& b) {
    if (a.isNull() || b.isNull()) return std::numeric_limits<double>::quiet_NaN();
    const QImage x = as_rgb(a, a.size()), y = as_rgb(b, a.size());
    const double c1 = std::pow(0.01 * 255, 2), c2 = std::pow(0.03 * 255, 2);
    double total = 0;
    for (int ch = 0; ch < 3; ++ch) {
        const Plane px = channel(x, ch), py = channel(y, ch);
        const Plane mx = blur(px), my = blur(py);
        const Plane sxx = blur(product(px, px)), syy = blur(product(py, py)),
                    sxy = blur(product(px, py));
        double sum = 0;
        for (size_t i = 0; i < px.v.size(); ++i) {
            const double vx = sxx.v[i] - mx.v[i] * mx.v[i], vy = syy.v[i] - my.v[i] * my.v[i],
                         cxy = sxy.v[i] - mx.v[i] * my.v[i];
            sum += ((2 * mx.v[i] * my.v[i] + c1) * (2 * cxy + c2)) /
                   ((mx.v[i] * mx.v[i] + my.v[i] * my.v[i] + c1) * (vx + vy + c2));
        }
        total += sum / double(px.v.size());
    }
    return total / 3.0;
}

}  // namespace varscope::viz
