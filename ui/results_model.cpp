#include "ui/results_model.h"

#include <cmath>

#include "visualization/float_grid.h"

namespace varscope::gui {
namespace {
QString bytes_text(int64_t b) {
    if (b >= (int64_t(1) << 20)) return QString::number(b / double(1 << 20), 'f', 2) + " MiB";
    if (b >= 1024) return QString::number(b / 1024.0, 'f', 1) + " KiB";
    return QString::number(b) + " B";
}
QString flops_text(double f) {
    return f >= 1e12 ? QString::number(f / 1e12, 'f', 2) + " TFLOP"
                     : QString::number(f / 1e9, 'f', 2) + " GFLOP";
}
// A side's totals over its scales, from one summary: its work (0 unless every scale was counted)
// and its own overhead time (-1 unless every scale was timed).
struct SideTotals {
    double work = 0, method_ms = -1;
};
SideTotals totals_of(const SideResult& r) {
    const auto rows = scale_summary_of(r);
    bool counted = true, timed = !rows.empty();
    double work = 0, ms = 0;
    for (const auto& s : rows) {
        counted = counted && s.work_counted;
        timed = timed && s.parts_timed;
        work += s.work_flops();
        ms += s.parts_timed ? s.overhead_ms() : 0;
    }
    return {counted ? work : 0, timed ? ms : -1};
}
}  // namespace

QString ComparisonMetrics::text() const {
    if (!valid) return {};
    const QString p = std::isinf(psnr) ? QStringLiteral("∞") : QString::number(psnr, 'f', 2);
    if (run_a.isValid() && run_b.isValid()) {
        // Two runs made apart (other moments, maybe other loads of the machine): the ratio of
        // their times, with both times, not a speedup measured side by side.
        const QString format = run_a.date() == run_b.date() ? "HH:mm:ss" : "yyyy-MM-dd HH:mm:ss";
        return QObject::tr(
                   "PSNR %1 dB · SSIM %2 · time A / time B = %3× (A %4 ms, B %5 ms; runs of "
                   "%6, %7; not measured side by side)")
            .arg(p)
            .arg(ssim, 0, 'f', 4)
            .arg(speedup, 0, 'f', 2)
            .arg(base_ms, 0, 'f', 1)
            .arg(accel_ms, 0, 'f', 1)
            .arg(run_a.toString("yyyy-MM-dd HH:mm:ss"), run_b.toString(format));
    }
    QString t = QObject::tr("PSNR %1 dB · SSIM %2 · speedup %3× (%4 → %5 ms)")
                    .arg(p)
                    .arg(ssim, 0, 'f', 4)
                    .arg(speedup, 0, 'f', 2)
                    .arg(base_ms, 0, 'f', 1)
                    .arg(accel_ms, 0, 'f', 1);
    // Only where the method changed the work (off, it is the baseline's).
    if (base_work > 0 && accel_work > 0 && std::abs(base_work / accel_work - 1) > 5e-3)
        t += QObject::tr(" · work %1× less (%2 → %3)")
                 .arg(base_work / accel_work, 0, 'f', 2)
                 .arg(flops_text(base_work), flops_text(accel_work));
    if (accel_method_ms > 0)
        t += QObject::tr(" · method overhead %1 ms").arg(accel_method_ms, 0, 'f', 1);
    // MAR keeps no KV cache (its transformer is bidirectional): no "KV 0 B → 0 B" there.
    if (base_kv > 0 || accel_kv > 0)
        t += QObject::tr(" · KV %1 → %2").arg(bytes_text(base_kv), bytes_text(accel_kv));
    if (sparvar_reference) t += QObject::tr(" · SparVAR on its reference path");
    if (cuda)
        t += base_graphs && accel_graphs     ? QObject::tr(" · CUDA graphs")
             : !base_graphs && !accel_graphs ? QObject::tr(" · eager")
             : base_graphs ? QObject::tr(" · baseline as CUDA graphs, accelerated eager")
                           : QObject::tr(" · baseline eager, accelerated as CUDA graphs");
    return t;
}

bool ranSparVarReference(const RunOutput& run) {
    for (const auto& a : run.accel) {
        if (a.method != "sparvar" || a.kind != "csla_token_mask") continue;
        const auto it = a.values.find("cuda_kernels");
        if (it != a.values.end() && it->second == 0.0) return true;
    }
    return false;
}

QString ComparisonMetrics::toolTip() const {
    if (!valid) return {};
    QString t = QObject::tr(
                    "Times are the model's own: every scale (MAR: step) and the final decode.\n"
                    "Left out: the filmstrip previews and probe records, and one-time CUDA "
                    "graph capture\n(baseline %1 ms, accelerated %2 ms).")
                    .arg(base_overhead_ms, 0, 'f', 1)
                    .arg(accel_overhead_ms, 0, 'f', 1);
    if (base_work > 0 && accel_work > 0)
        t += QObject::tr(
            "\nWork: the FLOPs of every step's forward (projections, attention, FFN, head and the "
            "method's own scoring), counted from the shapes. Where the speedup is below the work "
            "ratio, the method's overhead, kernel launches or memory traffic took the rest back: "
            "the plots' \"Work and time per scale\" shows at which scales.");
    if (accel_method_ms > 0)
        t += QObject::tr(
            "\nMethod overhead: the accelerated run's own work inside the steps (scoring, Top-K, "
            "gathers and scatters, index maps, cache eviction), timed per part by the host clock "
            "on the CPU; the per-scale table's \"method ms\". A GPU run leaves the parts untimed "
            "(`varscope-cli bench e2e` times them there).");
    if (sparvar_reference)
        t += QObject::tr(
            "\nSparVAR's sparse attention ran on its exact reference (dense attention with the "
            "mask), which computes every score, so it saves no time here. Its speed comes from "
            "the CUDA kernels: a CUDA GPU with bf16 or fp16, block-wise mask, reference kernels "
            "off.");
    if (cuda && !base_graphs && !accel_graphs)
        t += QObject::tr(
            "\nBoth sides ran eagerly, not as CUDA graph replays: the inspector records "
            "attention maps and accelerator records inside the steps, which a replay cannot "
            "(AMS-KV's included). At batch 1 graphs are 2-3x faster; the sweep "
            "records nothing and times with graphs where the method allows.");
    if (run_a.isValid() && run_b.isValid())
        t += QObject::tr(
            "\nA and B are two runs of the history, each timed in its own run: the ratio of "
            "their times is not a speedup measured side by side (other moments, maybe another "
            "load on the machine or another model).");
    if (matched_eager)
        t += QObject::tr(
            "\nOne side could not run as CUDA graphs, so the other ran again eagerly: both "
            "are timed the same way.");
    if (cuda && base_graphs != accel_graphs)
        t += QObject::tr(
            "\nOnly one side ran as CUDA graphs: the speedup mixes two ways of "
            "running and says little about the method.");
    return t;
}

void ResultsModel::setSide(const SideResultPtr& result, const Request& r) {
    if (!result) return;
    pair_ = {};  // a run's sides again, not a pair of history runs
    const std::string key = r.gen.baseline_key(r.model.key());
    if (result->side == Side::Baseline) {
        base_ = result;
        base_key_ = key;
        if (accel_ && accel_key_ != key) accel_.reset();
    } else {
        accel_ = result;
        accel_key_ = key;
        if (base_ && base_key_ != key) base_.reset();
    }
    request_ = r;
    update();
}

void ResultsModel::setPair(const SideResultPtr& left, const SideResultPtr& right, const Request& r,
                           const RunPair& pair) {
    base_ = left;
    accel_ = right;
    pair_ = pair;
    base_key_ = accel_key_ = r.gen.baseline_key(r.model.key());
    request_ = r;
    update();
}

void ResultsModel::clearSide(Side side) {
    (side == Side::Baseline ? base_ : accel_).reset();
    update();
}

void ResultsModel::clear() {
    base_.reset();
    accel_.reset();
    pair_ = {};
    update();
}

void ResultsModel::update() {
    metrics_ = {};
    diff_image_ = {};
    diff_mean_ = 0;
    // Images of other sizes (two runs of other models) have no PSNR or difference.
    if (base_ && accel_ && !base_->image.isNull() && !accel_->image.isNull() &&
        base_->image.size() == accel_->image.size()) {
        metrics_.valid = true;
        const ImageQuality q = Engine::image_quality(base_->run.image, accel_->run.image);
        metrics_.psnr = q.psnr;
        metrics_.ssim = q.ssim;
        metrics_.base_ms = base_->run.total_ms;
        metrics_.accel_ms = accel_->run.total_ms;
        metrics_.speedup =
            accel_->run.total_ms > 0 ? base_->run.total_ms / accel_->run.total_ms : 0;
        metrics_.base_kv = base_->run.kv_bytes;
        metrics_.accel_kv = accel_->run.kv_bytes;
        const SideTotals base_totals = totals_of(*base_), accel_totals = totals_of(*accel_);
        metrics_.base_work = base_totals.work;
        metrics_.accel_work = accel_totals.work;
        metrics_.accel_method_ms = accel_totals.method_ms;
        metrics_.base_overhead_ms = base_->run.overhead_ms;
        metrics_.accel_overhead_ms = accel_->run.overhead_ms;
        metrics_.sparvar_reference = ranSparVarReference(accel_->run);
        metrics_.cuda = base_->run.cuda || accel_->run.cuda;
        metrics_.base_graphs = base_->run.cuda_graphs;
        metrics_.accel_graphs = accel_->run.cuda_graphs;
        metrics_.matched_eager = base_->matched_eager || accel_->matched_eager;
        metrics_.run_a = pair_.left_time;
        metrics_.run_b = pair_.right_time;
        const viz::FloatGrid d = viz::image_difference(base_->image, accel_->image);
        diff_image_ = viz::render_heatmap(d, viz::Colormap::Magma, {0.f, kDiffMax});
        diff_mean_ = d.mean();
    }
    emit changed();
}

}  // namespace varscope::gui
