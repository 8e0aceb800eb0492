// Colormaps for heatmaps and overlays: perceptually ordered maps for magnitudes, a diverging
// one for signed values and a two-colour one for masks. Plain Qt, no model knowledge.
#pragma once

#include <QColor>
#include <QImage>
#include <QString>
#include <QStringList>

namespace varscope::viz {

enum class Colormap { Viridis, Magma, Inferno, Coolwarm, Gray, Mask };

QStringList colormap_names();                      // in enum order, for combo boxes
Colormap colormap_from_name(const QString& name);  // unknown -> Viridis
QString colormap_name(Colormap c);

// t in [0, 1] (clamped) -> colour.
QRgb colormap_rgb(Colormap c, double t);
QColor colormap_color(Colormap c, double t);

// A horizontal (width x height) strip of the map, low values left.
QImage colormap_strip(Colormap c, int width, int height);

}  // namespace varscope::viz
