#include "ui/history_panel.h"

#include <QHBoxLayout>
#include <QLineEdit>
#include <QListWidget>
#include <QPixmap>
#include <QPushButton>
#include <QVBoxLayout>

#include "ui/run_history.h"

namespace varscope::gui {

HistoryPanel::HistoryPanel(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    filter_ = new QLineEdit(this);
    filter_->setObjectName("historyFilter");
    filter_->setPlaceholderText(tr("Filter by model or method"));
    filter_->setClearButtonEnabled(true);
    list_ = new QListWidget(this);
    list_->setObjectName("historyList");
    list_->setIconSize(QSize(64, 64));
    list_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    list_->setWordWrap(true);
    restore_ = new QPushButton(tr("Restore"), this);
    restore_->setObjectName("historyRestore");
    restore_->setToolTip(tr("Restore the run's settings and generate (or double-click a run)"));
    compare_ = new QPushButton(tr("Compare"), this);
    compare_->setObjectName("historyCompare");
    compare_->setToolTip(tr("Show the two selected runs side by side (the older on the left)"));
    delete_ = new QPushButton(tr("Delete"), this);
    delete_->setObjectName("historyDelete");
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(restore_);
    buttons->addWidget(compare_);
    buttons->addWidget(delete_);
    buttons->addStretch(1);
    v->addWidget(filter_);
    v->addWidget(list_, 1);
    v->addLayout(buttons);

    connect(filter_, &QLineEdit::textChanged, this, &HistoryPanel::rebuild);
    connect(list_, &QListWidget::itemSelectionChanged, this, &HistoryPanel::updateButtons);
    // A click, not a selection change: the list rebuilds (and reselects) when a run is added.
    connect(list_, &QListWidget::itemClicked, this, [this](QListWidgetItem* it) {
        if (selectedIds() == QStringList{it->data(Qt::UserRole).toString()})
            emit showRequested(it->data(Qt::UserRole).toString());
    });
    connect(list_, &QListWidget::itemActivated, this, [this](QListWidgetItem* it) {
        emit restoreRequested(it->data(Qt::UserRole).toString());
    });
    connect(restore_, &QPushButton::clicked, this, [this] {
        const QStringList ids = selectedIds();
        if (ids.size() == 1) emit restoreRequested(ids.front());
    });
    connect(compare_, &QPushButton::clicked, this, [this] {
        const QStringList ids = selectedIds();  // newest first, as listed
        if (ids.size() == 2) emit compareRequested(ids[1], ids[0]);
    });
    connect(delete_, &QPushButton::clicked, this, [this] {
        if (!history_) return;
        for (const QString& id : selectedIds()) history_->remove(id);
    });
    updateButtons();
}

void HistoryPanel::setHistory(RunHistory* history) {
    if (history_) disconnect(history_, nullptr, this, nullptr);
    history_ = history;
    if (history_) connect(history_, &RunHistory::changed, this, &HistoryPanel::rebuild);
    rebuild();
}

QStringList HistoryPanel::selectedIds() const {
    QStringList ids;
    for (int i = 0; i < list_->count(); ++i)
        if (list_->item(i)->isSelected()) ids << list_->item(i)->data(Qt::UserRole).toString();
    return ids;
}

void HistoryPanel::rebuild() {
    const QStringList keep = selectedIds();
    list_->clear();
    if (!history_) return;
    const QString filter = filter_->text().trimmed();
    for (const HistoryEntry& e : history_->entries()) {
        if (!filter.isEmpty() && !e.model.contains(filter, Qt::CaseInsensitive) &&
            !e.methods.contains(filter, Qt::CaseInsensitive))
            continue;
        auto* it =
            new QListWidgetItem(QIcon(QPixmap::fromImage(history_->thumbnail(e.id))),
                                e.time.toString("yyyy-MM-dd HH:mm:ss") + "\n" + e.summary(), list_);
        it->setData(Qt::UserRole, e.id);
        it->setToolTip(QString::fromStdString(e.settings.dump(2)));
        it->setSelected(keep.contains(e.id));
    }
    updateButtons();
}

void HistoryPanel::updateButtons() {
    const int n = int(selectedIds().size());
    restore_->setEnabled(n == 1);
    compare_->setEnabled(n == 2);
    delete_->setEnabled(n > 0);
}

}  // namespace varscope::gui
