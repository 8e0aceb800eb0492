// The history dock (#37): the finished runs of RunHistory, newest first, with thumbnails and a
// filter by model or method. A click on a run shows it as kept (images, metrics, plots);
// activating it restores its settings; two selected runs can be compared side by side; runs can
// be deleted.
#pragma once

#include <QWidget>

class QLineEdit;
class QListWidget;
class QPushButton;

namespace varscope::gui {

class RunHistory;

class HistoryPanel : public QWidget {
    Q_OBJECT
  public:
    explicit HistoryPanel(QWidget* parent = nullptr);
    void setHistory(RunHistory* history);  // not owned
    QListWidget* list() const { return list_; }
    QStringList selectedIds() const;

  signals:
    void restoreRequested(QString id);
    // A click on one run (alone in the selection): show it as it was kept.
    void showRequested(QString id);
    void compareRequested(QString left, QString right);

  private:
    void rebuild();
    void updateButtons();

    RunHistory* history_ = nullptr;
    QLineEdit* filter_;
    QListWidget* list_;
    QPushButton* restore_;
    QPushButton* compare_;
    QPushButton* delete_;
};

}  // namespace varscope::gui
