#include "kernels/sdpa_lse.h"

#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>

#include <cmath>

namespace varscope::kernels {
namespace {

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                "sdpa_with_lse expects (B, H, L, D) tensors, got q ", q.sizes(), ", k ", k.sizes(),
                " and v ", v.sizes());
    TORCH_CHECK(k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3) &&
                    v.sizes().slice(0, 3) == k.sizes().slice(0, 3),
                "sdpa_with_lse: k ", k.sizes(), " and v ", v.sizes(), " do not match q ",
                q.sizes());
    TORCH_CHECK(k.device() == q.device() && v.device() == q.device() &&
                    k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
                "sdpa_with_lse: q, k and v must share device and dtype");
}

// (B, H, Lq) contiguous: the efficient kernel pads its lse along q to a multiple of 32, cuDNN
// gives (B, H, Lq, 1), the CPU flash kernel a (B, Lq, H) layout.
at::Tensor rows_of(const at::Tensor& lse, const at::Tensor& q) {
    auto t = lse.dim() == 4 ? lse.squeeze(-1) : lse;
    TORCH_CHECK(
        t.dim() == 3 && t.size(0) == q.size(0) && t.size(1) == q.size(1) && t.size(2) >= q.size(2),
        "sdpa_with_lse: unexpected log-sum-exp shape ", lse.sizes(), " for q ", q.sizes());
    return t.narrow(2, 0, q.size(2)).contiguous();
}

}  // namespace

AttentionResult sdpa_with_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              std::optional<double> scale) {
    check_inputs(q, k, v);
    const auto device = q.device().type();
    // What at::scaled_dot_product_attention does for these arguments, case by case; anything not
    // reproduced here takes SDPA itself and returns no lse.
    const bool known = (device == at::kCPU || device == at::kCUDA) &&
                       !at::autocast::is_autocast_enabled(device) && q.size(3) % 8 == 0;
    const auto backend = known ? static_cast<at::SDPBackend>(at::_fused_sdp_choice(
                                     q, k, v, std::nullopt, 0.0, false, scale))
                               : at::SDPBackend::math;
    AttentionResult r;
    if (backend == at::SDPBackend::flash_attention && device == at::kCUDA) {
        // SDPA passes the scale it computed from the head dim (no padding at D % 8 == 0).
        const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
        const auto res = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, false, false, s);
        r.out = std::get<0>(res);
        r.lse = rows_of(std::get<1>(res), q);
    } else if (backend == at::SDPBackend::flash_attention && device == at::kCPU) {
        const auto res = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, false,
                                                                         std::nullopt, scale);
        r.out = std::get<0>(res);
        r.lse = rows_of(std::get<1>(res), q);
    } else if (backend == at::SDPBackend::efficient_attention) {
        // SDPA asks for the lse only when autograd needs it; the output is the same either way.
        const auto res = at::_scaled_dot_product_efficient_attention(q, k, v, std::nullopt, true,
                                                                     0.0, false, scale);
        r.out = std::get<0>(res);
        r.lse = rows_of(std::get<1>(res), q);
    } else if (backend == at::SDPBackend::cudnn_attention) {
        const auto res = at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, true, 0.0,
                                                                 false, false, scale);
        r.out = std::get<0>(res);
        r.lse = rows_of(std::get<1>(res), q);
    } else {
        r.out = at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, scale);
    }
    return r;
}

}  // namespace varscope::kernels
