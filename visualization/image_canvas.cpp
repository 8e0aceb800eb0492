#include "visualization/image_canvas.h"

#include <QMouseEvent>
#include <QPainter>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

namespace varscope::viz {

void ViewSync::set(double zoom, QPointF center) {
    zoom = std::clamp(zoom, 1.0, 64.0);
    center = {std::clamp(center.x(), 0.0, 1.0), std::clamp(center.y(), 0.0, 1.0)};
    if (zoom == zoom_ && center == center_) return;
    zoom_ = zoom;
    center_ = center;
    emit changed();
}

ImageCanvas::ImageCanvas(QWidget* parent) : QWidget(parent) {
    setSync(&own_sync_);
    setMouseTracking(false);
    empty_text_ = tr("No image yet");
}

void ImageCanvas::setSync(ViewSync* sync) {
    if (sync_) disconnect(sync_, nullptr, this, nullptr);
    sync_ = sync ? sync : &own_sync_;
    connect(sync_, &ViewSync::changed, this, qOverload<>(&QWidget::update));
    update();
}

void ImageCanvas::setImage(const QImage& image) {
    image_ = image;
    update();
}

void ImageCanvas::setCaption(const QString& caption) {
    caption_ = caption;
    update();
}

void ImageCanvas::setEmptyText(const QString& t) {
    empty_text_ = t;
    update();
}

void ImageCanvas::setBusy(const QString& text) {
    busy_ = text;
    update();
}

QRectF ImageCanvas::viewArea() const {
    const int caption_h = caption_.isEmpty() ? 0 : fontMetrics().height() * 2 + 4;
    return QRectF(2, 2, width() - 4, height() - 4 - caption_h);
}

QRectF ImageCanvas::imageRect() const {
    const QRectF area = viewArea();
    if (image_.isNull() || area.width() <= 0 || area.height() <= 0) return {};
    const double fit = std::min(area.width() / image_.width(), area.height() / image_.height());
    const double s = fit * sync_->zoom();
    const QSizeF size(image_.width() * s, image_.height() * s);
    const QPointF c = sync_->center();
    const QPointF topLeft(area.center().x() - c.x() * size.width(),
                          area.center().y() - c.y() * size.height());
    return QRectF(topLeft, size);
}

void ImageCanvas::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), palette().window().color().darker(108));
    const QRectF area = viewArea();
    if (image_.isNull()) {
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(area, Qt::AlignCenter | Qt::TextWordWrap, busy_.isEmpty() ? empty_text_ : busy_);
    } else {
        p.save();
        p.setClipRect(area);
        // Nearest-neighbour once zoomed in, so individual pixels and tokens stay visible.
        p.setRenderHint(QPainter::SmoothPixmapTransform, sync_->zoom() < 2.0);
        p.drawImage(imageRect(), image_);
        p.restore();
        if (!busy_.isEmpty()) {
            const QRect badge(int(area.left()) + 6, int(area.top()) + 6,
                              fontMetrics().horizontalAdvance(busy_) + 12,
                              fontMetrics().height() + 6);
            p.fillRect(badge, QColor(0, 0, 0, 150));
            p.setPen(Qt::white);
            p.drawText(badge, Qt::AlignCenter, busy_);
        }
    }
    if (!caption_.isEmpty()) {
        p.setPen(palette().color(QPalette::WindowText));
        p.drawText(QRectF(4, area.bottom() + 2, width() - 8, height() - area.bottom() - 2),
                   Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap, caption_);
    }
}

void ImageCanvas::wheelEvent(QWheelEvent* e) {
    if (image_.isNull()) return;
    const double factor = std::pow(1.0015, e->angleDelta().y());
    // Keep the image point under the mouse fixed while zooming.
    const QRectF r = imageRect();
    const QPointF m = e->position();
    const QPointF anchor((m.x() - r.left()) / r.width(), (m.y() - r.top()) / r.height());
    const double z0 = sync_->zoom(), z1 = std::clamp(z0 * factor, 1.0, 64.0);
    const QPointF c = sync_->center();
    const QPointF c1 = anchor + (c - anchor) * (z0 / z1);
    sync_->set(z1, c1);
    e->accept();
}

void ImageCanvas::mousePressEvent(QMouseEvent* e) {
    drag_start_ = e->position();
    drag_center_ = sync_->center();
}

void ImageCanvas::mouseMoveEvent(QMouseEvent* e) {
    if (!(e->buttons() & Qt::LeftButton) || image_.isNull()) return;
    const QRectF r = imageRect();
    const QPointF d = e->position() - drag_start_;
    sync_->set(sync_->zoom(), drag_center_ - QPointF(d.x() / r.width(), d.y() / r.height()));
}

void ImageCanvas::mouseDoubleClickEvent(QMouseEvent*) {
    sync_->reset();
}

}  // namespace varscope::viz
