#include "ui/run_history.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <cmath>
#include <stdexcept>

#include "visualization/figure.h"

namespace varscope::gui {
namespace {

constexpr int kThumbSide = 96;

nlohmann::json entry_json(const HistoryEntry& e) {
    return {{"id", e.id.toStdString()},
            {"time", e.time.toString(Qt::ISODateWithMs).toStdString()},
            {"settings", e.settings},
            {"model", e.model.toStdString()},
            {"methods", e.methods.toStdString()},
            {"metrics", e.metrics},
            {"has_accelerated", e.has_accelerated}};
}

HistoryEntry entry_of(const nlohmann::json& j) {
    HistoryEntry e;
    e.id = QString::fromStdString(j.at("id").get<std::string>());
    e.time = QDateTime::fromString(QString::fromStdString(j.value("time", "")), Qt::ISODateWithMs);
    e.settings = j.value("settings", nlohmann::json::object());
    e.model = QString::fromStdString(j.value("model", ""));
    e.methods = QString::fromStdString(j.value("methods", ""));
    e.metrics = j.value("metrics", nlohmann::json::object());
    e.has_accelerated = j.value("has_accelerated", false);
    return e;
}

RgbImage rgb_of(const QImage& image) {
    const QImage c = image.convertToFormat(QImage::Format_RGB888);
    RgbImage out{c.width(), c.height(), {}};
    out.rgb.reserve(size_t(3 * c.width() * c.height()));
    for (int y = 0; y < c.height(); ++y)
        out.rgb.insert(out.rgb.end(), c.constScanLine(y), c.constScanLine(y) + 3 * c.width());
    return out;
}

}  // namespace

QString HistoryEntry::summary() const {
    QString s = model + " · " + methods;
    if (metrics.contains("speedup"))
        s += QObject::tr(" · %1×").arg(metrics["speedup"].get<double>(), 0, 'f', 2);
    if (metrics.contains("psnr_db")) {
        const auto& p = metrics["psnr_db"];
        s += QObject::tr(" · PSNR %1")
                 .arg(p.is_number() ? QString::number(p.get<double>(), 'f', 1) : QString("∞"));
    }
    return s;
}

RunHistory::RunHistory(const QString& dir, int maxEntries, QObject* parent)
    : QObject(parent), dir_(dir), max_entries_(std::max(1, maxEntries)) {
    load();
}

const HistoryEntry* RunHistory::find(const QString& id) const {
    for (const auto& e : entries_)
        if (e.id == id) return &e;
    return nullptr;
}

void RunHistory::setMaxEntries(int n) {
    max_entries_ = std::max(1, n);
    if (entries_.size() <= max_entries_) return;
    prune();
    writeIndex(nullptr);
    emit changed();
}

void RunHistory::load() {
    entries_.clear();
    QDir d(dir_);
    // Entries cut short by a crash never reached their final name: they go.
    for (const QString& tmp : d.entryList({"*.tmp"}, QDir::Dirs | QDir::NoDotAndDotDot))
        QDir(d.filePath(tmp)).removeRecursively();
    QFile f(d.filePath("index.json"));
    if (!f.open(QIODevice::ReadOnly)) return;
    try {
        const auto j = nlohmann::json::parse(f.readAll().toStdString());
        for (const auto& e : j.at("entries")) {
            HistoryEntry entry = entry_of(e);
            if (QFileInfo(d.filePath(entry.id)).isDir()) entries_.push_back(std::move(entry));
        }
    } catch (const std::exception&) {
        entries_.clear();  // a foreign or broken index: start empty, the folders stay
    }
}

bool RunHistory::writeIndex(QString* error) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries_) list.push_back(entry_json(e));
    const nlohmann::json j = {{"varscope_history", 1}, {"entries", list}};
    QSaveFile f(QDir(dir_).filePath("index.json"));
    if (!f.open(QIODevice::WriteOnly)) {
        if (error) *error = f.errorString();
        return false;
    }
    const std::string text = j.dump(1);
    f.write(text.data(), qint64(text.size()));
    if (!f.commit()) {
        if (error) *error = f.errorString();
        return false;
    }
    return true;
}

