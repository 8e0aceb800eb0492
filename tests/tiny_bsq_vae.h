// A BSQ VAE small enough for the CPU tests: patch 4, 24 base channels, one residual block per
// level, three levels; `bits` per latent position and the encoder's channel multipliers vary.
#pragma once

#include <cstdint>
#include <vector>

#include "core/models/bsq_vae_config.h"

namespace varscope::testing {

inline BsqVaeConfig tiny_bsq_vae_config(int64_t bits,
                                        std::vector<int64_t> encoder_ch_mult = {2, 1, 1}) {
    BsqVaeConfig c;
    c.codebook_dim = bits;
    c.patch_size = 4;
    c.base_ch = 24;
    c.num_res_blocks = 1;
    c.encoder_ch_mult = std::move(encoder_ch_mult);
    c.decoder_ch_mult = {1, 1, 1};
    return c;
}

}  // namespace varscope::testing
