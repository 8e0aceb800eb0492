#include "ui/generation_worker.h"

#include <QMutexLocker>
#include <cmath>
#include <new>

namespace varscope::gui {
namespace {
constexpr size_t kBaselineCacheSize = 8;

bool any_enabled(const nlohmann::json& accel) {
    if (!accel.is_object()) return false;
    for (const auto& [id, m] : accel.items())
        if (m.is_object() && m.value("enabled", true)) return true;
    return false;
}

QString message_of(const std::exception& e) {
    QString m = QString::fromStdString(e.what());
    if (m.contains("out of memory", Qt::CaseInsensitive) || dynamic_cast<const std::bad_alloc*>(&e))
        m = QObject::tr("Out of memory: %1\nTry the CPU, a smaller model or fewer probes.").arg(m);
    return m;
}

}  // namespace

GenerationWorker::GenerationWorker(QObject* parent) : QThread(parent) {
    qRegisterMetaType<SideResultPtr>();
    qRegisterMetaType<SweepPoint>();
    qRegisterMetaType<ModelInfo>();
    qRegisterMetaType<AnalysisResultPtr>();
    loader_ = [](Engine& e, const ModelSource& s) { e.load(s); };
}

GenerationWorker::~GenerationWorker() {
    {
        QMutexLocker lock(&mutex_);
        abort_ = true;
        cancel_ = true;
        condition_.wakeOne();
    }
    wait();
}

void GenerationWorker::setLoader(Loader loader) {
    QMutexLocker lock(&mutex_);
    loader_ = std::move(loader);
}

quint64 GenerationWorker::submit(Job job) {
    QMutexLocker lock(&mutex_);
    const quint64 id = next_id_++;
    pending_ = std::make_pair(id, std::move(job));
    cancel_ = true;  // the running job (if any) stops at its next scale
    if (!isRunning())
        start(QThread::LowPriority);
    else
        condition_.wakeOne();
    return id;
}

void GenerationWorker::cancel() {
    QMutexLocker lock(&mutex_);
    cancel_upto_ = next_id_ - 1;  // also cancels a job submitted but not yet picked up
    cancel_ = true;
}

int GenerationWorker::cachedBaselines() const {
    QMutexLocker lock(&mutex_);
    return static_cast<int>(baseline_cache_.size());
}

void GenerationWorker::run() {
    forever {
        std::pair<quint64, Job> job;
        {
            QMutexLocker lock(&mutex_);
            while (!pending_ && !abort_) condition_.wait(&mutex_);
            if (abort_) return;
            job = std::move(*pending_);
            pending_.reset();
            cancel_ = job.first <= cancel_upto_;
        }
        busy_ = true;
        emit jobStarted(job.first);
        runJob(job.first, job.second);
        busy_ = false;
        emit jobFinished(job.first);
    }
}

void GenerationWorker::ensureModel(quint64 id, const ModelSource& src) {
    if (engine_.loaded() && engine_.model_key() == src.key()) return;
    Loader loader;
    {
        QMutexLocker lock(&mutex_);
        loader = loader_;
    }
    loader(engine_, src);
    emit modelLoaded(id, engine_.info());
}

SideResultPtr GenerationWorker::runSide(quint64 id, const Request& r, Side side, bool report) {
    const bool accelerated = side == Side::Accelerated;
    GenerationSettings gs = r.gen;
    gs.accel_json = r.accel.dump();
    const std::string key = gs.baseline_key(engine_.model_key());
    if (!accelerated) {
        QMutexLocker lock(&mutex_);
        for (const auto& [k, v] : baseline_cache_)
            if (k == key) {
                auto copy = std::make_shared<SideResult>(*v);
                copy->cached = true;
                return copy;
            }
    }
    auto progress = [&](int64_t scale, int64_t scales, const RgbImage& preview) {
        if (!report) return;
        emit this->progress(id, int(side), int(scale), int(scales));
        if (!preview.empty()) emit this->preview(id, int(side), int(scale), to_qimage(preview));
    };
    auto res = std::make_shared<SideResult>();
    res->side = side;
    res->run = engine_.run(gs, accelerated, &cancel_, progress);
    res->image = to_qimage(res->run.image);
    // The engine names a run without enabled methods "baseline" (AccelConfig::summary): the one
    // place its text is read; the views ask the flag.
    res->accelerated = accelerated && res->run.accel_summary != "baseline";
    for (const auto& s : res->run.scales) res->filmstrip.push_back(to_qimage(s.fhat));
    if (!accelerated) {
        QMutexLocker lock(&mutex_);
        baseline_cache_.emplace_front(key, res);
        if (baseline_cache_.size() > kBaselineCacheSize) baseline_cache_.pop_back();
    }
    return res;
}

void GenerationWorker::runAnalysis(quint64 id, const Job& job) {
    const QString key = QString::fromStdString(job.analysis_key);
    try {
        GenerationSettings gs = job.request.gen;
        gs.accel_json = job.request.accel.dump();
        auto res = std::make_shared<AnalysisResult>();
        res->key = job.analysis_key;
        res->out = engine_.analyze(gs, &cancel_);
        emit analysisFinished(id, res);
    } catch (const Cancelled&) {
        emit analysisFailed(id, key, tr("Cancelled"), true);
    } catch (const std::exception& e) {
        emit analysisFailed(id, key, message_of(e), false);
    }
}

void GenerationWorker::runJob(quint64 id, const Job& job) {
    try {
        ensureModel(id, job.request.model);
    } catch (const std::exception& e) {
        emit modelFailed(id, message_of(e));
        return;
    }
    if (job.type == Job::Type::Analyze) {
        runAnalysis(id, job);
        return;
    }
    int side = 0;
    try {
        const SideResultPtr base = runSide(id, job.request, Side::Baseline);
        emit sideFinished(id, base);
        side = 1;
        if (job.type == Job::Type::Generate) {
            if (!any_enabled(job.request.accel)) {
                auto same = std::make_shared<SideResult>(*base);
                same->side = Side::Accelerated;
                same->same_as_baseline = true;
                same->accelerated = false;
                emit sideFinished(id, same);
                return;
            }
            const SideResultPtr acc = runSide(id, job.request, Side::Accelerated);
            if (const auto again = sideToRunAgainEagerly(base->run, acc->run)) {
                Request eager = job.request;
                eager.gen.cuda_graphs = false;
                side = *again == Side::Baseline ? 0 : 1;  // what a failure or cancel names
                auto rerun = std::make_shared<SideResult>(*runSide(id, eager, *again));
                rerun->matched_eager = true;
                emit sideFinished(id, rerun);
                if (*again == Side::Baseline) emit sideFinished(id, acc);
                return;
            }
            emit sideFinished(id, acc);
            return;
        }
        // Sweep: one accelerated run per value, compared with the (cached) baseline.
        // The points record nothing but times and FLOPs, so that methods with a CUDA-graph form
        // run as graphs on CUDA; each is compared with a baseline run the same way (graphs or
        // eager), recorded as little (the shown baseline records attention maps: eager).
        auto timing_baseline = [&](bool graphs) -> SideResultPtr {
            if (base->run.cuda_graphs == graphs) return base;
            Request t = job.request;
            t.gen.attention_layer = -1;
            t.gen.filmstrip = false;
            t.gen.cuda_graphs = graphs;
            return runSide(id, t, Side::Baseline, false);
        };
        for (double v : job.sweep_values) {
            Request r = job.request;
            r.gen.attention_layer = -1;
            r.gen.filmstrip = false;
            r.gen.accel_records = false;
            auto& m = r.accel[job.sweep_method];
            if (!m.is_object()) m = nlohmann::json::object();
            m["enabled"] = true;
            // Integer parameters must stay JSON integers (ParamReader checks the type).
            if (std::floor(v) == v && std::abs(v) < 9e15)
                m[job.sweep_param] = static_cast<int64_t>(v);
            else
                m[job.sweep_param] = v;
            const SideResultPtr acc = runSide(id, r, Side::Accelerated);
            const SideResultPtr tb = timing_baseline(acc->run.cuda_graphs);
            SweepPoint p;
            p.value = v;
            p.millis = acc->run.total_ms;
            p.baseline_millis = tb->run.total_ms;
            p.cuda = acc->run.cuda;
            p.cuda_graphs = acc->run.cuda_graphs && tb->run.cuda_graphs;
            p.speedup = acc->run.total_ms > 0 ? tb->run.total_ms / acc->run.total_ms : 0;
            const double acc_flops = attention_flops_of(acc->run);
            p.work_ratio = acc_flops > 0 ? attention_flops_of(tb->run) / acc_flops : 0;
            const ImageQuality q = Engine::image_quality(base->run.image, acc->run.image);
            p.psnr = q.psnr;
            p.ssim = q.ssim;
            emit sweepPoint(id, p);
        }
    } catch (const Cancelled&) {
        emit sideFailed(id, side, tr("Cancelled"), true);
    } catch (const std::exception& e) {
        emit sideFailed(id, side, message_of(e), false);
    }
}

}  // namespace varscope::gui
