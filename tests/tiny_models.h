// Tiny VAR + VQVAE configurations that run in milliseconds on a CPU.
#pragma once

#include "core/pipeline.h"

namespace varscope::testing {

inline VqvaeConfig tiny_vqvae_config() {
    VqvaeConfig c;
    c.vocab_size = 64;
    c.z_channels = 8;
    c.ch = 32;
    c.ch_mult = {1, 2};
    c.patch_nums = {1, 2, 4};
    return c;
}

inline VarConfig tiny_var_config(bool shared_aln = false, bool l2 = true) {
    VarConfig c;
    c.depth = 2;
    c.embed_dim = 64;
    c.num_heads = 2;
    c.num_classes = 10;
    c.vocab_size = 64;
    c.cvae = 8;
    c.shared_aln = shared_aln;
    c.attn_l2_norm = l2;
    c.patch_nums = {1, 2, 4};
    return c;
}

// Random weights with enough spread that tokens depend on the inputs (the official init makes
// blocks near-identity, which would hide bugs).
void randomise(torch::nn::Module& m, uint64_t seed);

inline VarPipeline tiny_pipeline(uint64_t seed = 1, bool shared_aln = false) {
    auto p = VarPipeline::random(tiny_var_config(shared_aln), tiny_vqvae_config(), seed, {});
    randomise(*p.sampler().transformer(), seed);
    randomise(*p.sampler().vqvae(), seed + 1);
    return p;
}

// Six scales up to 8x8 tokens, four blocks: enough scales for the accelerators' schedules
// (pruned last scales, groups, sink and local scales) and still fast on a CPU.
inline VarPipeline small_pipeline(uint64_t seed = 1) {
    auto vae = tiny_vqvae_config();
    vae.patch_nums = {1, 2, 3, 4, 6, 8};
    auto var = tiny_var_config();
    var.depth = 4;
    var.patch_nums = vae.patch_nums;
    auto p = VarPipeline::random(var, vae, seed, {});
    randomise(*p.sampler().transformer(), seed);
    randomise(*p.sampler().vqvae(), seed + 1);
    return p;
}

// Sampling options of the accelerators' exactness tests: fixed seed, CFG 2, sampling from the
// full distribution (no top-k/top-p ties to hide differences), no per-scale device syncs.
inline VarSampleOptions exact_options(std::vector<int64_t> classes, uint64_t seed) {
    VarSampleOptions o;
    o.class_ids = std::move(classes);
    o.seed = seed;
    o.cfg = 2.0;
    o.top_k = 0;
    o.top_p = 0.0;
    o.time_scales = false;
    return o;
}

}  // namespace varscope::testing
