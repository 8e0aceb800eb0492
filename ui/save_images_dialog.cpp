#include "ui/save_images_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <algorithm>

namespace varscope::gui {

SaveImagesDialog::SaveImagesDialog(const SaveImagesOptions& o,
                                   const std::vector<SavedImage>& available, QSize nativeSize,
                                   std::function<QString(SavedImage, int)> fileName,
                                   QWidget* parent)
    : QDialog(parent), native_(nativeSize), file_name_(std::move(fileName)) {
    setWindowTitle(tr("Save images"));
    auto* form = new QFormLayout(this);
    auto has = [&](SavedImage s) {
        return std::find(available.begin(), available.end(), s) != available.end();
    };
    auto check = [&](const QString& text, bool on, SavedImage s, const QString& missing) {
        auto* c = new QCheckBox(text, this);
        c->setEnabled(has(s));
        c->setChecked(on && has(s));
        if (!has(s)) c->setToolTip(missing);
        connect(c, &QCheckBox::toggled, this, &SaveImagesDialog::updateFiles);
        return c;
    };
    baseline_ = check(tr("Baseline"), o.baseline, SavedImage::Baseline, tr("No baseline on show"));
    accelerated_ = check(tr("Accelerated"), o.accelerated, SavedImage::Accelerated,
                         tr("No accelerated image on show"));
    difference_ = check(tr("Difference map"), o.difference, SavedImage::Difference,
                        tr("The difference map needs both images"));
    baseline_->setObjectName("saveBaseline");
    accelerated_->setObjectName("saveAccelerated");
    difference_->setObjectName("saveDifference");
    auto* images = new QVBoxLayout;
    for (auto* c : {baseline_, accelerated_, difference_}) images->addWidget(c);
    form->addRow(tr("Images"), images);

    factor_ = new QComboBox(this);
    factor_->setObjectName("saveFactor");
    for (int f : upscaleFactors())
        factor_->addItem(
            f == 1 ? tr("native (%1×%2 px)").arg(native_.width()).arg(native_.height())
                   : tr("×%1 (%2×%3 px)").arg(f).arg(native_.width() * f).arg(native_.height() * f),
            f);
    factor_->setCurrentIndex(std::max(0, factor_->findData(o.factor)));
    factor_->setToolTip(tr("Nearest-neighbour upscaling: every pixel becomes a sharp square"));
    connect(factor_, &QComboBox::currentIndexChanged, this, &SaveImagesDialog::updateFiles);
    form->addRow(tr("Size"), factor_);

    folder_ = new QLineEdit(o.folder, this);
    folder_->setObjectName("saveFolder");
    auto* browse = new QPushButton(tr("Browse…"), this);
    connect(browse, &QPushButton::clicked, this, &SaveImagesDialog::browse);
    auto* row = new QHBoxLayout;
    row->addWidget(folder_, 1);
    row->addWidget(browse);
    form->addRow(tr("Folder"), row);

    files_ = new QLabel(this);
    files_->setObjectName("saveFiles");
    files_->setWordWrap(true);
    files_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    form->addRow(tr("Files"), files_);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel, this);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    form->addRow(buttons);
    buttons->button(QDialogButtonBox::Save)->setDefault(true);  // Enter saves, not Browse
    updateFiles();
    resize(560, sizeHint().height());
}

void SaveImagesDialog::updateFiles() {
    const SaveImagesOptions o = options();
    QStringList names;
    if (o.baseline) names << file_name_(SavedImage::Baseline, o.factor);
    if (o.accelerated) names << file_name_(SavedImage::Accelerated, o.factor);
    if (o.difference) names << file_name_(SavedImage::Difference, o.factor);
    files_->setText(names.isEmpty() ? tr("(no image chosen)") : names.join('\n'));
}

void SaveImagesDialog::browse() {
    const QString d =
        QFileDialog::getExistingDirectory(this, tr("Save images in"), folder_->text());
    if (!d.isEmpty()) folder_->setText(d);
}

SaveImagesOptions SaveImagesDialog::options() const {
    SaveImagesOptions o;
    o.baseline = baseline_->isChecked();
    o.accelerated = accelerated_->isChecked();
    o.difference = difference_->isChecked();
    o.factor = factor_->currentData().toInt();
    o.folder = folder_->text().trimmed();
    return o;
}

}  // namespace varscope::gui
