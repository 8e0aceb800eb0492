#include "ui/inspector_empty.h"

#include <QObject>
#include <algorithm>
#include <vector>

namespace varscope::gui {
namespace {

QString tr(const char* s) {
    return QObject::tr(s);
}

QString familyName(Family f) {
    switch (f) {
        case Family::Var:
            return tr("a class-conditional VAR");
        case Family::Mar:
            return tr("a MAR");
        case Family::Infinity:
            return tr("a text-to-image model (Infinity)");
    }
    return {};
}

bool enabled(const nlohmann::json& config, const char* method) {
    const auto it = config.find(method);
    return it != config.end() && it->is_object() && it->value("enabled", false);
}

// An integer or list setting of a method, or `fallback` when absent or of another type.
int64_t intSetting(const nlohmann::json& config, const char* method, const char* key,
                   int64_t fallback) {
    const auto m = config.find(method);
    if (m == config.end() || !m->is_object()) return fallback;
    const auto v = m->find(key);
    return v != m->end() && v->is_number_integer() ? v->get<int64_t>() : fallback;
}

std::vector<double> listSetting(const nlohmann::json& config, const char* method, const char* key) {
    std::vector<double> out;
    const auto m = config.find(method);
    if (m == config.end() || !m->is_object()) return out;
    const auto v = m->find(key);
    if (v != m->end() && v->is_array())
        for (const auto& x : *v)
            if (x.is_number()) out.push_back(x.get<double>());
    return out;
}

QString range(int64_t first, int64_t last) {
    return first == last ? tr("scale %1").arg(first) : tr("scales %1–%2").arg(first).arg(last);
}

// Whether scale skipping removed every scale in [first, last] (false for an empty span).
bool allSkipped(const RunOutput& run, int64_t first, int64_t last) {
    if (first > last) return false;
    for (int64_t s = first; s <= last; ++s)
        if (s < 0 || size_t(s) >= run.scales.size() || !run.scales[size_t(s)].skipped) return false;
    return true;
}

bool skipped(const RunOutput& run, int64_t scale) {
    return scale >= 0 && size_t(scale) < run.scales.size() && run.scales[size_t(scale)].skipped;
}

// The scales a VAR method works on, in this run: [first, last] (first > last: none).
struct Span {
    int64_t first = 0, last = -1;
    bool contains(int64_t s) const { return s >= first && s <= last; }
};

Span methodSpan(const QString& method, const InspectorRunState& st, int64_t scales) {
    const auto& c = st.accel_config;
    if (method == "fastvar") {
        const auto ratios = listSetting(c, "fastvar", "ratios");
        const int64_t n = ratios.empty() ? 2 : int64_t(ratios.size());
        return {std::max<int64_t>(0, scales - n), scales - 1};
    }
    if (method == "sparvar") {
        const int64_t n = intSetting(c, "sparvar", "sparse_scales", 2);
        return {std::max<int64_t>(0, scales - n), scales - 1};
    }
    if (method == "lazyvar") return {intSetting(c, "lazyvar", "start_scale", 7), scales - 1};
    return {0, scales - 1};
}

// Why a VAR method that was on left no records at all in this run (empty: no known reason).
QString whyMethodLeftNothing(const QString& method, const InspectorRunState& st) {
    const RunOutput& run = st.accel->run;
    const int64_t scales = int64_t(run.scales.size());
    const Span span = methodSpan(method, st, scales);
    const QString name = methodTitle(method);
    if (method == "fastvar") {
        const auto ratios = listSetting(st.accel_config, "fastvar", "ratios");
        if (!ratios.empty() &&
            std::all_of(ratios.begin(), ratios.end(), [](double r) { return r <= 0; }))
            return tr(
                "FastVAR's pruning ratios are all 0: it kept every token, so it has no "
                "pruned tokens to show.");
        if (allSkipped(run, span.first, span.last))
            return tr("Scale skipping removed the scales FastVAR would prune (%1): nothing was "
                      "left for "
                      "it to prune.")
                .arg(range(span.first, span.last));
    }
    if (method == "sparvar" && allSkipped(run, span.first, span.last))
        return tr("Scale skipping removed the scales SparVAR would compute sparsely (%1): every "
                  "scale that "
                  "ran was dense.")
            .arg(range(span.first, span.last));
    if (method == "lazyvar") {
        if (span.first >= scales)
            return tr("LazyVAR starts at scale %1, but this run has %2 scales (0–%3): it never "
                      "pruned.")
                .arg(span.first)
                .arg(scales)
                .arg(scales - 1);
        if (allSkipped(run, span.first, span.last))
            return tr("Scale skipping removed the scales LazyVAR would prune (%1): it never "
                      "pruned.")
                .arg(range(span.first, span.last));
    }
    if (run.cuda_graphs)
        return tr("The accelerated run replayed CUDA graphs, which keep no %1 records.").arg(name);
    return {};
}

// The record tabs' reasons (a method's, MAR's decode order, cross-attention, all records).
QString recordTabReason(const QString& tab, const InspectorRunState& st, int64_t scale) {
    const bool var_method =
        tab == "fastvar" || tab == "sparvar" || tab == "lazyvar" || tab == "ams_kv";
    const QString name = methodTitle(tab);
    // A tab of another family than the loaded model's.
    if ((tab == "mar" || tab == "lazymar") && st.family != Family::Mar)
        return tr("%1 records come from MAR models; the loaded model is %2.")
            .arg(tab == "mar" ? tr("Decoding-order") : name, familyName(st.family));
    if (var_method && st.family == Family::Mar)
        return tr("%1 accelerates VAR-style models; the loaded model is a MAR (its accelerator "
                  "is LazyMAR).")
            .arg(name);
    if (tab == "text" && st.family != Family::Infinity)
        return tr("The loaded model is %1: it reads no text, so it has no cross-attention. Pick "
                  "the text-to-image model to see it.")
            .arg(familyName(st.family));

    const bool method = var_method || tab == "lazymar";
    if (!st.base && !st.accel) {
        if (st.accel_missing == "cancelled") return tr("The run was cancelled before a result.");
        if (!st.accel_missing.isEmpty()) return tr("The run failed: %1").arg(st.accel_missing);
        if (method && st.has_request && !enabled(st.accel_config, tab.toUtf8().constData()))
            return tr("%1 is off: enable it on the left and generate.").arg(name);
        return tr("Press Generate (Ctrl+Enter) to record.");
    }
    // The decode order and the cross-attention come from every run, the baseline's included.
    if (tab == "mar" || tab == "text") {
        const SideResultPtr r = st.accel && !st.accel->same_as_baseline ? st.accel : st.base;
        if (!st.run_recorded)
            return tr(
                "The run on show was made with recording off: it kept no records. Generate "
                "again to record them.");
        if (tab == "text" && r && r->run.cuda_graphs)
            return tr("The run replayed CUDA graphs, which record no cross-attention.");
        if (tab == "text" && st.has_request && st.attention_layer < 0)
            return tr("The run recorded no attention layer, so no cross-attention.");
        if (scale >= 0 && r && skipped(r->run, scale))
            return tr("Scale skipping removed scale %1: nothing ran there.").arg(scale);
        if (scale >= 0)
            return tr("No record at %1 %2.")
                .arg(tab == "mar" ? tr("step") : tr("scale"))
                .arg(scale);
        return tr("The run on show reported no %1 records.")
            .arg(tab == "mar" ? tr("decoding-order") : tr("cross-attention"));
    }

    // Accelerator records: only the accelerated side has them.
    QStringList on;
    if (st.accel_config.is_object())
        for (const auto& [id, m] : st.accel_config.items())
            if (m.is_object() && m.value("enabled", false)) on << QString::fromStdString(id);
    // Without the run's settings (has_request false) only its records tell.
    const bool baseline_only = st.accel && st.accel->same_as_baseline;
    if (method && (st.has_request ? !on.contains(tab) : baseline_only))
        return on.isEmpty() ? tr("No accelerator is on in the run on show: enable %1 on the left "
                                 "to see its records.")
                                  .arg(name)
                            : tr("%1 is off in the run on show (on: %2): enable it on the left "
                                 "to see its records.")
                                  .arg(name, QStringList([&] {
                                                 QStringList t;
                                                 for (const auto& m : on) t << methodTitle(m);
                                                 return t;
                                             }())
                                                 .join(", "));
    if (!method && (st.has_request ? on.isEmpty() : baseline_only))
        return tr("No accelerator is on in the run on show: the baseline reports no records.");
    const QString who = method ? name : tr("The accelerators");
    if (!st.accel || st.accel->same_as_baseline) {
        if (st.accel_missing == "cancelled")
            return tr("The accelerated run was cancelled: no %1 records.")
                .arg(method ? name : tr("accelerator"));
        if (!st.accel_missing.isEmpty())
            return tr("The accelerated run failed: %1").arg(st.accel_missing);
        return tr("%1: the records appear when the accelerated run finishes.").arg(who);
    }
    if (!st.run_recorded)
        return tr("The run on show was made with recording off: it kept no %1 records. Generate "
                  "again to record them.")
            .arg(method ? name : tr("accelerator"));
    const RunOutput& run = st.accel->run;
    if (scale >= 0) {  // records exist, none at this scale
        if (skipped(run, scale))
            return tr("Scale skipping removed scale %1: nothing ran there.").arg(scale);
        const int64_t scales = int64_t(run.scales.size());
        const Span span = methodSpan(tab, st, scales);
        if (tab == "fastvar" && !span.contains(scale))
            return tr("FastVAR prunes only the last %1 scales (%2); scale %3 ran with every "
                      "token.")
                .arg(span.last - span.first + 1)
                .arg(range(span.first, span.last))
                .arg(scale);
        if (tab == "sparvar" && !span.contains(scale))
            return tr("SparVAR computes only the last %1 scales sparsely (%2); scale %3 ran "
                      "dense.")
                .arg(span.last - span.first + 1)
                .arg(range(span.first, span.last))
                .arg(scale);
        if (tab == "lazyvar" && scale < span.first)
            return tr("LazyVAR starts at scale %1; scale %2 ran intact.")
                .arg(span.first)
                .arg(scale);
        return tr("No %1 record at %2 %3.")
            .arg(who, st.family == Family::Mar ? tr("step") : tr("scale"))
            .arg(scale);
    }
    if (method) {
        const QString why = whyMethodLeftNothing(tab, st);
        if (!why.isEmpty()) return why;
        return st.has_request
                   ? tr("%1 was on, but it reported no records in the run on show.").arg(name)
                   : tr("%1 reported no records in the run on show.").arg(name);
    }
    QStringList whys;
    for (const QString& m : on) {
        const QString why = whyMethodLeftNothing(m, st);
        if (!why.isEmpty()) whys << why;
    }
    return whys.isEmpty() ? tr("The accelerators on reported no records in the run on show.")
                          : whys.join('\n');
}

QString attentionReason(const InspectorRunState& st, Side side, int64_t scale, int64_t layer) {
    if (st.family == Family::Mar)
        return tr(
            "MAR models record no attention maps here (their attention spans the whole "
            "token buffer, not VAR's scales).");
    const bool accel_side = side == Side::Accelerated;
    const SideResultPtr r = accel_side ? st.accel : st.base;
    if (!r) {
        if (accel_side && st.accel_missing == "cancelled")
            return tr("The accelerated run was cancelled: no attention maps.");
        if (accel_side && !st.accel_missing.isEmpty())
            return tr("The accelerated run failed: %1").arg(st.accel_missing);
        if (st.base && accel_side) return tr("The accelerated run has not finished yet.");
        return tr("Press Generate (Ctrl+Enter) to record attention maps.");
    }
    const RunOutput& run = r->run;
    if (run.attention.empty()) {
        if (st.has_request && (!st.run_recorded || st.attention_layer < 0))
            return tr(
                "The run on show was made with recording off: it kept no attention maps. "
                "Generate again to record them.");
        if (run.cuda_graphs)
            return tr("This side replayed CUDA graphs, which record no attention maps.");
        if (accel_side && !r->same_as_baseline && enabled(st.accel_config, "sparvar"))
            return tr(
                "SparVAR replaced dense attention by its sparse attention: the accelerated "
                "run has no dense maps to show (the baseline has).");
        if (layer >= 0 && (!st.has_request || layer != st.attention_layer))
            return tr("No attention recorded for layer %1 yet: regenerating…").arg(layer);
        return accel_side ? tr("The accelerated run reported no dense attention maps.")
                          : tr("The run on show reported no attention maps.");
    }
    if (scale >= 0 && skipped(run, scale))
        return tr("Scale skipping removed scale %1 on this side: no attention ran there.")
            .arg(scale);
    if (st.has_request && layer >= 0 && layer != st.attention_layer && st.attention_layer >= 0)
        return tr("The run on show recorded layer %1; layer %2 is being recorded (regenerating…).")
            .arg(st.attention_layer)
            .arg(layer);
    if (accel_side && !r->same_as_baseline && enabled(st.accel_config, "sparvar")) {
        const Span span = methodSpan("sparvar", st, int64_t(run.scales.size()));
        if (span.contains(scale))
            return tr("SparVAR computed scale %1 sparsely: there is no dense map of it (the "
                      "baseline has one).")
                .arg(scale);
    }
    return tr("No attention recorded for scale %1, layer %2.").arg(scale).arg(layer);
}

}  // namespace

QString methodTitle(const QString& method) {
    for (Family f : {Family::Var, Family::Mar})
        for (const auto& m : Engine::methods(f))
            if (QString::fromStdString(m.id) == method) return QString::fromStdString(m.title);
    if (method == "mar") return tr("MAR decoding");
    if (method == "text") return tr("Cross-attention");
    return method;
}

QString emptyTabReason(const QString& tab, const InspectorRunState& s, Side side, int64_t scale,
                       int64_t layer) {
    if (!s.recording)
        return tr(
            "Recording is off (View ▸ Record for the inspector): runs keep no attention "
            "maps or accelerator records, so on CUDA they replay CUDA graphs and time at "
            "full speed.");
    if (s.history_pair && (s.base || s.accel))
        return s.history_one_run
                   ? tr("A run from the history is on show: the history keeps its images, "
                        "metrics and per-scale summary, not its attention maps or records. "
                        "Restore the run to record them.")
                   : tr("Two runs from the history are on show: the history keeps their images, "
                        "metrics and per-scale summaries, not their attention maps or records. "
                        "Restore a run to record them.");
    if (tab == "attention") return attentionReason(s, side, scale, layer);
    return recordTabReason(tab, s, scale);
}

}  // namespace varscope::gui
