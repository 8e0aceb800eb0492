// The one model-family interface. Every front end (the CLI's generate, compare and info, the
// app's engine) is written once against Runner; a family implements it in
// core/runner/<family>_runner.cpp, and open_runner() is the one place that tells families apart,
// from the checkpoint's tensor names, reading the file once. A new family (Infinity) adds a
// runner file and a case in open_runner(), not a copy of every front end.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/accel/param_spec.h"
#include "core/io/state_dict.h"
#include "core/mar_pipeline.h"
#include "core/pipeline.h"  // LoadOptions, AttentionBackend
#include "core/runner/family.h"
#include "core/runner/memory_estimate.h"
#include "core/sampling/mar_sampler.h"  // CfgSchedule
#include "core/sampling/probes.h"
#include "core/sampling/step_cost.h"

namespace varscope {

// What to load: a transformer checkpoint of any family (detected) with its VAE, or, when
// model_path is empty, the embedded emoji model of `embedded`.
struct ModelSpec {
    std::string model_path;  // VAR, MAR or Infinity transformer (.pth / .safetensors)
    // VAR: the multi-scale VQVAE (required); MAR: its KL VAE, Infinity: its BSQ VAE ("" = none)
    std::string vae_path;
    Family embedded = Family::Var;
    std::vector<int64_t> patch_nums;  // VAR: the schedule (empty = the checkpoint's)
    // MAR: the DiffLoss head's diffusion respacing, fixed at load ("" = the file's
    // recommendation, else the official "100").
    std::string diffusion_steps;
    bool prefer_ema = true;  // MAR: EMA weights of a training checkpoint first
    // Infinity: the T5 encoder's Hugging Face folder (config.json, weights, spiece.model) that
    // turns prompts into the text condition; "" = text features files only. Low-memory mode:
    // the encoder leaves the GPU after each encoding (the transformer keeps the memory).
    std::string text_encoder_path;
    bool text_encoder_offload = false;
    // Infinity, low-memory mode: the last N transformer blocks stream from host memory
    // (InfinityPipeline::stream_blocks; exact, eager, slower); 0 = none; kStreamBlocksAuto: on
    // CUDA, before each run, as many as the run needs to fit the free memory (none when it fits).
    int64_t stream_blocks = 0;
    static constexpr int64_t kStreamBlocksAuto = -1;
    // The family the user named the file as (--var / --mar), if any: a file of no known family
    // is then reported in that family's terms. The file's tensors decide the family.
    std::optional<Family> named_as;
    bool embedded_model() const { return model_path.empty(); }
};

// The sampling settings of one run. Every family reads the shared fields; the family fields are
// read by their family only (front ends refuse a family's flag on another family's model).
struct SampleSettings {
    std::vector<int64_t> class_ids;  // one per image (-1 = unconditional); empty = random labels
    int64_t batch = 1;               // images when class_ids is empty
    int64_t images() const {
        return class_ids.empty() ? batch : static_cast<int64_t>(class_ids.size());
    }
    std::optional<uint64_t> seed = 0;  // nullopt = non-deterministic
    double cfg = 4.0;
    // VAR
    int64_t top_k = 900;
    double top_p = 0.95;
    bool more_smooth = false;
    // MAR
    int64_t num_iter = 64;
    CfgSchedule cfg_schedule = CfgSchedule::Linear;
    double temperature = 1.0;

    AttentionBackend attention = AttentionBackend::Sdpa;
    bool cuda_graphs = true;  // replay steps as CUDA graphs where the run allows it
    bool decode = true;       // decode images with the VAE
    bool time_steps = true;   // synchronise the device per step to time it
    // Time the parts of each step's forward (RunResult::step_costs): CUDA events (a bench reads
    // them from extra runs), the host clock on the CPU. VAR, Infinity; not MAR.
    bool time_parts = false;
    // Count FLOPs beyond attention (MAR: linear layers and the DiffLoss head; their counter
    // keeps the steps eager). VAR always reports its attention FLOPs.
    bool count_flops = false;
    const std::atomic<bool>* cancel = nullptr;  // checked before every step

