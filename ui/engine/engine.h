// The GUI's bridge to the model: loads a VAR pipeline and runs generations, returning plain
// data (bytes and float arrays, no LibTorch types). This and engine.cpp are the only GUI
// files that include LibTorch, so the Qt side compiles fast and never touches tensors.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/accel/param_spec.h"
#include "core/models/sampling_recommendation.h"

namespace varscope {
class VarPipeline;
}

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

struct ModelSource {
    enum class Kind { Embedded, Files, Custom };
    Kind kind = Kind::Embedded;
    std::string var_path, vae_path;  // Files
    std::string custom_name;         // Custom (tests, random weights)
    std::string device = "cpu";
    std::string key() const;  // identifies the loaded weights + device (cache key part)
    std::string display_name() const;
};

struct ModelInfo {
    std::string description;      // VarPipeline::describe()
    std::string class_list_path;  // "" if none fits
    std::string device;
    int64_t num_classes = 0;
    int64_t depth = 0;
    int64_t num_heads = 0;
    int64_t image_size = 0;
    std::vector<int64_t> patch_nums;
    SamplingRecommendation recommended;  // the file's "varscope.sampling" metadata, if any
};

struct GenerationSettings {
    int64_t class_id = 0;
    uint64_t seed = 0;
    double cfg = 4.0;
    int64_t top_k = 900;
    double top_p = 0.95;
    std::string accel_json = "{}";  // AccelConfig JSON (accelerated side only)
    int64_t attention_layer = -1;   // record attention of this layer at every scale; -1 = none
    bool filmstrip = true;          // decode f_hat after every scale
    // Key of the baseline result: everything but the accelerator settings.
    std::string baseline_key(const std::string& model_key) const;
};

struct ScaleOutput {
    int64_t scale = 0;
    int64_t patch_num = 0;
    double millis = 0;
    bool skipped = false;
    std::vector<int64_t> tokens;  // first sample, pn*pn; -1 where pruned
    RgbImage fhat;                // decoded f_hat after this scale (filmstrip)
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

struct RunOutput {
    RgbImage image;
    int64_t label = 0;
    std::vector<ScaleOutput> scales;
    std::vector<AttentionOutput> attention;
    std::vector<AccelOutput> accel;
    double total_ms = 0, decode_ms = 0;
    int64_t kv_bytes = 0;
    std::string accel_summary;  // "baseline", "FastVAR + AMS-KV", ...
};

// Thrown when a run was cancelled through the cancel flag.
struct Cancelled : std::exception {
    const char* what() const noexcept override { return "cancelled"; }
};

using ProgressFn = std::function<void(int64_t scale, int64_t scales)>;

class Engine {
public:
    Engine();
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    void load(const ModelSource& source);  // throws std::exception with a readable message
    // Installs an already built pipeline (tests: tiny random models).
    void set_pipeline(std::unique_ptr<VarPipeline> pipeline, const ModelSource& source);
    bool loaded() const;
    const ModelInfo& info() const { return info_; }
    const std::string& model_key() const { return key_; }

    // One generation; `accelerated` applies settings.accel_json. Throws Cancelled,
    // AccelConfigError, std::exception (e.g. "not implemented yet", out of memory).
    RunOutput run(const GenerationSettings& settings, bool accelerated,
                  const std::atomic<bool>* cancel = nullptr, const ProgressFn& progress = {});

    // The accelerator tables and presets (core/accel/accel_config.h), without LibTorch types.
    static const std::vector<MethodSpec>& methods();
    static std::map<std::string, nlohmann::json> presets();
    // "" when the JSON is a valid AccelConfig, else the validation message.
    static std::string validate_accel(const nlohmann::json& j);
    static std::string accel_summary(const nlohmann::json& j);
    static bool cuda_available();
    // PSNR and SSIM of b against a with core/metrics, so the app and `varscope-cli compare`
    // report the same numbers; throws std::invalid_argument when the sizes differ.
    static ImageQuality image_quality(const RgbImage& a, const RgbImage& b);
    static bool embedded_available();
    static std::string embedded_class_list();  // "" when missing
    static SamplingRecommendation embedded_recommendation();  // empty when missing

private:
    std::unique_ptr<VarPipeline> pipeline_;
    ModelInfo info_;
    std::string key_;
};

}  // namespace varscope::gui