void RunHistory::prune() {
    while (entries_.size() > max_entries_) {
        QDir(QDir(dir_).filePath(entries_.back().id)).removeRecursively();
        entries_.pop_back();
    }
}

QString RunHistory::add(const ResultsModel& results, QString* error) {
    const SideResultPtr base = results.baseline(), accel = results.accelerated();
    if (!base || base->image.isNull()) {
        if (error) *error = tr("no results to keep");
        return {};
    }
    QDir d(dir_);
    if (!d.mkpath(".")) {
        if (error) *error = tr("cannot create %1").arg(dir_);
        return {};
    }
    const QDateTime now = QDateTime::currentDateTime();
    QString id = now.toString("yyyyMMdd-HHmmss-zzz");
    for (int n = 2; d.exists(id) || d.exists(id + ".tmp"); ++n)
        id = now.toString("yyyyMMdd-HHmmss-zzz") + QString("-%1").arg(n);
    const QString tmp = d.filePath(id + ".tmp");
    if (!QDir().mkpath(tmp)) {
        if (error) *error = tr("cannot create %1").arg(tmp);
        return {};
    }
    QDir t(tmp);

    HistoryEntry e;
    e.id = id;
    e.time = now;
    e.settings = results.request().to_json();
    e.model = QString::fromStdString(results.request().model.display_name());
    e.has_accelerated = accel && accel->accelerated && !accel->image.isNull();
    e.methods = e.has_accelerated ? QString::fromStdString(accel->run.accel_summary)
                                  : QStringLiteral("baseline");
    const ComparisonMetrics& m = results.metrics();
    e.metrics = {{"baseline_ms", base->run.total_ms}};
    if (m.valid && e.has_accelerated)
        e.metrics.update(
            {{"psnr_db", std::isinf(m.psnr) ? nlohmann::json("inf") : nlohmann::json(m.psnr)},
             {"ssim", m.ssim},
             {"speedup", m.speedup},
             {"accelerated_ms", m.accel_ms}});

    // The PNGs carry the settings chunk an export carries (drop one on the window to restore).
    QMap<QString, QString> text;
    text[kSettingsTextKey] = QString::fromStdString(e.settings.dump());
    text["Software"] = "VARScope";
    const QImage shown = e.has_accelerated ? accel->image : base->image;
    const QImage thumb = shown.scaled(
        kThumbSide, kThumbSide, Qt::KeepAspectRatio,
        // Upscaled pixel art stays sharp; large images shrink smoothly.
        shown.width() < kThumbSide ? Qt::FastTransformation : Qt::SmoothTransformation);
    // The per-scale summary of both sides: the plots of this run after a restart.
    const nlohmann::json scales = scales_to_json(
        summarize_scales(base->run),
        e.has_accelerated ? summarize_scales(accel->run) : std::vector<ScaleSummary>{});
    QString err;
    bool ok = viz::write_image(base->image, t.filePath("baseline.png"), text, &err) &&
              (!e.has_accelerated ||
               viz::write_image(accel->image, t.filePath("accelerated.png"), text, &err)) &&
              viz::write_image(thumb, t.filePath("thumb.png"), {}, &err) &&
              viz::write_text_file(t.filePath("settings.json"),
                                   QByteArray::fromStdString(e.settings.dump(2)), &err) &&
              viz::write_text_file(t.filePath("metrics.json"),
                                   QByteArray::fromStdString(e.metrics.dump(2)), &err) &&
              viz::write_text_file(t.filePath("scales.json"),
                                   QByteArray::fromStdString(scales.dump(1)), &err);
    // Complete: the entry appears under its final name in one step.
    if (ok && !d.rename(id + ".tmp", id)) {
        ok = false;
        err = tr("cannot rename %1").arg(tmp);
    }
    if (!ok) {
        t.removeRecursively();
        if (error) *error = err;
        return {};
    }
    entries_.prepend(e);
    prune();
    if (!writeIndex(&err) && error) *error = err;
    emit changed();
    return id;
}

