// Small MAR configurations and sampling options shared by the MAR tests.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/accel/lazymar.h"
#include "core/mar_pipeline.h"

namespace varscope::testing {

// Encoder and decoder alike: `depth` blocks of width `width` with `heads` heads.
inline void set_transformer(MarConfig& c, int64_t width, int64_t depth, int64_t heads) {
    c.encoder_embed_dim = c.decoder_embed_dim = width;
    c.encoder_depth = c.decoder_depth = depth;
    c.encoder_num_heads = c.decoder_num_heads = heads;
}

// A small MAR (8x8 tokens of 16 channels, 2 + 2 blocks of width 64) whose DiffLoss head is
// sized by the test: big enough for the fused head kernels, fast on a GPU.
inline MarConfig small_mar_with_head(int64_t diffloss_w, int64_t diffloss_d, const char* steps) {
    MarConfig c;
    c.img_size = 128;  // 8x8 tokens
    c.vae_stride = 16;
    set_transformer(c, 64, 2, 4);
    c.vae_embed_dim = 16;
    c.class_num = 10;
    c.buffer_size = 8;
    c.diffloss_d = diffloss_d;
    c.diffloss_w = diffloss_w;
    c.num_sampling_steps = steps;
    return c;
}

// 4x4 tokens of 4 channels, one encoder and one decoder block of width 32 (2 heads), a head of
// depth 2 and width 32, 10 diffusion steps: milliseconds per run on a CPU. Tests change the
// sizes they study.
inline MarConfig tiny_cpu_mar_config() {
    MarConfig c = small_mar_with_head(32, 2, "10");
    c.img_size = 64;  // 4x4 tokens
    set_transformer(c, 32, 1, 2);
    c.vae_embed_dim = 4;
    c.buffer_size = 4;
    return c;
}

// Sampling options of the MAR tests: no device syncs to time the steps; fixed classes, seed,
// steps and guidance.
inline MarSampleOptions mar_options(std::vector<int64_t> classes, uint64_t seed, int64_t num_iter,
                                    double cfg) {
    MarSampleOptions o;
    o.time_steps = false;
    o.class_ids = std::move(classes);
    o.seed = seed;
    o.num_iter = num_iter;
    o.cfg = cfg;
    return o;
}

// LazyMAR as the CUDA-graph tests run it: refreshes at step 2 and every 3rd step after, 30% of
// the decoder positions computed in between (after the block the test sets as similarity_layer).
inline LazyMarConfig graph_test_lazymar() {
    LazyMarConfig lc;
    lc.enabled = true;
    lc.start_step = 2;
    lc.period = 3;
    lc.keep_ratio = 0.3;
    return lc;
}

}  // namespace varscope::testing
