// Drawing token indices from logits: top-k / top-p filtering and multinomial sampling in the same
// order of random draws as the official VAR code, so a seed gives the same tokens.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>

namespace varscope {

struct TokenSamplingOptions {
    int64_t top_k = 0;   // 0 = off
    double top_p = 0.0;  // 0 = off; keeps the smallest set with probability mass >= top_p
};

// logits (B, l, V), modified in place by the filters (as the official sampler does).
// Returns (B, l) int64 indices.
at::Tensor sample_tokens(at::Tensor& logits_BlV, const TokenSamplingOptions& opt,
                         std::optional<at::Generator> gen);

// Mixes the conditional and unconditional halves of a doubled batch:
// (1 + t) * cond - t * uncond, the official classifier-free guidance.
at::Tensor guide(const at::Tensor& logits_2BlV, double t);

// A private generator of `device`, seeded like torch.Generator(device).manual_seed(seed), so the
// global generator is untouched; nullopt when no seed is given (the global one is used).
std::optional<at::Generator> seeded_generator(const at::Device& device,
                                              std::optional<uint64_t> seed);

// The official guidance ramp: t = cfg * si / (num_scales - 1).
double guidance_at_scale(double cfg, int64_t si, int64_t num_scales);

}  // namespace varscope
