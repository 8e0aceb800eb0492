// A row of per-scale thumbnails (decoded f_hat after each scale) with their sizes; clicking
// one selects that scale.
#pragma once

#include <QImage>
#include <QVector>
#include <QWidget>

namespace varscope::gui {

class Filmstrip : public QWidget {
    Q_OBJECT
  public:
    explicit Filmstrip(QWidget* parent = nullptr);
    void setFrames(const QVector<QImage>& frames, const QStringList& captions);
    void setSelected(int index);
    int count() const { return int(frames_.size()); }
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override { return {100, thumbHeight() + 4}; }
    // The captions as drawn at the current width: every caption's last word when any full one
    // would be wider than a frame's pitch ("step 12" -> "12"), elided if still too wide.
    QStringList shownCaptions() const;

  signals:
    void frameClicked(int index);

  protected:
    void paintEvent(QPaintEvent*) override;
    void mousePressEvent(QMouseEvent*) override;

  private:
    int thumbHeight() const { return 56 + fontMetrics().height(); }
    QRect frameRect(int i) const;
    QFont captionFont() const;
    QVector<QImage> frames_;
    QStringList captions_;
    int selected_ = -1;
};

}  // namespace varscope::gui
