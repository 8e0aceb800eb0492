#include "ui/metrics_model.h"

#include <QStringList>
#include <algorithm>

#include "core/accel/probe_kinds.h"

namespace varscope::gui {
namespace {
const char* kColumns[] = {"scale",
                          "tokens",
                          "baseline ms",
                          "accelerated ms",
                          "speedup",
                          "token agreement",
                          "pruned",
                          "baseline KV bytes",
                          "accelerated KV bytes",
                          "baseline attn GFLOP",
                          "accelerated attn GFLOP",
                          "baseline GFLOP",
                          "accelerated GFLOP",
                          "work ratio",
                          "method ms"};
constexpr int kColumnCount = int(sizeof kColumns / sizeof *kColumns);

double speedup(const ScaleMetrics& m) {
    return m.accel_ms > 0 ? m.base_ms / m.accel_ms : 0;
}
}  // namespace

std::vector<double> kv_bytes_per_scale(const RunOutput& run) {
    const size_t n = run.scales.size();
    std::vector<double> out(n, 0.0);
    bool recorded = false;
    for (const auto& a : run.accel) {
        if (a.kind != probe_kinds::kKvBytes || a.scale < 0 || size_t(a.scale) >= n) continue;
        auto it = a.values.find("total");
        if (it == a.values.end()) it = a.values.find("bytes");
        if (it == a.values.end()) continue;
        out[size_t(a.scale)] += it->second;
        recorded = true;
    }
    if (recorded) return out;
    double total = 0, sum = 0;
    for (const auto& s : run.scales)
        if (!s.skipped) total += double(s.patch_num * s.patch_num);
    for (size_t i = 0; i < n; ++i) {
        if (!run.scales[i].skipped)
            sum += double(run.scales[i].patch_num * run.scales[i].patch_num);
        out[i] = total > 0 ? double(run.kv_bytes) * sum / total : 0;
    }
    return out;
}

void MetricsModel::setResults(const SideResultPtr& base, const SideResultPtr& accel) {
    beginResetModel();
    rows_.clear();
    if (base) {
        // Times, KV bytes and FLOPs from the summaries (a history run keeps only those);
        // agreement from the tokens, which live runs have.
        const auto bs = scale_summary_of(*base);
        const auto as = accel ? scale_summary_of(*accel) : std::vector<ScaleSummary>{};
        for (size_t i = 0; i < bs.size(); ++i) {
            ScaleMetrics m;
            m.scale = int(bs[i].scale);
            m.patch_num = int(bs[i].patch_num);
            m.base_ms = bs[i].millis;
            m.base_kv = bs[i].kv_bytes;
            m.base_flops = bs[i].attention_flops;
            m.base_work = bs[i].work_flops();
            if (i < as.size()) {
                m.accel_ms = as[i].millis;
                m.accel_kv = as[i].kv_bytes;
                m.accel_flops = as[i].attention_flops;
                m.accel_work = as[i].work_flops();
                m.method_ms = as[i].overhead_ms();
                m.pruned = std::max(0.0, as[i].pruned);
                const bool tokens = i < base->run.scales.size() && i < accel->run.scales.size();
                const auto* a = tokens ? &accel->run.scales[i].tokens : nullptr;
                const auto* b = tokens ? &base->run.scales[i].tokens : nullptr;
                if (a && !a->empty() && a->size() == b->size()) {
                    size_t same = 0;
                    for (size_t t = 0; t < a->size(); ++t) same += (*a)[t] == (*b)[t];
                    m.agreement = double(same) / double(a->size());
                }
            }
            rows_.push_back(m);
        }
    }
    endResetModel();
}

int MetricsModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : int(rows_.size());
}

int MetricsModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : kColumnCount;
}

