// Infinity's pipeline (issue #32): the transformer, its BSQ VAE and the sampling loop, from
// precomputed text features (T5 encoder output in the official packed form) to images. The
// runner (core/runner/, Family::Infinity) and the T5 text encoder (branch t5) build on it.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>

#include "core/models/bsq_vae.h"
#include "core/models/infinity.h"
#include "core/sampling/infinity_sampler.h"

namespace varscope {

struct InfinityPipeline {
    InfinityTransformer model{nullptr};
    BsqVae vae{nullptr};  // null: no decoding (summed codes only)
    bsq::BsqQuantConfig quant;
    std::shared_ptr<InfinitySampler> sampler;  // made by from(): holds the CUDA graphs

    // The transformer file (official .pth / safetensors) and, if given, its BSQ VAE on
    // `device`. CheckpointError names the file and the tensor; std::invalid_argument when the VAE
    // does not fit the transformer (bits per token).
    static InfinityPipeline load(const std::string& model_path, const std::string& vae_path,
                                 const at::Device& device = at::kCPU);
    // As load(), with the transformer's tensors already read from model_path. `bf16_blocks`:
    // the official bf16 mode (InfinityTransformerImpl::use_autocast_bf16), applied on the CPU
    // before the move, so the device never holds an fp32 copy of the blocks (Infinity-8B: 33 GB
    // in fp32 against 17 GB in bf16; the caching allocator kept the fp32 copy's memory).
    static InfinityPipeline from_weights(const StateDict& weights, const std::string& model_path,
                                         const std::string& vae_path, const at::Device& device,
                                         bool bf16_blocks = false);
    // Wraps built modules (tests, random weights); checks that they fit together.
    static InfinityPipeline from(InfinityTransformer model, BsqVae vae);

    // The low-memory mode's block streaming (core/models/infinity_block_stream.h): the last
    // `count` blocks' weights move to host memory and are copied into one device block before
    // they run; later samples are exact and eager. A count at or below streamed_blocks() changes
    // nothing (blocks never move back); std::invalid_argument for a count above the depth.
    void stream_blocks(int64_t count);
    int64_t streamed_blocks() const;
    // The automatic form: streams as many more blocks as a run that needs `need` bytes beyond
    // the resident weights takes to fit into `usable` bytes (blocks_to_stream: each gives its
    // weights back, the first two pay for the slots) and returns streamed_blocks() after it (every
    // block when even that does not fit: the memory check then says so).
    int64_t stream_to_fit(int64_t need, int64_t usable);
    // Device bytes streaming every block would give back now (the slots paid): what a run may
    // count on beyond the free memory when the runner streams automatically.
    int64_t reclaimable_bytes() const;

    struct Output {
        InfinitySampleResult sample;
        at::Tensor images;  // (B, 3, H, W) in [0, 1]; undefined without a VAE or decode off
        double decode_millis = 0.0;
    };
    // `low_memory` (the runner's low-memory mode, with the T5 offload): before the decode the
    // sampler's CUDA graphs and KV caches are released and the caching allocator emptied, so the
    // decode's activations do not stack on the sampling's memory (Infinity-8B at 1024^2 on the
    // H200: +6.6 GB of decode over 30.9 GB of sampling); the next call captures its graphs anew.
    Output generate(const InfinityText& text, const InfinitySchedule& schedule,
                    const InfinitySampleOptions& options, SamplingHooks* hooks = nullptr,
                    ProbeSink* probe = nullptr, bool decode = true, bool low_memory = false) const;
};

// Text features written as tensors "kv_compact" (sum(lens), Ct5) float and "lens" (B) integer
// (safetensors or .pth; tools/parity/infinity_parity.py writes this layout). CheckpointError
// naming the file and the tensor.
InfinityText load_text_features(const std::string& path);

// `t`'s rows repeated in order to `rows` rows (fewer than it has: its first ones), for a batch of
// another size. std::invalid_argument for rows < 1 or a text without rows.
InfinityText repeat_text_rows(const InfinityText& t, int64_t rows);

}  // namespace varscope
