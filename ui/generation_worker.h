// The render thread: owns the Engine (the model) and runs jobs off the UI thread. Like Qt's
// mandelbrot example it is restartable: submit() replaces the pending job, cancels the one
// running (the sampling loop checks the flag before every scale) and the thread picks up the
// newest job. Baseline results are cached by model + prompt/class + seed + sampling settings,
// so moving an accelerator slider only re-runs the accelerated side.
#pragma once

#include <QMutex>
#include <QStringList>
#include <QThread>
#include <QWaitCondition>
#include <atomic>
#include <deque>
#include <functional>
#include <optional>
#include <utility>

#include "ui/run_types.h"

namespace varscope::gui {

struct Job {
    enum class Type { Generate, Sweep, Analyze };
    Type type = Type::Generate;
    Request request;
    // Sweep: request.accel with accel[method][param] = each value (method enabled).
    std::string sweep_method, sweep_param;
    std::vector<double> sweep_values;
    // Analyze: the attention analysis of request (request.accel is the method) under this key.
    std::string analysis_key;
};

class GenerationWorker : public QThread {
    Q_OBJECT
  public:
    // Builds the engine's model for a source; the default loads checkpoints (Engine::load).
    using Loader = std::function<void(Engine&, const ModelSource&)>;

    explicit GenerationWorker(QObject* parent = nullptr);
    ~GenerationWorker() override;

    void setLoader(Loader loader);  // before the first job
    quint64 submit(Job job);        // returns the job id used in the signals
    void cancel();                  // cancels the running job (within one scale)
    bool busy() const { return busy_.load(); }
    int cachedBaselines() const;

  signals:
    void jobStarted(quint64 job);
    void modelLoaded(quint64 job, varscope::gui::ModelInfo info);
    void modelFailed(quint64 job, QString message);
    void progress(quint64 job, int side, int scale, int scales);
    // The image so far after a VAR scale / MAR step (sent when the filmstrip is on).
    void preview(quint64 job, int side, int scale, QImage image);
    void sideFinished(quint64 job, varscope::gui::SideResultPtr result);
    void sideFailed(quint64 job, int side, QString message, bool cancelled);
    void sweepPoint(quint64 job, varscope::gui::SweepPoint point);
    void analysisFinished(quint64 job, varscope::gui::AnalysisResultPtr result);
    void analysisFailed(quint64 job, QString key, QString message, bool cancelled);
    void jobFinished(quint64 job);

  protected:
    void run() override;

  private:
    void runJob(quint64 id, const Job& job);
    // report: emit progress and previews (false for runs that only time, e.g. a sweep's
    // baseline timed like its points).
    SideResultPtr runSide(quint64 id, const Request& r, Side side, bool report = true);
    void ensureModel(quint64 id, const ModelSource& src);
    void runAnalysis(quint64 id, const Job& job);

    mutable QMutex mutex_;
    QWaitCondition condition_;
    std::optional<std::pair<quint64, Job>> pending_;
    quint64 next_id_ = 1;
    quint64 cancel_upto_ = 0;  // jobs with ids up to this one are cancelled
    std::atomic<bool> cancel_{false};
    std::atomic<bool> abort_{false};
    std::atomic<bool> busy_{false};
    Loader loader_;
    Engine engine_;  // used on the worker thread only
    std::deque<std::pair<std::string, SideResultPtr>> baseline_cache_;  // newest first
};

}  // namespace varscope::gui
