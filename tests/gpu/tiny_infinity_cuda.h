// The tiny random Infinity the GPU tests of the Infinity loop sample on CUDA (graphs, cost
// model, fused RoPE): head dim 64 (SparVAR's kernels), 8 bits per token, random text features
// of width 128.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <utility>
#include <vector>

#include "core/sampling/infinity_sampler.h"
#include "tests/tiny_models.h"

namespace varscope::testing {

inline InfinityConfig tiny_infinity_cuda_config(int64_t depth) {
    InfinityConfig c;
    c.depth = depth;
    c.embed_dim = 128;
    c.num_heads = 2;
    c.mlp_hidden = 512;
    c.text_channels = 128;
    c.text_maxlen = 16;
    c.pool_heads = 1;
    c.codebook_dim = 8;
    return c;
}

// Seeded random weights on CUDA; `bf16`: the official bf16 mode.
inline InfinitySampler tiny_infinity_sampler_on_cuda(int64_t depth, bool bf16) {
    auto m = random_infinity(tiny_infinity_cuda_config(depth), 3);
    randomise(*m, 4);
    m->to(at::kCUDA);
    m->eval();
    if (bf16) m->use_autocast_bf16();
    bsq::BsqQuantConfig q;
    q.codebook_dim = 8;
    return InfinitySampler(m, q);
}

// Text features of the given lengths (rows packed), seeded, on CUDA.
inline InfinityText tiny_infinity_text(std::vector<int64_t> lens, uint64_t seed) {
    int64_t total = 0;
    for (auto l : lens) total += l;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return {at::randn({total, 128}, gen).to(at::kCUDA), std::move(lens)};
}

// Guided sampling (cfg 3, tau 0.8, seed 9), with or without CUDA graphs.
inline InfinitySampleOptions tiny_infinity_options(bool graphs) {
    InfinitySampleOptions o;
    o.seed = 9;
    o.cfg = 3.0;
    o.tau = 0.8;
    o.cuda_graphs = graphs;
    return o;
}

}  // namespace varscope::testing
