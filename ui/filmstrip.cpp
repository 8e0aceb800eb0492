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

QFont Filmstrip::captionFont() const {
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.85);
    return f;
}

QStringList Filmstrip::shownCaptions() const {
    // One frame's pitch, so neighbouring captions never overlap (with 8 more pixels, "step 1"
    // under 22-pixel thumbnails ran into "step 2"). One rule for the whole strip: "step 9"
    // beside "10" read as two kinds of caption.
    const int pitch = frameRect(0).width() + 2;
    const QFontMetrics fm(captionFont());
    bool shorten = false;
    for (const QString& c : captions_) shorten |= fm.horizontalAdvance(c) > pitch;
    QStringList out;
    for (int i = 0; i < frames_.size(); ++i) {
        QString c = captions_.value(i);
        if (shorten && c.contains(' ')) c = c.section(' ', -1);
        out << fm.elidedText(c, Qt::ElideRight, pitch);
    }
    return out;
}

void Filmstrip::paintEvent(QPaintEvent*) {
    QPainter p(this);
    if (frames_.isEmpty()) {
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(rect(), Qt::AlignCenter, tr("per-scale images appear here"));
        return;
    }
    p.setRenderHint(QPainter::SmoothPixmapTransform, true);
    const QStringList captions = shownCaptions();
    p.setFont(captionFont());
    const int line = QFontMetrics(captionFont()).height();
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
        const QRect box(r.left() - 1, r.bottom() + 1, r.width() + 2, line);
        p.drawText(box, Qt::AlignHCenter | Qt::AlignTop, captions.value(i));
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