bool RunHistory::remove(const QString& id) {
    for (int i = 0; i < entries_.size(); ++i) {
        if (entries_[i].id != id) continue;
        QDir(QDir(dir_).filePath(id)).removeRecursively();
        entries_.removeAt(i);
        writeIndex(nullptr);
        emit changed();
        return true;
    }
    return false;
}

QImage RunHistory::image(const QString& id, Side side) const {
    return QImage(QDir(QDir(dir_).filePath(id))
                      .filePath(side == Side::Baseline ? "baseline.png" : "accelerated.png"));
}

QImage RunHistory::thumbnail(const QString& id) const {
    return QImage(QDir(QDir(dir_).filePath(id)).filePath("thumb.png"));
}

std::vector<ScaleSummary> RunHistory::scales(const QString& id, Side side, QString* note) const {
    if (note) note->clear();
    QFile f(QDir(QDir(dir_).filePath(id)).filePath("scales.json"));
    if (!f.exists()) {
        if (note) *note = tr("no per-scale records in this entry (saved by an older version)");
        return {};
    }
    try {
        if (!f.open(QIODevice::ReadOnly)) throw std::runtime_error(f.errorString().toStdString());
        const auto j = nlohmann::json::parse(f.readAll().toStdString());
        auto rows = scales_from_json(j, side == Side::Baseline ? "baseline" : "accelerated",
                                     f.fileName().toStdString());
        if (rows.empty() && note) *note = tr("no per-scale records of this side in this entry");
        return rows;
    } catch (const std::exception& ex) {
        if (note)
            *note = tr("the per-scale records of this entry are unreadable: %1")
                        .arg(QString::fromUtf8(ex.what()));
        return {};
    }
}

SideResultPtr RunHistory::loadSide(const HistoryEntry& e, Side stored, Side shown_as,
                                   QString* note) const {
    const QImage img = image(e.id, stored);
    if (img.isNull()) return nullptr;
    const bool accelerated = stored == Side::Accelerated;
    auto r = std::make_shared<SideResult>();
    r->side = shown_as;
    r->accelerated = accelerated && shown_as == Side::Accelerated;
    r->image = img.convertToFormat(QImage::Format_RGB888);
    r->run.image = rgb_of(img);
    r->run.family = family_from_id(
        e.settings.value("model", nlohmann::json::object()).value("family", std::string("var")));
    r->run.total_ms = e.metrics.value(accelerated ? "accelerated_ms" : "baseline_ms", 0.0);
    r->run.accel_summary = accelerated ? e.methods.toStdString() : std::string("baseline");
    r->stored_scales = scales(e.id, stored, note);
    return r;
}

SideResultPtr RunHistory::sideResult(const QString& id, Side shown_as, QString* note) const {
    const HistoryEntry* e = find(id);
    if (!e) return nullptr;
    return loadSide(*e, e->has_accelerated ? Side::Accelerated : Side::Baseline, shown_as, note);
}

std::pair<SideResultPtr, SideResultPtr> RunHistory::storedRun(const QString& id,
                                                              QString* note) const {
    const HistoryEntry* e = find(id);
    if (!e) return {};
    SideResultPtr base = loadSide(*e, Side::Baseline, Side::Baseline, note);
    SideResultPtr accel;
    if (e->has_accelerated) {
        QString accel_note;
        accel = loadSide(*e, Side::Accelerated, Side::Accelerated, note ? &accel_note : nullptr);
        if (note && note->isEmpty()) *note = accel_note;
        if (!accel) base.reset();  // half a run: nothing
    }
    return {base, accel};
}

}  // namespace varscope::gui
