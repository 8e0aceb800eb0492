// A combo box that elides its current text ("Emoji text-to-image (embed…") instead of cutting it
// off where its field ends, and then shows the whole text in its tooltip above its own. A plain
// QComboBox narrower than its text cuts the text mid-letter (the model box at 1280×800).
#pragma once

#include <QComboBox>

namespace varscope::gui {

class ElidedComboBox : public QComboBox {
    Q_OBJECT
  public:
    explicit ElidedComboBox(QWidget* parent = nullptr);
    // The tooltip under the current text's (when elided).
    void setBaseToolTip(const QString& tip);
    bool elided() const;        // the current text does not fit the field
    QString shownText() const;  // the current text as painted

  protected:
    void paintEvent(QPaintEvent* e) override;
    void resizeEvent(QResizeEvent* e) override;

  private:
    int fieldWidth() const;
    void updateToolTip();
    QString base_tip_;
};

}  // namespace varscope::gui
