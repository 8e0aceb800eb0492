// Scale similarity of AMS-KV (ams-kv.txt Eq. 3; core/accel/ams_kv.h): the squared L2 distance
// between a scale's keys and the previous scale's keys bilinearly upsampled to its size,
//
//   D = sum_{r, h, t, c} (k_cur[r, h, t, c] - up(k_prev)[r, h, t, c])^2,
//
// k_prev (R, H, pp*pp, c) and k_cur (R, H, pc*pc, c), tokens in row-major map order; up() is
// bilinear interpolation of the pp x pp map to pc x pc with align_corners = false and no
// antialiasing (F.interpolate(mode="bilinear") / at::upsample_bilinear2d). With `normalize` each
// key vector (one token of one head, c channels) is first divided by max(||k||, 1e-12), before
// the upsampling (F.normalize). AMS-KV's S is -D / (R * H * pc^2 * c).
//
// The CUDA kernel (kernels/cuda/scale_similarity.cu) reads each key once, interpolates the
// previous keys from their four neighbours in shared memory, accumulates in float32 per thread
// block and sums the blocks in float64: no upsampled tensor and no GEMM. The reference is the
// Gram-matrix formulation AMS-KV used before (two batched GEMMs in the keys' precision, float
// sums; see scale_similarity.cpp). Any strides are accepted; the last dim should be contiguous
// (otherwise the CUDA path copies). The dispatch follows token_ops.h: the CUDA kernel for CUDA
// tensors when this build has it, the reference otherwise; KernelPolicy::reference
// (exec_policy.h) always selects the reference.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "kernels/attention_dispatch.h"

namespace varscope::kernels {

// D above (>= 0), on the host in double; the device is synchronised once (the result's copy).
double scale_sq_distance(const at::Tensor& k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                         int64_t pn_cur, bool normalize, KernelPath path = KernelPath::Auto,
                         const KernelPolicy& policy = {});
// The same with the previous keys in pieces along the tokens, in order, e.g. the two pieces of a
// KV cache's ring buffer that wrapped (KvCache::key_pieces): the CUDA kernel reads two pieces of
// equal strides where they lie; anything else is joined first (a copy).
double scale_sq_distance(at::TensorList k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                         int64_t pn_cur, bool normalize, KernelPath path = KernelPath::Auto,
                         const KernelPolicy& policy = {});

// Whether the CUDA kernel would run for these keys (build, policy, device, dtype, shared memory
// for two rows of the previous map). why_not receives the reason when it would not.
bool cuda_scale_similarity_supported(const at::Tensor& k_prev, int64_t pn_prev,
                                     const at::Tensor& k_cur, int64_t pn_cur, bool normalize,
                                     const KernelPolicy& policy = {},
                                     std::string* why_not = nullptr);

// The (pc^2, pp^2) bilinear upsampling matrix of a pp x pp map to pc x pc (row-major tokens),
// built with torch's own linear interpolation (align_corners false).
at::Tensor bilinear_upsample_weights(int64_t pn_prev, int64_t pn_cur,
                                     const at::TensorOptions& options);

namespace reference {
// The Gram-matrix formulation (AMS-KV's similarity up to 2026-11-22 v2):
// D = sum ||cur||^2 - 2 <W, sum_r cur_r prev_r^T> + <W^T W, sum_r prev_r prev_r^T>, the keys as
// (R, tokens, H*c) rows; in float with `normalize`, otherwise in the keys' precision with float
// sums. Clamped at 0 (the expanded sum can cancel slightly below).
double scale_sq_distance(const at::Tensor& k_prev, int64_t pn_prev, const at::Tensor& k_cur,
                         int64_t pn_cur, bool normalize);
}  // namespace reference

}  // namespace varscope::kernels
