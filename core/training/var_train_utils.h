// Pieces of the VAR trainer that are worth testing on their own: the foreground-token mask and
// teacher-forced evaluation, growing a trained model to more blocks, EMA and bf16 autocast.
#pragma once

#include <ATen/core/Tensor.h>

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/io/state_dict.h"
#include "core/models/var.h"
#include "core/training/train_common.h"

namespace varscope {

// (N, L) bool over the teacher-forcing targets (scales concatenated, each row-major): true where
// the token's image region holds a pixel below `white` in some channel. Emoji sit on pure white,
// so the other tokens are background, which a model predicts easily; accuracy on the
// foreground tokens is the number that tracks sample quality. Regions are adaptive pooling cells
// of the image on the scale's grid (the same cells as area down-sampling).
at::Tensor foreground_token_mask(const at::Tensor& images_u8,
                                 const std::vector<int64_t>& patch_nums, int white = 250);

// Conditional teacher-forced loss and accuracy over the whole data set: {"loss", "token_acc",
// "fg_token_acc", "fg_fraction", "last_scale_fg_acc"}. Runs in the model's dtype, no autocast.
nlohmann::json evaluate_var_teacher(const VarTransformerImpl& var, const at::Tensor& labels,
                                    const at::Tensor& inputs, const at::Tensor& targets,
                                    const at::Tensor& fg, int64_t last_scale_tokens,
                                    int64_t batch = 256);

// Loads a checkpoint with fewer blocks into `model` (same width and schedule): old block i becomes
// block floor(i * D / d), the blocks in between keep `model`'s own initialisation but with zero
// output projections (attn.proj, ffn.fc2: weights and biases), so their residual branches add
// nothing and the grown model first computes exactly what the checkpoint did. Returns d.
int64_t grow_var_from(VarTransformerImpl& model, const StateDict& small, const std::string& what);

// ema = rate * ema + (1 - rate) * params, one fused multi-tensor update.
void ema_update(const std::vector<at::Tensor>& ema, const std::vector<at::Tensor>& params,
                double rate);

// bf16 autocast for the forward pass on `device` (no-op when disabled or on the CPU). The cast
// cache is off: weights change every step, and a cached bf16 copy would go stale.
class AutocastBf16 {
  public:
    AutocastBf16(const at::Device& device, bool enabled);
    ~AutocastBf16();
    AutocastBf16(const AutocastBf16&) = delete;
    AutocastBf16& operator=(const AutocastBf16&) = delete;

  private:
    bool active_ = false, prev_enabled_ = false, prev_cache_ = true;
    at::DeviceType type_ = at::kCUDA;
    at::ScalarType prev_dtype_ = at::kHalf;
};

}  // namespace varscope
