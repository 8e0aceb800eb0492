#include "ui/export_dialog.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>

namespace varscope::gui {

ExportDialog::ExportDialog(const ExportOptions& o, const QString& inspectorTab, QWidget* parent)
    : QDialog(parent) {
    setWindowTitle(tr("Export comparison figure"));
    auto* form = new QFormLayout(this);
    auto check = [&](const QString& text, bool on) {
        auto* c = new QCheckBox(text, this);
        c->setChecked(on);
        return c;
    };
    baseline_ = check(tr("Baseline image"), o.baseline);
    accelerated_ = check(tr("Accelerated image"), o.accelerated);
    difference_ = check(tr("Difference heatmap"), o.difference);
    attention_ = check(tr("Attention map"), o.attention);
    inspector_ = check(tr("Current inspector tab (%1)").arg(inspectorTab), o.inspector);
    plots_ = check(tr("Latency plot"), o.plots);
    auto* panels = new QVBoxLayout;
    for (auto* c : {baseline_, accelerated_, difference_, attention_, inspector_, plots_})
        panels->addWidget(c);
    form->addRow(tr("Panels"), panels);
    title_ = new QLineEdit(o.title, this);
    form->addRow(tr("Title"), title_);
    path_ = new QLineEdit(o.path, this);
    path_->setToolTip(
        tr("The suffix picks the format: .png (with the generation settings embedded), "
           ".svg or .pdf"));
    auto* browse = new QPushButton(tr("Browse…"), this);
    connect(browse, &QPushButton::clicked, this, &ExportDialog::browse);
    auto* row = new QHBoxLayout;
    row->addWidget(path_, 1);
    row->addWidget(browse);
    form->addRow(tr("File"), row);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel, this);
    connect(buttons, &QDialogButtonBox::accepted, this, [this] {
        const QString path = path_->text().trimmed();
        const QString suffix = QFileInfo(path).suffix().toLower();
        if (path.isEmpty() || !(suffix == "png" || suffix == "svg" || suffix == "pdf")) {
            QMessageBox::warning(this, windowTitle(),
                                 tr("Choose a file ending in .png, .svg or .pdf."));
            return;
        }
        if (QFileInfo::exists(path) &&
            QMessageBox::question(this, windowTitle(), tr("%1 exists. Overwrite it?").arg(path)) !=
                QMessageBox::Yes)
            return;
        accept();
    });
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    form->addRow(buttons);
    // Enter saves (not the Browse button), and the file name is what one edits first.
    buttons->button(QDialogButtonBox::Save)->setDefault(true);
    path_->setFocus();
    path_->selectAll();
    resize(520, sizeHint().height());
}

void ExportDialog::browse() {
    const QString f =
        QFileDialog::getSaveFileName(this, tr("Export figure"), path_->text(),
                                     tr("PNG (*.png);;SVG (*.svg);;PDF (*.pdf)"), nullptr,
                                     QFileDialog::DontConfirmOverwrite);  // asked once, on Save
    if (!f.isEmpty()) path_->setText(f);
}

ExportOptions ExportDialog::options() const {
    ExportOptions o;
    o.baseline = baseline_->isChecked();
    o.accelerated = accelerated_->isChecked();
    o.difference = difference_->isChecked();
    o.attention = attention_->isChecked();
    o.inspector = inspector_->isChecked();
    o.plots = plots_->isChecked();
    o.title = title_->text();
    o.path = path_->text().trimmed();
    return o;
}

}  // namespace varscope::gui