    // Infinity (appended here; class_ids / batch are not read: the text gives the rows).
    // The text: prompts (encoded by ModelSpec::text_encoder_path's T5), or T5 features in the
    // official packed form ("kv_compact", "lens"; load_text_features in
    // core/infinity_pipeline.h).
    std::string text_features;
    std::vector<std::string> prompts;
    // A T5 folder with prompt_vocabulary.json (the embedded model's) drops prompt words outside
    // it before tokenizing (core/text/prompt_vocabulary.h); true hands the prompts on unchanged.
    bool keep_unknown_words = false;
    double tau = 0.5;                             // scripts/infer.sh's setting
    std::vector<int64_t> cfg_insertion_layer{0};  // 0 = guidance on the logits (run_infinity.py)
    double h_div_w = 1.0;                         // aspect ratio -> the nearest official template
    std::string pixels = "1M";                    // "0.06M", "0.25M", "0.60M", "1M"
    // Infinity: the text's rows repeated in order to this many images (0 = the text's own rows):
    // a features file sets its batch itself, so `bench e2e --max-batch` sizes each try through
    // this.
    int64_t text_rows = 0;
};

// A parsed, validated accelerator config of one family.
class AccelPlan {
  public:
    virtual ~AccelPlan() = default;
    virtual Family family() const = 0;
    virtual bool enabled() const = 0;
    virtual std::string summary() const = 0;  // "FastVAR + AMS-KV", "baseline", ...
    // The summary with the settings a reader needs to interpret a run (MAR: the head caches).
    virtual std::string describe() const { return summary(); }
    virtual nlohmann::json to_json() const = 0;
    // What a report says about the plan beyond its JSON (MAR: the head cache periods in use).
    virtual nlohmann::json report() const { return nlohmann::json::object(); }
};

// What a run made, in a family-neutral form.
struct RunResult {
    at::Tensor images;   // (B, 3, H, W) in [0, 1]; undefined without a VAE or with decode off
    at::Tensor labels;   // (B) int64
    at::Tensor latents;  // the final latents (VAR: f_hat; MAR: token latents), for metrics
    // Per step (VAR: scale) what it produced: VAR (B, pn*pn) token ids, -1 where pruned; MAR
    // (B, k) the positions decoded at that step.
    std::vector<at::Tensor> step_tokens;
    std::vector<double> step_millis;
    double decode_millis = 0, total_millis = 0;
    double probe_millis = 0;          // spent in the probe's records (part of total_millis)
    double graph_capture_millis = 0;  // CUDA graph capture in this call (part of total_millis)
    int64_t kv_bytes = 0, kv_bytes_peak = 0;
    double attention_flops = 0;
    bool cuda_graphs = false;
    // count_flops: the family's FLOP breakdown with a "total" (MAR: linear, attention, diffusion).
    nlohmann::json flops;
    // Per step, what the accelerators report about it (MAR with LazyMAR: token_refresh,
    // computed_share, unconditional_skipped); empty when they report nothing.
    std::vector<nlohmann::json> step_info;
    StateDict tensors;  // what --tokens-out writes, in the family's own layout
    // Per step, FLOPs per part of the forward, kernel launches of its CUDA graph, and with
    // SampleSettings::time_parts the part times (core/sampling/step_cost.h); empty for a family
    // without the cost model (MAR).
    std::vector<StepCost> step_costs;
    // What the user should know about this run that is not an error (a front end shows them),
    // e.g. a prompt cut to the text encoder's length limit.
    std::vector<std::string> notices;
    // The model's own time: every step and the decode, without probes and graph capture.
    double model_millis() const { return total_millis - probe_millis - graph_capture_millis; }
};

// Sizes of a loaded model that front ends show and bound settings with.
struct ModelShape {
    int64_t num_classes = 0;
    int64_t image_size = 0;
    int64_t layers = 0;  // the probes' layer index range (MAR: encoder + decoder blocks)
    int64_t heads = 0;
    std::vector<int64_t> step_sides;  // VAR: the patch schedule; MAR: {token grid side}
    ModelCounts counts;               // what bounds accelerator settings (MAR steps: per run)
};

class Runner {
  public:
    virtual ~Runner() = default;
    virtual Family family() const = 0;
    virtual std::string describe() const = 0;  // architecture and size, one line per model
    virtual at::Device device() const = 0;
    virtual nlohmann::json config_json() const = 0;
    virtual ModelShape shape() const = 0;
    // The transformer file the weights came from ("" for random weights): class names and
    // sampling recommendations belong to it.
    virtual const std::string& model_path() const = 0;
    virtual bool has_decoder() const = 0;

    // "scale" (VAR) or "step" (MAR): what a loop step is called in reports.
    virtual const char* step_noun() const = 0;
    virtual int64_t steps(const SampleSettings& s) const = 0;
    // This family's default settings (VAR: cfg 4, top-k 900; MAR: cfg 1 = no guidance).
    virtual SampleSettings defaults() const = 0;
    // Teacher-forced forward on given inputs (parity checks against the official code): VAR
    // reads 'labels' and 'tokens.<si>' and writes 'logits' and 'x_BLCv'; MAR reads the
    // encoder/decoder and DiffLoss inputs (see mar_runner.cpp) and writes their outputs.
    // std::invalid_argument naming `source` and the tensor on bad input.
    virtual StateDict teacher_forward(const StateDict& inputs, const std::string& source,
                                      bool eager_attention) = 0;
    // std::invalid_argument naming the field when the settings do not fit the model.
    virtual void validate(const SampleSettings& s) const = 0;
    // Memory a run with `s` needs beyond the loaded weights (an upper bound from shapes; see
    // memory_estimate.h). Front ends check it against available_memory() before running.
    // `accel`: a method that bounds the KV cache (AMS-KV) is counted with the least it may keep
    // (per_image) and its bound (per_image_most): what it keeps depends on the image.
    virtual MemoryEstimate estimate_memory(const SampleSettings& s,
                                           const AccelPlan* accel = nullptr) const = 0;
    // The settings this family reads, for reports (cfg, top_k, ... or num_iter, cfg_schedule).
    virtual nlohmann::json settings_json(const SampleSettings& s) const = 0;
    // Fills the settings not named in `given` (flag names without dashes: "cfg", "top_k",
    // "num_iter", ...) from the model file's recommendation; returns what it used ("" if none).
    // Throws CheckpointError when the recommendation is malformed (the weights are fine).
    virtual std::string apply_recommendation(SampleSettings& s,
                                             const std::set<std::string>& given) const = 0;

