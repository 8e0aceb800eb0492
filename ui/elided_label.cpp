#include "ui/elided_label.h"

#include <algorithm>

namespace varscope::gui {

ElidedLabel::ElidedLabel(QWidget* parent) : QLabel(parent) {
    setTextFormat(Qt::PlainText);
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
}

void ElidedLabel::setFullText(const QString& text) {
    full_ = text;
    updateGeometry();
    elide();
}

void ElidedLabel::setDetails(const QString& details) {
    details_ = details;
    elide();
}

QSize ElidedLabel::sizeHint() const {
    const QFontMetrics fm = fontMetrics();
    const QMargins m = contentsMargins();
    return {fm.horizontalAdvance(full_) + m.left() + m.right() + 2 * margin(),
            QLabel::sizeHint().height()};
}

QSize ElidedLabel::minimumSizeHint() const {
    const QSize s = sizeHint();
    return {std::min(s.width(), fontMetrics().horizontalAdvance(QStringLiteral("Mmmmm…"))),
            s.height()};
}

void ElidedLabel::resizeEvent(QResizeEvent* e) {
    QLabel::resizeEvent(e);
    elide();
}

void ElidedLabel::elide() {
    const int room = contentsRect().width() - 2 * margin();
    QLabel::setText(fontMetrics().elidedText(full_, Qt::ElideRight, std::max(room, 0)));
    QStringList tip;
    if (elided()) tip << full_;
    if (!details_.isEmpty()) tip << details_;
    setToolTip(tip.join("\n\n"));
}

}  // namespace varscope::gui
