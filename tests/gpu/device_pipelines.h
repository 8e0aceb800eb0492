// VAR pipelines of the GPU tests: a CPU pipeline's weights in a fresh pipeline on the device
// (so the device runs can be compared with each other and with the CPU), and the model sized for
// SparVAR's kernels.
#pragma once

#include <c10/core/InferenceMode.h>

#include "core/io/module_binding.h"
#include "core/pipeline.h"
#include "tests/tiny_models.h"

namespace varscope::testing {

// A fresh pipeline placed as `options` says, holding `cpu`'s weights.
inline VarPipeline with_weights_of(VarPipeline& cpu, const LoadOptions& options) {
    auto placed = VarPipeline::random(cpu.var_config(), cpu.vae_config(), 0, options);
    c10::InferenceMode g;
    bind_state_dict(*placed.sampler().transformer(),
                    module_state_dict(*cpu.sampler().transformer()), {});
    bind_state_dict(*placed.sampler().vqvae(), module_state_dict(*cpu.sampler().vqvae()), {});
    return placed;
}

// Head dim 64 (SparVAR's kernels take 64 or 128), scales up to 16x16, four blocks, on the CPU:
// the CSLA masks are block-sparse at 12x12 and 16x16, so the kernel path runs.
inline VarPipeline kernel_sized_cpu_pipeline() {
    auto vae = tiny_vqvae_config();
    vae.patch_nums = {1, 2, 3, 4, 6, 8, 12, 16};
    auto var = tiny_var_config();
    var.depth = 4;
    var.embed_dim = 128;
    var.num_heads = 2;
    var.patch_nums = vae.patch_nums;
    auto cpu = VarPipeline::random(var, vae, 1, {});
    randomise(*cpu.sampler().transformer(), 1);
    randomise(*cpu.sampler().vqvae(), 2);
    return cpu;
}

}  // namespace varscope::testing
