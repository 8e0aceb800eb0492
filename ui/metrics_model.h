// Per-scale comparison table (model/view): timings of both sides, speedup, token agreement,
// pruned fraction, estimated KV bytes, attention FLOPs and the whole step's FLOPs (work) with
// their ratio; exports CSV and JSON.
#pragma once

#include <QAbstractTableModel>
#include <QByteArray>

#include "ui/run_types.h"

namespace varscope::gui {

struct ScaleMetrics {
    int scale = 0;
    int patch_num = 0;
    double base_ms = 0, accel_ms = 0;
    double agreement = -1;             // fraction of equal tokens; -1 = n/a
    double pruned = 0;                 // fraction of tokens not computed on the accelerated side
    double base_kv = 0, accel_kv = 0;  // bytes held after this scale (estimated)
    // Attention FLOPs of the step (QK^T and PV) as the method counts them: the pairs it attends
    // (SparVAR counts its sparse pairs also where its reference computes every score), so they
    // show the work a method needs, whichever path ran. 0 = not counted.
    double base_flops = 0, accel_flops = 0;
    // The whole step's FLOPs (every part of the forward: ScaleSummary::work_flops), 0 = not
    // counted, and base_work / accel_work: how much less work the method does at this scale
    // (0 where either side has none counted). A speedup below it is work the method saved but
    // its overhead, launches or memory traffic took back.
    double base_work = 0, accel_work = 0;
    // The accelerated side's own time at this scale (its scoring, gathers, index maps: the cost
    // model's overhead part); -1 where its parts were not timed (a GPU run, an older entry).
    double method_ms = -1;
    double work_ratio() const {
        return base_work > 0 && accel_work > 0 ? base_work / accel_work : 0;
    }
};

// KV bytes after each scale, assuming the cache grows with the tokens appended so far and
// ends at the run's final KV size; records of kind "kv_bytes" (value "total") win.
std::vector<double> kv_bytes_per_scale(const RunOutput& run);

class MetricsModel : public QAbstractTableModel {
    Q_OBJECT
  public:
    using QAbstractTableModel::QAbstractTableModel;
    void setResults(const SideResultPtr& base, const SideResultPtr& accel);
    const std::vector<ScaleMetrics>& rows() const { return rows_; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation o, int role) const override;

    QByteArray toCsv() const;
    // Per-scale rows plus `summary` (totals, PSNR, settings) in one object.
    QByteArray toJson(const nlohmann::json& summary) const;

  private:
    std::vector<ScaleMetrics> rows_;
};

}  // namespace varscope::gui
