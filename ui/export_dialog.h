// "Export comparison figure": which panels go into the figure, its title and the file (PNG,
// SVG or PDF by suffix). The main window composes and writes it.
#pragma once

#include <QDialog>

class QCheckBox;
class QLineEdit;

namespace varscope::gui {

struct ExportOptions {
    bool baseline = true, accelerated = true, difference = true;
    bool attention = true, inspector = true, plots = false;
    QString title;
    QString path;
};

class ExportDialog : public QDialog {
    Q_OBJECT
  public:
    ExportDialog(const ExportOptions& initial, const QString& inspectorTab,
                 QWidget* parent = nullptr);
    ExportOptions options() const;

  private:
    void browse();
    QCheckBox *baseline_, *accelerated_, *difference_, *attention_, *inspector_, *plots_;
    QLineEdit* title_;
    QLineEdit* path_;
};

}  // namespace varscope::gui
