// CUDA autocast (ATen's, as torch.autocast) for the span of a scope. The official bf16 modes
// of VAR and Infinity decode their images inside torch.autocast(bfloat16): convolutions and
// matrix products in bf16, normalisations in fp32. Our bf16 modes decode the same way (before
// session 30 the VQVAE decode ran in fp32: 93 ms of a 1024^2 VAR-d30 image on an H200).
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

namespace varscope {

class CudaAutocastScope {
  public:
    // `on` false: changes nothing. The cast cache stays off: a decode captured into a CUDA
    // graph must not keep casts made during capture for later eager calls.
    explicit CudaAutocastScope(bool on, at::ScalarType dtype = at::kBFloat16) : on_(on) {
        if (!on_) return;
        was_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
        was_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
        was_cache_ = at::autocast::is_autocast_cache_enabled();
        at::autocast::set_autocast_enabled(at::kCUDA, true);
        at::autocast::set_autocast_dtype(at::kCUDA, dtype);
        at::autocast::set_autocast_cache_enabled(false);
    }
    ~CudaAutocastScope() {
        if (!on_) return;
        at::autocast::set_autocast_enabled(at::kCUDA, was_enabled_);
        at::autocast::set_autocast_dtype(at::kCUDA, was_dtype_);
        at::autocast::set_autocast_cache_enabled(was_cache_);
    }
    CudaAutocastScope(const CudaAutocastScope&) = delete;
    CudaAutocastScope& operator=(const CudaAutocastScope&) = delete;

  private:
    bool on_;
    bool was_enabled_ = false;
    at::ScalarType was_dtype_ = at::kHalf;
    bool was_cache_ = true;
};

}  // namespace varscope
