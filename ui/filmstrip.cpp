#include "ui/filmstrip.h"

#include <QFontMetrics>
#include <QMouseEvent>
#include <QPainter>

namespace varscope::gui {

Filmstrip::Filmstrip(QWidget* parent) : QWidget(parent) {
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    setToolTip(
        tr("Decoded image after each scale (VAR) or decoding step (MAR); click to "
           "inspect it"));
}

void Filmstrip::setFrames(const QVector<QImage>& frames, const QStringList& captions) {
    frames_ = frames;
    captions_ = captions;
    if (selected_ >= frames_.size()) selected_ = -1;
    updateGeometry();
    update();
}

void Filmstrip::setSelected(int index) {
    selected_ = index;
    update();
}

QSize Filmstrip::sizeHint() const {
    return {400, thumbHeight() + 4};
}

QRect Filmstrip::frameRect(int i) const {
    const int n = std::max(1, int(frames_.size()));
    const int side = std::min(56, (width() - 2) / n - 2);
    return QRect(1 + i * (side + 2), 2, side, side);
}

void Filmstrip::paintEvent(QPaintEvent*) {
    QPainter p(this);
    if (frames_.isEmpty()) {
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(rect(), Qt::AlignCenter, tr("per-scale images appear here"));
        return;
    }
    p.setRenderHint(QPainter::SmoothPixmapTransform, true);
    for (int i = 0; i < frames_.size(); ++i) {
        const QRect r = frameRect(i);
        if (frames_[i].isNull())
            p.fillRect(r, palette().color(QPalette::Mid));
        else
            p.drawImage(r, frames_[i]);
        if (i == selected_) {
            p.setPen(QPen(palette().color(QPalette::Highlight), 2));
            p.drawRect(r.adjusted(-1, -1, 1, 1));
        }
        p.setPen(palette().color(QPalette::WindowText));
        QFont f = font();
        f.setPointSizeF(f.pointSizeF() * 0.85);
        p.setFont(f);
        // "step 12" under a 24-pixel thumbnail: keep what tells the frames apart (the number).
        const QRect box(r.left() - 4, r.bottom() + 1, r.width() + 8, fontMetrics().height());
        QString caption = captions_.value(i);
        const QFontMetrics fm(f);
        if (fm.horizontalAdvance(caption) > box.width() && caption.contains(' '))
            caption = caption.section(' ', -1);
        p.drawText(box, Qt::AlignHCenter | Qt::AlignTop,
                   fm.elidedText(caption, Qt::ElideRight, box.width()));
    }
}

void Filmstrip::mousePressEvent(QMouseEvent* e) {
    for (int i = 0; i < frames_.size(); ++i)
        if (frameRect(i).contains(e->position().toPoint())) {
            selected_ = i;
            update();
            emit frameClicked(i);
            return;
        }
}

}  // namespace varscope::gui
