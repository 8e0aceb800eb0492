// The GUI's bridge to the model: loads a VAR, MAR or Infinity (text-to-image) model through
// core's Runner and runs generations, returning
// plain data (bytes and float arrays, no LibTorch types). engine.cpp (VAR) and engine_mar.cpp
// (MAR) are the only GUI files that include LibTorch, so the Qt side compiles fast and never
// touches tensors.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/accel/param_spec.h"
#include "core/analysis/head_measures.h"
#include "core/exec_policy.h"
#include "core/models/sampling_recommendation.h"
#include "core/runner/family.h"
#include "core/sampling/step_cost.h"

namespace varscope {
struct SampleSettings;
class VarPipeline;
class MarPipeline;
class Runner;
}  // namespace varscope

namespace varscope::gui {

struct RgbImage {
    int width = 0;
    int height = 0;
    std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel
    bool empty() const { return rgb.empty(); }
};

// Quality of an accelerated image against the baseline.
struct ImageQuality {
    double psnr = 0;  // dB, +inf for identical images
    double ssim = 0;  // 1 for identical images
};

// A dense float array with its shape (row-major), e.g. attention (heads, q, k).
struct FloatArray {
    std::vector<int64_t> shape;
    std::vector<float> values;
    int64_t dim(size_t i) const { return i < shape.size() ? shape[i] : 1; }
    bool empty() const { return values.empty(); }
};

// VAR (next-scale prediction) or MAR (masked autoregression with a diffusion head): core's
// model families (core/runner/family.h).
using Family = varscope::Family;
using varscope::family_from_id;
using varscope::family_id;

// The transformer precisions the app offers (ModelSource::precision), fp32 first: the panel's
// choices, and what saved settings and start options may name.
const std::vector<std::string>& model_precisions();
bool is_model_precision(const std::string& name);
std::string model_precision_names();  // "fp32, bf16 or fp16", for messages

struct ModelSource {
    enum class Kind { Embedded, Files, Custom };
    Kind kind = Kind::Embedded;
    // Embedded: which embedded model (Infinity: the emoji text-to-image one); Files: detected at
    // load
    Family family = Family::Var;
    std::string var_path, vae_path;  // Files: the transformer (VAR, MAR or Infinity) and its VAE
    std::string t5_path;             // Files, Infinity: the T5 encoder folder that reads prompts
    // Files, Infinity on CUDA: the low-memory mode (the T5 encoder off the GPU after encoding,
    // transformer blocks streamed from host memory when a run would not fit otherwise).
    bool low_memory = false;
    std::string custom_name;  // Custom (tests, random weights)
    std::string device = "cpu";
    // Transformer weights: "fp32", "bf16" or "fp16" (core's load_options). On CUDA, bf16/fp16
    // run on tensor cores and SparVAR's CUDA kernels, which take bf16/fp16 only.
    std::string precision = "fp32";  // one of model_precisions()
    // MAR: diffusion respacing of the head, fixed at load ("" = the file's recommendation, else
    // the official "100").
    std::string diffusion_steps;
    std::string key() const;  // identifies the loaded weights + device (cache key part)
    std::string display_name() const;
};

struct ModelInfo {
    Family family = Family::Var;
    std::string description;      // VarPipeline::describe() / MarPipeline::describe()
    std::string class_list_path;  // "" if none fits
    std::string device;
    std::string precision;  // ModelSource::precision as loaded
    int64_t num_classes = 0;
    int64_t depth = 0;  // MAR: encoder + decoder blocks (the probes' global layer index)
    int64_t num_heads = 0;
    int64_t image_size = 0;
    std::vector<int64_t> patch_nums;  // MAR: {token grid side}
    // The file's "varscope.sampling" metadata, if any; Infinity: the official sampling
    // (InfinityRunner::defaults).
    SamplingRecommendation recommended;
    MarSamplingRecommendation mar_recommended;  // MAR: "varscope.mar_sampling"
    std::string diffusion_steps;                // MAR: the respacing in use
    // What bounds the accelerators' settings on this model (scales and tokens for VAR, decoder
    // blocks for MAR; MAR's steps are a generation setting and are filled in by the front end).
    ModelCounts counts;
    // A text-to-image model (Infinity): GenerationSettings::prompt is its text, no classes.
    bool text_to_image() const { return family == Family::Infinity; }
};

struct GenerationSettings {
    int64_t class_id = 0;  // class-conditional models (VAR, MAR)
    std::string prompt;    // text-to-image models (Infinity): the text, read by its T5
    // Text-to-image: hand the prompt to the T5 as typed. Off (the default), a T5 folder with a
    // prompt vocabulary leaves out the words it was never trained on (RunResult::notices).
    bool keep_unknown_words = false;
    uint64_t seed = 0;
    double cfg = 4.0;
    int64_t top_k = 900;                  // VAR
    double top_p = 0.95;                  // VAR
    int64_t num_iter = 64;                // MAR: decoding steps
    std::string cfg_schedule = "linear";  // MAR: "linear" | "constant"
    double temperature = 1.0;             // MAR
    std::string accel_json = "{}";  // AccelConfig / MarAccelConfig JSON (accelerated side only)
    int64_t attention_layer = -1;   // record attention of this layer at every scale; -1 = none
    bool filmstrip = true;          // decode f_hat after every scale
    bool accel_records = true;      // keep the accelerators' records (the inspector's maps)
    // On CUDA, run the steps as CUDA graph replays where nothing recorded needs eager steps
    // (attention maps and most accelerator records do); false = always eager.
    bool cuda_graphs = true;
    // Key of the baseline result: everything but the accelerator settings.
    std::string baseline_key(const std::string& model_key) const;
};

// One VAR scale, or one MAR decoding step.
struct ScaleOutput {
    int64_t scale = 0;      // VAR scale / MAR step
    int64_t patch_num = 0;  // VAR: the scale's side; MAR: the token grid's side
    double millis = 0;
    double attention_flops = 0;  // the step's attention FLOPs (a grouped step's on its first scale)
    bool skipped = false;
    // The work of the step that starts at this scale, FLOPs per part of its forward counted from
    // the shapes (core/sampling/step_cost.h: projections, attention, FFN, the method's own
    // overhead, ...); zero for the later scales of a grouped step and a skipped scale.
    // work_counted: the family has the cost model (VAR, Infinity; not MAR).
    std::array<double, kCostParts> part_flops{};
    bool work_counted = false;
    // The same step's milliseconds per part, where timed (the CPU: host clock; parts_timed).
    std::array<double, kCostParts> part_ms{};
    bool parts_timed = false;
    // VAR: first sample's tokens, pn*pn, -1 where pruned. MAR: per grid position the step that
    // decoded it, -1 where still masked after this step.
    std::vector<int64_t> tokens;
    RgbImage fhat;  // VAR: decoded f_hat after this scale; MAR: the latents so far, decoded
};

struct AttentionOutput {
    int64_t scale = 0, layer = 0;
    FloatArray probs;  // (heads, q, k)
};

struct AccelOutput {
    std::string method, kind;
    int64_t scale = -1, layer = -1;
    FloatArray data;
    std::map<std::string, double> values;
};

// What the accelerated run's methods keep of the recorded attention layer at one scale
// (core/analysis/method_masks: their masks from the run's records, intersected), for the
// attention map's overlay; a scale without an entry was not analysed.
struct MaskOutput {
    int64_t scale = 0, layer = 0;
    int64_t heads = 1;  // 1: the same for every head; else one mask per head
    int64_t queries = 0, keys = 0;
    std::vector<uint8_t> kept;  // (heads, queries, keys), 1 = kept
};

// One attention analysis of a run's settings (core/analysis/attention_analysis.h): the method's
// run with its records, then the dense run measured per scale x layer x head.
struct AnalysisOutput {
    std::string method;          // the plan's summary ("baseline": nothing dropped)
    std::vector<int64_t> sides;  // patch side per scale
    int64_t layers = 0, heads_total = 0;
    std::vector<int64_t> heads;                   // measured heads
    std::vector<analysis::HeadMeasures> records;  // scale-major, then layer, then head
    std::vector<analysis::HeadType> head_types;
    std::vector<analysis::LayerType> layer_types;
    analysis::TypingRule typing;
    // What `varscope-cli analyze` writes (core's to_json / to_csv), for the exports; the JSON
    // adds the app's device, seed and precision.
    std::string json, csv;
    double millis = 0;  // the analysis' wall time
    const analysis::HeadMeasures* find(int64_t scale, int64_t layer, int64_t head) const;
};

struct RunOutput {
    Family family = Family::Var;  // scales are MAR decoding steps for Family::Mar
    RgbImage image;
    int64_t label = 0;  // -1 for a text-to-image run
    std::vector<ScaleOutput> scales;
    std::vector<AttentionOutput> attention;
    std::vector<AccelOutput> accel;
    // Accelerated side with records on (VAR, Infinity): per scale, the kept set of the recorded
    // attention layer.
    std::vector<MaskOutput> masks;
    // total_ms: the model's own time (every scale or step and the final decode), what speedups
    // compare. overhead_ms: the rest of the run's wall time, which the tool adds (per-scale
    // previews and probe records) or pays once (CUDA graph capture).
    double total_ms = 0, decode_ms = 0, overhead_ms = 0;
    int64_t kv_bytes = 0;
    bool cuda = false;          // ran on a CUDA device
    bool cuda_graphs = false;   // its steps ran as CUDA graph replays (times compare only alike)
    std::string accel_summary;  // "baseline", "FastVAR + AMS-KV", ...
    // Text-to-image: the prompt's tokens as the model read them (SentencePiece pieces, then
    // "</s>"): the first axis of the "text/cross_attention" records.
    std::vector<std::string> text_tokens;
    // What the user should know about the run that is not an error (RunResult::notices: a prompt
    // cut to the encoder's limit, blocks the low-memory mode began to stream).
    std::vector<std::string> notices;
};

// Thrown when a run was cancelled through the cancel flag.
struct Cancelled : std::exception {
    const char* what() const noexcept override { return "cancelled"; }
};

// After each VAR scale / MAR step; preview = the image so far (empty without the filmstrip).
using ProgressFn = std::function<void(int64_t scale, int64_t scales, const RgbImage& preview)>;

class Engine {
  public:
    Engine();
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    void load(const ModelSource& source);  // throws std::exception with a readable message
    // Installs an already built model (tests: tiny random models).
    void set_runner(std::unique_ptr<Runner> runner, const ModelSource& source);
    void set_pipeline(std::unique_ptr<VarPipeline> pipeline, const ModelSource& source);
    void set_mar_pipeline(std::unique_ptr<MarPipeline> pipeline, const ModelSource& source);
    bool loaded() const;
    Family family() const { return info_.family; }
    const ModelInfo& info() const { return info_; }
    const std::string& model_key() const { return key_; }

