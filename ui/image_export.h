// Full-size outputs of a comparison: the baseline, the accelerated image and the difference map
// at native size or upscaled by an integer factor (nearest neighbour: the emoji are pixel art,
// smoothing would blur every pixel edge), named from the settings and written as one batch:
// every file or none.
#pragma once

#include <QImage>
#include <QMap>
#include <QString>
#include <QStringList>
#include <vector>

#include "ui/run_types.h"

namespace varscope::gui {

enum class SavedImage { Baseline, Accelerated, Difference };

// The factors offered (File ▸ Save images…, the images' context menu).
const std::vector<int>& upscaleFactors();

// Each pixel becomes a factor x factor block; factor 1 returns the image as it is.
QImage upscaleNearest(const QImage& image, int factor);

// "varscope-class3-seed7-fastvar-ams-kv-accelerated-x4.png": the subject (class or the prompt's
// words), seed, the accelerated side's methods, which image and the factor (none at 1).
QString savedImageFileName(SavedImage which, const Request& r, const QString& accelSummary,
                           int factor);

struct SaveImagesOptions {
    bool baseline = true, accelerated = true, difference = false;
    int factor = 1;
    QString folder;
};

struct ImageFile {
    QString path;
    QImage image;
};

// Writes every file or none: each is encoded into a QSaveFile first and only renamed into place
// once all of them encoded. A missing or unwritable folder, an unsupported factor, an image too
// large or an existing file (unless overwrite) is refused before anything is written; false and
// *error naming the folder or file. `text` goes into every PNG's text chunks.
bool writeImagesAtomically(const std::vector<ImageFile>& files, int factor,
                           const QMap<QString, QString>& text, bool overwrite, QString* error);

}  // namespace varscope::gui
