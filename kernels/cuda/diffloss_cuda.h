// LibTorch-facing wrappers of the fused DiffLoss-head kernels (only built with CUDA). The
// dispatch (kernels/diffloss_ops.cpp) decides when these run; they check layouts and launch
// the kernels the policy's switches pick (kernels/exec_policy.h).
#pragma once

#include <utility>
#include <vector>

#include "kernels/diffloss_ops.h"

namespace varscope::kernels::cuda {

bool device_has_kernel_image(int device, std::string* why_not);  // attention_cuda.cpp

at::Tensor diff_input_proj(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t rows, const DiffLossPolicy& policy);
at::Tensor diff_block_fc1(const at::Tensor& h, const DiffBlockWeights& w, const at::Tensor& shift,
                          const at::Tensor& scale1, const DiffLossPolicy& policy);
// Whether diff_proj_block_fc1 takes these shapes (latent width 8/16, square fc1, 8-row tiles).
bool diff_proj_fold_runs(const at::Tensor& x, const at::Tensor& w_in, int64_t rows,
                         const DiffBlockWeights& wt, const DiffLossPolicy& policy);
std::pair<at::Tensor, at::Tensor> diff_proj_block_fc1(const at::Tensor& x, const at::Tensor& w_in,
                                                      const at::Tensor& b_in, int64_t rows,
                                                      const DiffBlockWeights& wt,
                                                      const at::Tensor& shift,
                                                      const at::Tensor& scale1,
                                                      const DiffLossPolicy& policy);
at::Tensor diff_block_fc2(const at::Tensor& a, const DiffBlockWeights& w, const at::Tensor& gate,
                          const at::Tensor& h, const DiffLossPolicy& policy,
                          const DiffKeep& keep = {});
at::Tensor diff_apply_kept(const at::Tensor& h, const std::vector<DiffKeptBlock>& blocks,
                           const DiffLossPolicy& policy);
at::Tensor diff_cached_step(const at::Tensor& x, const at::Tensor& in_weight,
                            const at::Tensor& in_bias, int64_t rows,
                            const std::vector<DiffKeptBlock>& blocks, const at::Tensor& shift,
                            const at::Tensor& scale1, const at::Tensor& weight,
                            const at::Tensor& bias, double ln_eps, const at::Tensor& noise,
                            const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                            const DiffStepCoefs& coefs, const DiffLossPolicy& policy);
at::Tensor diff_final_step(const at::Tensor& h, const at::Tensor& shift, const at::Tensor& scale1,
                           const at::Tensor& weight, const at::Tensor& bias, double ln_eps,
                           const at::Tensor& x, const at::Tensor& noise,
                           const at::Tensor& cfg_scale, DiffCfgMode mode, const at::Tensor& delta,
                           const DiffStepCoefs& coefs, const DiffLossPolicy& policy);

}  // namespace varscope::kernels::cuda
