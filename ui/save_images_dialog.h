// "Save images…": which of the comparison's images (baseline, accelerated, difference), the
// upscale factor (nearest neighbour) and the folder; the file names follow the settings and are
// shown before saving. The main window writes them (MainWindow::saveImages).
#pragma once

#include <QDialog>
#include <functional>

#include "ui/image_export.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;

namespace varscope::gui {

class SaveImagesDialog : public QDialog {
    Q_OBJECT
  public:
    // available: which images the comparison on show has; nativeSize: their size in pixels;
    // fileName: the name an image gets at a factor (savedImageFileName of the run on show).
    SaveImagesDialog(const SaveImagesOptions& initial, const std::vector<SavedImage>& available,
                     QSize nativeSize, std::function<QString(SavedImage, int)> fileName,
                     QWidget* parent = nullptr);
    SaveImagesOptions options() const;
    QComboBox* factorBox() const { return factor_; }
    QLabel* filesLabel() const { return files_; }

  private:
    void updateFiles();
    void browse();
    QCheckBox *baseline_, *accelerated_, *difference_;
    QComboBox* factor_;
    QLineEdit* folder_;
    QLabel* files_;
    QSize native_;
    std::function<QString(SavedImage, int)> file_name_;
};

}  // namespace varscope::gui
