// Pieces shared by the training commands: configuration, the packed image data set, seeded
// batching, checkpoints with resume, and a loss log.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/io/state_dict.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace varscope {

struct TrainConfig {
    int64_t steps = 5000;
    int64_t batch = 128;
    double lr = 3e-4;
    double weight_decay = 0.0;
    int64_t warmup = 200;  // linear warm-up steps, then cosine decay to 10 %
    int64_t log_every = 50;
    int64_t checkpoint_every = 1000;
    uint64_t seed = 0;
    std::string device = "cuda";
    double max_seconds = 0;  // stop early (and still export) after this wall time; 0 = off

    nlohmann::json to_json() const;
    // Missing keys keep defaults; wrong types / ranges throw std::invalid_argument naming the key.
    static TrainConfig from_json(const nlohmann::json& j);
    double lr_at(int64_t step) const;
};

// The packed emoji data (varscope-cli pack-emoji): uint8 images (N, 3, H, W), int64 labels (N).
struct ImageDataset {
    at::Tensor images;  // uint8, CPU or device
    at::Tensor labels;  // int64
    int64_t num_classes = 0;
    int64_t size() const { return images.size(0); }
    // Float images in [-1, 1] for the given rows, on the images' device.
    at::Tensor batch_images(const at::Tensor& rows) const;
};
ImageDataset load_image_dataset(const std::string& path, const at::Device& device);
// Start of every training run: TF32 matrix units on, the data set loaded onto train.device.
ImageDataset prepare_training(const TrainConfig& train, const std::string& data_path);
// Sum over a batch of each image's PSNR in dB (-10 log10 MSE) for images in [-1, 1] measured
// in [0, 1]: the VAE trainers' reconstruction metric.
double psnr_sum(const at::Tensor& rec, const at::Tensor& img);
// PSNR in dB of a batch's mean squared error measured in [-1, 1] (peak-to-peak 2): the logs'
// psnr_batch.
double psnr_of_mse(double mse);

// Draws batches by reshuffling a seeded permutation every epoch.
class BatchSampler {
  public:
    BatchSampler(int64_t n, int64_t batch, uint64_t seed);
    at::Tensor next();  // int64 row indices (CPU)
    // The same rows on `device`: the epoch's permutation is copied there once, so a GPU loop
    // does not wait for a host-to-device copy every step.
    at::Tensor next_on(const at::Device& device);
    int64_t epoch() const { return epoch_; }

  private:
    int64_t n_, batch_, pos_ = 0, epoch_ = 0;
    uint64_t seed_;
    at::Tensor perm_, perm_device_;
};

// A training run's folder: weights (safetensors), optimizer state, step and a JSONL loss log.
class RunDirectory {
  public:
    explicit RunDirectory(std::string dir);
    // Returns the step to continue from (0 when there is nothing to resume).
    int64_t resume(torch::nn::Module& model, torch::optim::Optimizer& opt, const std::string& what);
    void save(const torch::nn::Module& model, torch::optim::Optimizer& opt, int64_t step,
              const nlohmann::json& model_config);
    void log(const nlohmann::json& record);  // one JSON object per line in log.jsonl
    std::string path(const std::string& name) const;

  private:
    // Finishes a save that committed (renames its ".tmp" files) or drops one that did not.
    void settle_checkpoint();
    std::string dir_;
};

// Weights for shipping: floating tensors as fp16, minus buffers the model derives itself.
// int8: large 2-D weights stored as int8 with per-row scales instead (core/io/quant_int8.h;
// the loader restores fp16), about half the file for a transformer.
void export_half(const torch::nn::Module& model, const std::string& path,
                 const nlohmann::json& model_config, const std::vector<std::string>& drop = {},
                 const std::map<std::string, std::string>& extra_metadata = {}, bool int8 = false);

void set_learning_rate(torch::optim::Optimizer& opt, double lr);

// Wall-clock budget of a run (TrainConfig::max_seconds); 0 = unlimited.
class TimeBudget {
  public:
    explicit TimeBudget(double seconds);
    double elapsed() const;
    // True when the budget is spent; says so on `out` once.
    bool spent(int64_t step, std::ostream& out);

  private:
    double seconds_;
    std::chrono::steady_clock::time_point start_;
    bool reported_ = false;
};

}  // namespace varscope