    // Accelerators of this family.
    virtual const std::vector<MethodSpec>& methods() const = 0;
    virtual const std::map<std::string, nlohmann::json>& presets() const = 0;
    // AccelConfigError naming the field on bad input.
    virtual std::shared_ptr<const AccelPlan> parse_accel(const nlohmann::json& j) const = 0;
    // A JSON file, inline JSON or a preset name; "" = the baseline.
    virtual std::shared_ptr<const AccelPlan> accel_from_argument(const std::string& arg) const = 0;
    // Whether a run with `accel` (null = baseline) and `s` can replay CUDA graphs (on CUDA).
    virtual bool graphs_possible(const AccelPlan* accel, const SampleSettings& s) const = 0;

    // Frees the CUDA graphs (and the KV caches they hold) captured so far: a bench calls it
    // between methods so one method's graphs do not count against the next one's memory.
    virtual void release_graphs() = 0;

    // One run. Accelerator hooks are built afresh from `accel` for it (null = baseline).
    virtual RunResult generate(const SampleSettings& s, const AccelPlan* accel = nullptr,
                               ProbeSink* probe = nullptr) = 0;
    // The first image of a per-step record (ScaleRecord::f_hat) as (3, H, W) in [0, 1];
    // undefined when this model cannot decode it.
    virtual at::Tensor preview(const at::Tensor& record) const = 0;

    // Comparing two runs of the same settings: per step (VAR: identical tokens) and overall
    // (MAR: relative L2 difference of the latents).
    virtual std::vector<nlohmann::json> compare_steps(const RunResult& base,
                                                      const RunResult& accel) const = 0;
    virtual nlohmann::json compare_summary(const RunResult& base, const RunResult& accel) const = 0;

    // What the inspector draws of a run, as grid-shaped records: the loop's accelerator records
    // as they are (VAR) or laid out on the token grid (MAR), plus the family's own (MAR: the
    // decode order per step).
    virtual std::vector<AccelRecord> inspector_records(const RunResult& r,
                                                       std::vector<AccelRecord> recorded) const = 0;
    // Per grid position of the first image after step `step`: VAR the token id (-1 pruned),
    // MAR the step that decoded it (-1 still masked).
    virtual std::vector<int64_t> step_map(const RunResult& r, const ScaleRecord& record) const = 0;
};

// Loads a model: the family is detected here from the checkpoint's tensor names (the file is
// read once), and the VAE is checked against it. CheckpointError names the file and what it
// holds; std::invalid_argument for bad options.
std::unique_ptr<Runner> open_runner(const ModelSpec& spec, const LoadOptions& options);
// The family of a transformer checkpoint (reads it; CheckpointError when it is none).
Family detect_runner_family(const std::string& model_path);

// An accelerator config of `family` from a JSON file, inline JSON or a preset name ("" = the
// baseline), before any model is loaded; AccelConfigError naming the field.
std::shared_ptr<const AccelPlan> accel_plan(Family family, const std::string& arg);

// Random (official-init) weights, for benchmarks and tests.
std::unique_ptr<Runner> random_var_runner(const VarConfig& var, const VqvaeConfig& vae,
                                          uint64_t seed, const LoadOptions& options);
std::unique_ptr<Runner> random_mar_runner(const MarConfig& config, uint64_t seed,
                                          const LoadOptions& options);
struct InfinityConfig;
struct BsqVaeConfig;
// With the T5 folder `text_encoder_path` ("" = text features files only).
std::unique_ptr<Runner> random_infinity_runner(const InfinityConfig& config,
                                               const BsqVaeConfig& vae, uint64_t seed,
                                               const LoadOptions& options,
                                               const std::string& text_encoder_path = {},
                                               bool text_encoder_offload = false,
                                               int64_t stream_blocks = 0);
// Wraps pipelines built elsewhere (tests: tiny models).
std::unique_ptr<Runner> var_runner(VarPipeline pipeline, std::string model_path = {});
std::unique_ptr<Runner> mar_runner(MarPipeline pipeline, std::string model_path = {});
struct InfinityPipeline;
std::unique_ptr<Runner> infinity_runner(InfinityPipeline pipeline, std::string model_path = {});

}  // namespace varscope
