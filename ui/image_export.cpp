#include "ui/image_export.h"

#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSaveFile>
#include <algorithm>
#include <memory>

namespace varscope::gui {
namespace {
constexpr int kMaxSide = 16384;  // a 1024-pixel model at x16; beyond it PNG writers struggle

// Lower-case words joined by '-', at most `max` characters: safe in file names everywhere.
QString slug(const QString& text, int max) {
    QString s = text.toLower();
    s.replace(QRegularExpression("[^a-z0-9]+"), "-");
    s = s.left(max);
    while (s.startsWith('-')) s.remove(0, 1);
    while (s.endsWith('-')) s.chop(1);
    return s;
}
}  // namespace

const std::vector<int>& upscaleFactors() {
    static const std::vector<int> factors = {1, 2, 4, 8, 16};
    return factors;
}

QImage upscaleNearest(const QImage& image, int factor) {
    if (factor <= 1 || image.isNull()) return image;
    // Qt::FastTransformation is nearest neighbour: every source pixel becomes a sharp block.
    return image.scaled(image.width() * factor, image.height() * factor, Qt::IgnoreAspectRatio,
                        Qt::FastTransformation);
}

QString savedImageFileName(SavedImage which, const Request& r, const QString& accelSummary,
                           int factor) {
    // Text-to-image runs are named by their prompt, class-conditional ones by the class.
    const QString prompt = r.gen.prompt.empty() ? r.prompt : QString::fromStdString(r.gen.prompt);
    QString subject = r.model.family == Family::Infinity
                          ? slug(prompt, 40)
                          : QStringLiteral("class%1").arg(r.gen.class_id);
    if (subject.isEmpty()) subject = QStringLiteral("prompt");
    QString name = QStringLiteral("varscope-%1-seed%2").arg(subject).arg(r.gen.seed);
    switch (which) {
        case SavedImage::Baseline:
            name += "-baseline";
            break;
        case SavedImage::Accelerated: {
            const QString methods = slug(accelSummary, 40);
            name += (methods.isEmpty() ? QString() : "-" + methods) + "-accelerated";
            break;
        }
        case SavedImage::Difference:
            name += "-difference";
            break;
    }
    if (factor > 1) name += QStringLiteral("-x%1").arg(factor);
    return name + ".png";
}

bool writeImagesAtomically(const std::vector<ImageFile>& files, int factor,
                           const QMap<QString, QString>& text, bool overwrite, QString* error) {
    auto fail = [error](const QString& message) {
        if (error) *error = message;
        return false;
    };
    const auto& factors = upscaleFactors();
    if (std::find(factors.begin(), factors.end(), factor) == factors.end())
        return fail(QObject::tr("Upscale factor %1: expected 1, 2, 4, 8 or 16").arg(factor));
    if (files.empty()) return fail(QObject::tr("No image chosen to save."));
    // Everything that can be checked is checked before the first byte is written.
    for (const ImageFile& f : files) {
        const QFileInfo info(f.path);
        const QFileInfo dir(info.absolutePath());
        if (!dir.exists())
            return fail(QObject::tr("Cannot save in %1: no such folder").arg(dir.filePath()));
        if (!dir.isDir())
            return fail(QObject::tr("Cannot save in %1: not a folder").arg(dir.filePath()));
        if (!dir.isWritable())
            return fail(
                QObject::tr("Cannot save in %1: the folder is not writable").arg(dir.filePath()));
        if (info.exists() && !overwrite) return fail(QObject::tr("%1 exists").arg(f.path));
        if (f.image.isNull()) return fail(QObject::tr("%1: no image to save").arg(f.path));
        const int side = std::max(f.image.width(), f.image.height()) * factor;
        if (side > kMaxSide)
            return fail(QObject::tr("%1: %2 px at x%3 is larger than %4 px")
                            .arg(f.path)
                            .arg(std::max(f.image.width(), f.image.height()))
                            .arg(factor)
                            .arg(kMaxSide));
    }
    // Encode all into temporary files; a failure cancels every one (they are removed).
    std::vector<std::unique_ptr<QSaveFile>> pending;
    for (const ImageFile& f : files) {
        auto file = std::make_unique<QSaveFile>(f.path);
        if (!file->open(QIODevice::WriteOnly)) {
            for (auto& p : pending) p->cancelWriting();
            return fail(QObject::tr("Cannot write %1: %2").arg(f.path, file->errorString()));
        }
        QImage img = upscaleNearest(f.image, factor);
        for (auto it = text.begin(); it != text.end(); ++it) img.setText(it.key(), it.value());
        if (!img.save(file.get(), "PNG")) {
            file->cancelWriting();
            for (auto& p : pending) p->cancelWriting();
            return fail(QObject::tr("Could not encode %1").arg(f.path));
        }
        pending.push_back(std::move(file));
    }
    for (size_t i = 0; i < pending.size(); ++i)
        if (!pending[i]->commit()) {
            for (size_t j = i + 1; j < pending.size(); ++j) pending[j]->cancelWriting();
            // The ones renamed before stay complete files; none is half written.
            return fail(QObject::tr("Could not write %1: %2")
                            .arg(files[i].path, pending[i]->errorString()));
        }
    return true;
}

}  // namespace varscope::gui