    // One generation; `accelerated` applies settings.accel_json. Throws Cancelled,
    // AccelConfigError, std::exception (e.g. "not implemented yet", out of memory).
    RunOutput run(const GenerationSettings& settings, bool accelerated,
                  const std::atomic<bool>* cancel = nullptr, const ProgressFn& progress = {});

    // The attention analysis of `settings` with settings.accel_json as the method (every head,
    // scale and layer); the dense run's attention is what the baseline side shows. Throws as
    // run() does, std::invalid_argument for MAR (no scales).
    AnalysisOutput analyze(const GenerationSettings& settings,
                           const std::atomic<bool>* cancel = nullptr);

    // The accelerator tables and presets of a family (core/accel/accel_config.h for VAR,
    // mar_accel_config.h for MAR), without LibTorch types.
    static const std::vector<MethodSpec>& methods(Family f = Family::Var);
    // The family whose accelerator table a model uses: Infinity runs VAR's (the same hooks on
    // its scales), so the app shows VAR's accelerator panel for it.
    static Family accel_family(Family f) { return f == Family::Infinity ? Family::Var : f; }
    static std::map<std::string, nlohmann::json> presets(Family f = Family::Var);
    // "" when the JSON is a valid accelerator config of the family, else the message.
    static std::string validate_accel(const nlohmann::json& j, Family f = Family::Var);
    // j moved onto a schedule of `scales` scales where a setting written for another schedule
    // does not fit (VAR-family accelerators: fit_to_schedule, core/accel/accel_config.h); j as
    // it is otherwise, or when it does not parse. One note per change.
    static nlohmann::json fit_accel(const nlohmann::json& j, Family f, int64_t scales,
                                    std::vector<std::string>* notes);
    static std::string accel_summary(const nlohmann::json& j, Family f = Family::Var);
    static bool cuda_available();
    // PSNR and SSIM of b against a with core/metrics, so the app and `varscope-cli compare`
    // report the same numbers; throws std::invalid_argument when the sizes differ.
    static ImageQuality image_quality(const RgbImage& a, const RgbImage& b);
    static bool embedded_available();
    static std::string embedded_class_list();                 // "" when missing
    static SamplingRecommendation embedded_recommendation();  // empty when missing
    static bool embedded_mar_available();
    static MarSamplingRecommendation embedded_mar_recommendation();  // empty when missing
    // The embedded emoji text-to-image model (Infinity + BSQ VAE + T5 folder) is shipped.
    static bool embedded_t2i_available();

  private:
    SampleSettings sample_settings(const GenerationSettings& s,
                                   const std::atomic<bool>* cancel) const;
    // How the loaded models execute: the VARSCOPE_* variables (app/exec_env), read when the
    // engine is made (ui/main.cpp checked them at start).
    ExecPolicy exec_;
    std::unique_ptr<Runner> runner_;
    std::string spiece_path_;  // text-to-image: the T5 folder's tokenizer, for RunOutput's words
    ModelInfo info_;
    std::string key_;
};

}  // namespace varscope::gui
