// A one-line label that elides its text to the width it gets ("…") and shows the whole text as
// its tooltip: a long model description or class name can neither widen the window nor be cut
// off unseen (at 1280×800 the status bar's model line ran out of the window).
#pragma once

#include <QLabel>

namespace varscope::gui {

class ElidedLabel : public QLabel {
    Q_OBJECT
  public:
    explicit ElidedLabel(QWidget* parent = nullptr);
    void setFullText(const QString& text);
    QString fullText() const { return full_; }
    // Shown in the tooltip under the whole text (e.g. the settings of the run).
    void setDetails(const QString& details);
    bool elided() const { return text() != full_; }
    QSize sizeHint() const override;         // the whole text
    QSize minimumSizeHint() const override;  // a few characters; the rest elides

  protected:
    void resizeEvent(QResizeEvent* e) override;

  private:
    void elide();
    QString full_, details_;
};

}  // namespace varscope::gui
