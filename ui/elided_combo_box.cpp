#include "ui/elided_combo_box.h"

#include <QStyleOptionComboBox>
#include <QStylePainter>

namespace varscope::gui {

ElidedComboBox::ElidedComboBox(QWidget* parent) : QComboBox(parent) {
    connect(this, &QComboBox::currentTextChanged, this, &ElidedComboBox::updateToolTip);
}

void ElidedComboBox::setBaseToolTip(const QString& tip) {
    base_tip_ = tip;
    updateToolTip();
}

int ElidedComboBox::fieldWidth() const {
    QStyleOptionComboBox opt;
    initStyleOption(&opt);
    return style()
        ->subControlRect(QStyle::CC_ComboBox, &opt, QStyle::SC_ComboBoxEditField, this)
        .width();
}

bool ElidedComboBox::elided() const {
    return shownText() != currentText();
}

QString ElidedComboBox::shownText() const {
    return fontMetrics().elidedText(currentText(), Qt::ElideRight, fieldWidth());
}

void ElidedComboBox::paintEvent(QPaintEvent*) {
    QStylePainter p(this);
    QStyleOptionComboBox opt;
    initStyleOption(&opt);
    p.drawComplexControl(QStyle::CC_ComboBox, opt);
    if (!isEditable()) opt.currentText = shownText();
    p.drawControl(QStyle::CE_ComboBoxLabel, opt);
}

void ElidedComboBox::resizeEvent(QResizeEvent* e) {
    QComboBox::resizeEvent(e);
    updateToolTip();
}

void ElidedComboBox::updateToolTip() {
    setToolTip(elided() ? currentText() + "\n\n" + base_tip_ : base_tip_);
}

}  // namespace varscope::gui
