#include "visualization/colormap.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace varscope::viz {
namespace {

struct Stop {
    double r, g, b;
};

// Key colours sampled evenly from the matplotlib maps (CC0 data); linear in between.
constexpr std::array<Stop, 9> kViridis = {{{0.267, 0.005, 0.329},
                                           {0.279, 0.175, 0.483},
                                           {0.230, 0.322, 0.546},
                                           {0.173, 0.449, 0.558},
                                           {0.128, 0.567, 0.551},
                                           {0.153, 0.680, 0.504},
                                           {0.363, 0.787, 0.384},
                                           {0.678, 0.864, 0.190},
                                           {0.993, 0.906, 0.144}}};
constexpr std::array<Stop, 9> kMagma = {{{0.001, 0.000, 0.014},
                                         {0.112, 0.065, 0.276},
                                         {0.316, 0.071, 0.485},
                                         {0.511, 0.123, 0.506},
                                         {0.716, 0.215, 0.475},
                                         {0.904, 0.323, 0.388},
                                         {0.987, 0.536, 0.382},
                                         {0.996, 0.762, 0.524},
                                         {0.987, 0.991, 0.750}}};
constexpr std::array<Stop, 9> kInferno = {{{0.001, 0.000, 0.014},
                                           {0.133, 0.047, 0.306},
                                           {0.341, 0.062, 0.429},
                                           {0.550, 0.161, 0.506},
                                           {0.735, 0.216, 0.330},
                                           {0.891, 0.336, 0.200},
                                           {0.978, 0.557, 0.035},
                                           {0.975, 0.798, 0.216},
                                           {0.988, 0.998, 0.645}}};
constexpr std::array<Stop, 5> kCoolwarm = {{{0.230, 0.299, 0.754},
                                            {0.552, 0.690, 0.996},
                                            {0.865, 0.865, 0.865},
                                            {0.958, 0.604, 0.483},
                                            {0.706, 0.016, 0.150}}};

template <size_t N>
QRgb lerp(const std::array<Stop, N>& stops, double t) {
    const double x = t * (N - 1);
    const size_t i = std::min(static_cast<size_t>(x), N - 2);
    const double f = x - static_cast<double>(i);
    auto mix = [&](double a, double b) {
        return static_cast<int>(std::lround(255 * (a + (b - a) * f)));
    };
    return qRgb(mix(stops[i].r, stops[i + 1].r), mix(stops[i].g, stops[i + 1].g),
                mix(stops[i].b, stops[i + 1].b));
}

}  // namespace

QStringList colormap_names() {
    return {"viridis", "magma", "inferno", "coolwarm", "gray", "mask"};
}

Colormap colormap_from_name(const QString& name) {
    const int i = static_cast<int>(colormap_names().indexOf(name.toLower()));
    return i < 0 ? Colormap::Viridis : static_cast<Colormap>(i);
}

QString colormap_name(Colormap c) {
    return colormap_names().value(static_cast<int>(c));
}

QRgb colormap_rgb(Colormap c, double t) {
    if (!std::isfinite(t)) return qRgb(128, 128, 128);
    t = std::clamp(t, 0.0, 1.0);
    switch (c) {
        case Colormap::Viridis:
            return lerp(kViridis, t);
        case Colormap::Magma:
            return lerp(kMagma, t);
        case Colormap::Inferno:
            return lerp(kInferno, t);
        case Colormap::Coolwarm:
            return lerp(kCoolwarm, t);
        case Colormap::Gray: {
            const int v = static_cast<int>(std::lround(255 * t));
            return qRgb(v, v, v);
        }
        case Colormap::Mask:
            return t >= 0.5 ? qRgb(255, 196, 0) : qRgb(36, 40, 56);
    }
    return qRgb(0, 0, 0);
}

QColor colormap_color(Colormap c, double t) {
    return QColor::fromRgb(colormap_rgb(c, t));
}

QImage colormap_strip(Colormap c, int width, int height) {
    QImage img(std::max(width, 1), std::max(height, 1), QImage::Format_RGB32);
    for (int x = 0; x < img.width(); ++x) {
        const QRgb v = colormap_rgb(c, img.width() == 1 ? 0.5 : double(x) / (img.width() - 1));
        for (int y = 0; y < img.height(); ++y) img.setPixel(x, y, v);
    }
    return img;
}

}  // namespace varscope::viz
