// An image view with zoom (wheel) and pan (drag) whose view state can be shared, so several
// canvases (baseline | accelerated | difference) stay aligned. Double-click fits the image.
#pragma once

#include <QImage>
#include <QObject>
#include <QPointF>
#include <QWidget>

namespace varscope::viz {

// Zoom factor relative to "fit" and the image point (normalised 0..1) at the view centre.
class ViewSync : public QObject {
    Q_OBJECT
  public:
    using QObject::QObject;
    double zoom() const { return zoom_; }
    QPointF center() const { return center_; }
    void set(double zoom, QPointF center);
    void reset() { set(1.0, {0.5, 0.5}); }

  signals:
    void changed();

  private:
    double zoom_ = 1.0;
    QPointF center_{0.5, 0.5};
};

class ImageCanvas : public QWidget {
    Q_OBJECT
  public:
    explicit ImageCanvas(QWidget* parent = nullptr);
    void setImage(const QImage& image);
    const QImage& image() const { return image_; }
    void setCaption(const QString& caption);  // drawn under the image
    const QString& caption() const { return caption_; }
    void setEmptyText(const QString& t);
    void setSync(ViewSync* sync);       // shared state; the canvas does not own it
    void setBusy(const QString& text);  // e.g. "scale 3/10", empty = idle

    QSize sizeHint() const override { return {320, 340}; }
    QSize minimumSizeHint() const override { return {120, 120}; }
    QRectF imageRect() const;  // where the image is painted at the current zoom / pan

  protected:
    void paintEvent(QPaintEvent*) override;
    void wheelEvent(QWheelEvent*) override;
    void mousePressEvent(QMouseEvent*) override;
    void mouseMoveEvent(QMouseEvent*) override;
    void mouseDoubleClickEvent(QMouseEvent*) override;

  private:
    QRectF viewArea() const;

    QImage image_;
    QString caption_, empty_text_, busy_;
    ViewSync* sync_ = nullptr;
    ViewSync own_sync_;
    QPointF drag_start_, drag_center_;
};

}  // namespace varscope::viz
