// The element-wise steps around an AdaLN block's matrix products, shared by the VAR and Infinity
// blocks: the modulated LayerNorm that feeds a product and a gated branch summed into the
// residual stream. Each is the ATen composition, or, on CUDA in the bf16-autocast mode (fp32
// stream, bf16 weights) and with a kernel policy given, one exact kernel (kernels/modulate.h,
// kernels/gated_residual.h): the same bits with fewer passes over the fp32 stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/linear.h>

#include "kernels/exec_policy.h"

namespace varscope {

// normed * scale_plus_one + shift (fp32 for an fp32 `normed`), as the input of `consumer`'s
// product: rounded to the consumer's bf16 weights by the kernel where it runs under `fuse`
// (null: never; the product casts it then, to the same values).
at::Tensor modulated_input(const at::Tensor& normed, const at::Tensor& scale_plus_one,
                           const at::Tensor& shift, const torch::nn::Linear& consumer,
                           const kernels::KernelPolicy* fuse);

// modulated_input of layer_norm(x) over its last dimension (no affine, `eps`), x fp32: where the
// fused kernel runs under `fuse`, the LayerNorm is in the same kernel (kernels/modulate.h: the
// same bits as at::layer_norm, one launch and one pass over the stream fewer).
at::Tensor modulated_norm_input(const at::Tensor& x, double eps, const at::Tensor& scale_plus_one,
                                const at::Tensor& shift, const torch::nn::Linear& consumer,
                                const kernels::KernelPolicy* fuse);

// How a gated branch's product is formed before the sum: in ATen's promoted dtype (y.mul(gamma))
// or rounded back to y's dtype (y.mul(gamma).to(y.dtype): the official in-place mul_).
enum class GateProduct { Promoted, AsBranch };

// x + the product of the branch output y and the gate, in one kernel where it runs under
// `fuse`.
at::Tensor gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gamma,
                          GateProduct product, const kernels::KernelPolicy* fuse);

}  // namespace varscope
