// The history of finished runs (#37), on disk: one folder per run (settings.json, metrics.json,
// scales.json: the per-scale summary of both sides, baseline.png, accelerated.png, thumb.png;
// the PNGs carry the settings chunk of an export) and
// index.json listing them newest first. A run is written into "<id>.tmp" and renamed when
// complete, the index through QSaveFile, so a crash leaves either the whole entry or none; the
// oldest entries go beyond maxEntries(). Built on the results model's view of a run.
#pragma once

#include <QDateTime>
#include <QImage>
#include <QObject>
#include <QVector>
#include <nlohmann/json.hpp>
#include <utility>

#include "ui/results_model.h"

namespace varscope::gui {

struct HistoryEntry {
    QString id;  // the folder's name
    QDateTime time;
    nlohmann::json settings;  // Request::to_json() of the run
    QString model;            // the model's display name
    QString methods;          // the accelerated side's methods, "baseline" when none ran
    nlohmann::json metrics;   // psnr, ssim, speedup, baseline_ms, accelerated_ms (if compared)
    bool has_accelerated = false;
    // One line for lists: model · methods · speedup · PSNR.
    QString summary() const;
};

class RunHistory : public QObject {
    Q_OBJECT
  public:
    explicit RunHistory(const QString& dir, int maxEntries = 100, QObject* parent = nullptr);

    const QString& dir() const { return dir_; }
    // Newest first.
    const QVector<HistoryEntry>& entries() const { return entries_; }
    const HistoryEntry* find(const QString& id) const;
    int maxEntries() const { return max_entries_; }
    void setMaxEntries(int n);  // at least 1; the oldest beyond go at once

    // Keeps the results on show (both sides when present); returns the new id, "" + *error
    // when nothing was written.
    QString add(const ResultsModel& results, QString* error = nullptr);
    bool remove(const QString& id);
    QImage image(const QString& id, Side side) const;
    QImage thumbnail(const QString& id) const;
    // The run's result (its accelerated image, or the baseline where none ran) as a SideResult
    // shown on side `shown_as`, with its time and stored per-scale summary (stored_scales; no
    // tokens, maps or records): two runs of the history side by side. Null when the image is
    // missing. *note: why the summary is empty (an entry saved by an older version, or an
    // unreadable scales.json), else "".
    SideResultPtr sideResult(const QString& id, Side shown_as, QString* note = nullptr) const;
    // Both sides of a run as kept (the accelerated side null where none ran), each with its time
    // and per-scale summary; *note as above. {null, null} when the images are missing.
    std::pair<SideResultPtr, SideResultPtr> storedRun(const QString& id,
                                                      QString* note = nullptr) const;
    // The stored per-scale summary of one side of a run; empty + *note (as above) when none.
    std::vector<ScaleSummary> scales(const QString& id, Side side, QString* note = nullptr) const;

  signals:
    void changed();

  private:
    // The kept side `stored` of entry e shown on side `shown_as`.
    SideResultPtr loadSide(const HistoryEntry& e, Side stored, Side shown_as, QString* note) const;
    void load();
    bool writeIndex(QString* error);
    void prune();

    QString dir_;
    int max_entries_;
    QVector<HistoryEntry> entries_;
};

}  // namespace varscope::gui
