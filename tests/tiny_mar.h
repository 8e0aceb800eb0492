// A small MAR (8x8 tokens of 16 channels, 2 + 2 blocks of width 64) whose DiffLoss head is
// sized by the test: big enough for the fused head kernels, fast on a GPU.
#pragma once

#include <cstdint>

#include "core/mar_pipeline.h"

namespace varscope::testing {

inline MarConfig small_mar_with_head(int64_t diffloss_w, int64_t diffloss_d, const char* steps) {
    MarConfig c;
    c.img_size = 128;  // 8x8 tokens
    c.vae_stride = 16;
    c.encoder_embed_dim = c.decoder_embed_dim = 64;
    c.encoder_depth = c.decoder_depth = 2;
    c.encoder_num_heads = c.decoder_num_heads = 4;
    c.vae_embed_dim = 16;
    c.class_num = 10;
    c.buffer_size = 8;
    c.diffloss_d = diffloss_d;
    c.diffloss_w = diffloss_w;
    c.num_sampling_steps = steps;
    return c;
}

}  // namespace varscope::testing