QVariant MetricsModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || size_t(index.row()) >= rows_.size()) return {};
    const ScaleMetrics& m = rows_[size_t(index.row())];
    if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
    if (role != Qt::DisplayRole && role != Qt::UserRole) return {};
    const bool raw = role == Qt::UserRole;
    // 0: not counted (a grouped step's later scales, a skipped scale): a dash.
    auto gflop = [&](double v) -> QVariant {
        if (raw) return v;
        return v > 0 ? QVariant(QString::number(v / 1e9, 'f', 3)) : QVariant(QStringLiteral("–"));
    };
    auto pct = [&](double v) -> QVariant {
        if (v < 0) return raw ? QVariant(v) : QVariant(QStringLiteral("–"));
        return raw ? QVariant(v) : QVariant(QString::number(100 * v, 'f', 1) + " %");
    };
    switch (index.column()) {
        case 0:
            return m.scale;
        case 1:
            return raw ? QVariant(m.patch_num) : QVariant(QStringLiteral("%1×%1").arg(m.patch_num));
        case 2:
            return raw ? QVariant(m.base_ms) : QVariant(QString::number(m.base_ms, 'f', 2));
        case 3:
            return raw ? QVariant(m.accel_ms) : QVariant(QString::number(m.accel_ms, 'f', 2));
        case 4:
            return raw ? QVariant(speedup(m)) : QVariant(QString::number(speedup(m), 'f', 2) + "×");
        case 5:
            return pct(m.agreement);
        case 6:
            return pct(m.pruned);
        case 7:
            return raw ? QVariant(m.base_kv)
                       : QVariant(QString::number(m.base_kv / 1024.0, 'f', 1) + " KiB");
        case 8:
            return raw ? QVariant(m.accel_kv)
                       : QVariant(QString::number(m.accel_kv / 1024.0, 'f', 1) + " KiB");
        case 9:
            return gflop(m.base_flops);
        case 10:
            return gflop(m.accel_flops);
        case 11:
            return gflop(m.base_work);
        case 12:
            return gflop(m.accel_work);
        case 13:
            if (raw) return m.work_ratio();
            return m.work_ratio() > 0 ? QVariant(QString::number(m.work_ratio(), 'f', 2) + "×")
                                      : QVariant(QStringLiteral("–"));
        case 14:
            if (raw) return m.method_ms;
            return m.method_ms >= 0 ? QVariant(QString::number(m.method_ms, 'f', 2))
                                    : QVariant(QStringLiteral("–"));
    }
    return {};
}

QVariant MetricsModel::headerData(int section, Qt::Orientation o, int role) const {
    if (role != Qt::DisplayRole || o != Qt::Horizontal || section < 0 || section >= kColumnCount)
        return {};
    return tr(kColumns[section]);
}

QByteArray MetricsModel::toCsv() const {
    QStringList lines;
    QStringList header;
    for (const char* c : kColumns) header << QString(c).replace(' ', '_');
    lines << header.join(',');
    for (const auto& m : rows_)
        lines << QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15")
                     .arg(m.scale)
                     .arg(m.patch_num)
                     .arg(m.base_ms, 0, 'f', 4)
                     .arg(m.accel_ms, 0, 'f', 4)
                     .arg(speedup(m), 0, 'f', 4)
                     .arg(m.agreement, 0, 'f', 4)
                     .arg(m.pruned, 0, 'f', 4)
                     .arg(m.base_kv, 0, 'f', 0)
                     .arg(m.accel_kv, 0, 'f', 0)
                     .arg(m.base_flops / 1e9, 0, 'f', 6)
                     .arg(m.accel_flops / 1e9, 0, 'f', 6)
                     .arg(m.base_work / 1e9, 0, 'f', 6)
                     .arg(m.accel_work / 1e9, 0, 'f', 6)
                     .arg(m.work_ratio(), 0, 'f', 4)
                     .arg(m.method_ms, 0, 'f', 4);
    return (lines.join('\n') + '\n').toUtf8();
}

QByteArray MetricsModel::toJson(const nlohmann::json& summary) const {
    nlohmann::json j = summary;
    auto& scales = j["scales"] = nlohmann::json::array();
    for (const auto& m : rows_)
        scales.push_back(
            {{"scale", m.scale},
             {"patch_num", m.patch_num},
             {"baseline_ms", m.base_ms},
             {"accelerated_ms", m.accel_ms},
             {"speedup", speedup(m)},
             {"token_agreement", m.agreement},
             {"pruned", m.pruned},
             {"baseline_kv_bytes", m.base_kv},
             {"accelerated_kv_bytes", m.accel_kv},
             {"baseline_attention_flops", m.base_flops},
             {"accelerated_attention_flops", m.accel_flops},
             {"baseline_flops", m.base_work},
             {"accelerated_flops", m.accel_work},
             {"work_ratio", m.work_ratio()},
             {"method_ms", m.method_ms < 0 ? nlohmann::json() : nlohmann::json(m.method_ms)}});
    return QByteArray::fromStdString(j.dump(2) + "\n");
}

}  // namespace varscope::gui
