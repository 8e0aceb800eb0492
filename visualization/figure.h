// Composed comparison figures: a title, a grid of captioned image panels and notes (settings,
// metrics), painted once and written as PNG, SVG or PDF. Files are written atomically.
#pragma once

#include <QImage>
#include <QMap>
#include <QPainter>
#include <QString>
#include <QStringList>
#include <vector>

namespace varscope::viz {

struct FigurePanel {
    QImage image;
    QString caption;
};

struct Figure {
    QString title;
    std::vector<FigurePanel> panels;
    QStringList notes;  // one line each, under the panels
    int columns = 3;
    int cell = 256;  // panel side in points
};

QSize figure_size(const Figure& f);
void paint_figure(QPainter& p, const Figure& f);  // in figure_size() units

// `scale` multiplies the pixel size (2 = HiDPI). `text` goes into PNG text chunks.
QImage render_figure(const Figure& f, double scale = 2.0);

enum class FigureFormat { Png, Svg, Pdf };
FigureFormat figure_format_for(const QString& path);  // by suffix; default PNG

// Writes via QSaveFile (nothing is left behind on failure); returns false and sets *error.
bool write_figure(const Figure& f, const QString& path, const QMap<QString, QString>& text,
                  QString* error);
// Writes an image with text chunks atomically (PNG keeps them).
bool write_image(const QImage& image, const QString& path, const QMap<QString, QString>& text,
                 QString* error);
bool write_text_file(const QString& path, const QByteArray& data, QString* error);

}  // namespace varscope::viz
