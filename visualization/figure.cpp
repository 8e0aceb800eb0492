#include "visualization/figure.h"

#include <QFileInfo>
#include <QPdfWriter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QTextLayout>
#include <QTextOption>
#include <algorithm>
#include <cmath>

namespace varscope::viz {
namespace {
constexpr int kPad = 16;
constexpr int kTitleH = 30;
constexpr int kCaptionH = 34;
constexpr int kNoteH = 16;

QFont note_font() {
    QFont f("DejaVu Sans");
    f.setPixelSize(11);
    return f;
}

// Notes wrap at word boundaries, or anywhere inside a long word (the accelerators' JSON has no
// spaces): a figure exported for a paper must show every setting, not a line cut at the edge.
QTextOption note_option() {
    QTextOption o(Qt::AlignLeft | Qt::AlignTop);
    o.setWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
    return o;
}

int note_height(const QString& note, int width) {
    QTextLayout layout(note, note_font());
    layout.setTextOption(note_option());
    layout.beginLayout();
    qreal h = 0;
    for (QTextLine line = layout.createLine(); line.isValid(); line = layout.createLine()) {
        line.setLineWidth(width);
        h += line.height();
    }
    layout.endLayout();
    return std::max(kNoteH, int(std::ceil(h)) + 2);
}

int rows_of(const Figure& f) {
    const int cols = std::max(1, f.columns);
    return (int(f.panels.size()) + cols - 1) / cols;
}

bool commit(QSaveFile& file, const QString& path, QString* error) {
    if (!file.commit()) {
        if (error) *error = QObject::tr("could not write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

bool open(QSaveFile& file, const QString& path, QString* error) {
    if (!file.open(QIODevice::WriteOnly)) {
        if (error) *error = QObject::tr("cannot open %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

}  // namespace

QSize figure_size(const Figure& f) {
    const int cols = std::max(1, std::min<int>(f.columns, std::max<int>(1, int(f.panels.size()))));
    const int w = std::max(kPad + cols * (f.cell + kPad), 480);
    int h =
        kPad + (f.title.isEmpty() ? 0 : kTitleH) + rows_of(f) * (f.cell + kCaptionH + kPad) + kPad;
    for (const QString& note : f.notes) h += note_height(note, w - 2 * kPad);
    return {w, h};
}

void paint_figure(QPainter& p, const Figure& f) {
    const QSize size = figure_size(f);
    p.fillRect(QRect(QPoint(0, 0), size), Qt::white);
    p.setPen(Qt::black);
    QFont font("DejaVu Sans");
    font.setPixelSize(13);
    int y = kPad;
    if (!f.title.isEmpty()) {
        QFont tf = font;
        tf.setPixelSize(17);
        tf.setBold(true);
        p.setFont(tf);
        p.drawText(QRect(kPad, y, size.width() - 2 * kPad, kTitleH), Qt::AlignLeft | Qt::AlignTop,
                   f.title);
        y += kTitleH;
    }
    p.setFont(font);
    const int cols = std::max(1, f.columns);
    p.setRenderHint(QPainter::SmoothPixmapTransform, false);  // keep tokens crisp
    for (size_t i = 0; i < f.panels.size(); ++i) {
        const int r = int(i) / cols, c = int(i) % cols;
        const QRect cell(kPad + c * (f.cell + kPad), y + r * (f.cell + kCaptionH + kPad), f.cell,
                         f.cell);
        const QImage& img = f.panels[i].image;
        if (!img.isNull()) {
            QSize s = img.size().scaled(cell.size(), Qt::KeepAspectRatio);
            QRect target(QPoint(0, 0), s);
            target.moveCenter(cell.center());
            p.drawImage(target, img);
        } else {
            p.fillRect(cell, QColor(235, 235, 235));
        }
        p.drawText(QRect(cell.left(), cell.bottom() + 4, cell.width(), kCaptionH - 4),
                   Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap, f.panels[i].caption);
    }
    y += rows_of(f) * (f.cell + kCaptionH + kPad);
    p.setFont(note_font());
    p.setPen(QColor(60, 60, 60));
    const int note_w = size.width() - 2 * kPad;
    for (const QString& note : f.notes) {
        const int h = note_height(note, note_w);
        p.drawText(QRectF(kPad, y, note_w, h), note, note_option());
        y += h;
    }
}

QImage render_figure(const Figure& f, double scale) {
    const QSize s = figure_size(f);
    QImage img((QSizeF(s) * scale).toSize(), QImage::Format_RGB32);
    img.setDevicePixelRatio(scale);
    QPainter p(&img);
    p.setRenderHint(QPainter::Antialiasing);
    p.setRenderHint(QPainter::TextAntialiasing);
    paint_figure(p, f);
    p.end();
    return img;
}

FigureFormat figure_format_for(const QString& path) {
    const QString s = QFileInfo(path).suffix().toLower();
    if (s == "svg") return FigureFormat::Svg;
    if (s == "pdf") return FigureFormat::Pdf;
    return FigureFormat::Png;
}

bool write_image(const QImage& image, const QString& path, const QMap<QString, QString>& text,
                 QString* error) {
    QImage img = image;
    for (auto it = text.begin(); it != text.end(); ++it) img.setText(it.key(), it.value());
    QSaveFile file(path);
    if (!open(file, path, error)) return false;
    if (!img.save(&file, "PNG")) {
        file.cancelWriting();
        if (error) *error = QObject::tr("could not encode %1").arg(path);
        return false;
    }
    return commit(file, path, error);
}

bool write_figure(const Figure& f, const QString& path, const QMap<QString, QString>& text,
                  QString* error) {
    const QSize size = figure_size(f);
    switch (figure_format_for(path)) {
        case FigureFormat::Png:
            return write_image(render_figure(f, 2.0), path, text, error);
        case FigureFormat::Svg: {
            QSaveFile file(path);
            if (!open(file, path, error)) return false;
            QSvgGenerator svg;
            svg.setOutputDevice(&file);
            svg.setSize(size);
            svg.setViewBox(QRect(QPoint(0, 0), size));
            svg.setTitle(f.title);
            svg.setDescription(text.value("varscope.settings"));
            QPainter p(&svg);
            paint_figure(p, f);
            p.end();
            return commit(file, path, error);
        }
        case FigureFormat::Pdf: {
            QSaveFile file(path);
            if (!open(file, path, error)) return false;
            {
                QPdfWriter pdf(&file);
                pdf.setTitle(f.title);
                pdf.setCreator("VARScope");
                pdf.setResolution(72);
                pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
                pdf.setPageSize(
                    QPageSize(QSizeF(size), QPageSize::Point, QString(), QPageSize::ExactMatch));
                QPainter p(&pdf);
                paint_figure(p, f);
                p.end();
            }
            return commit(file, path, error);
        }
    }
    return false;
}

bool write_text_file(const QString& path, const QByteArray& data, QString* error) {
    QSaveFile file(path);
    if (!open(file, path, error)) return false;
    if (file.write(data) != data.size()) {
        file.cancelWriting();
        if (error) *error = QObject::tr("could not write %1").arg(path);
        return false;
    }
    return commit(file, path, error);
}

}  // namespace varscope::viz
