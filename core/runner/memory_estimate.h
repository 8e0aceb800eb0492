// How much memory a run needs beyond the loaded weights, estimated before any work, so that a
// batch or schedule that cannot fit the device (or the host, on CPU) is refused in a second with
// numbers instead of failing minutes later with an allocator error.
//
// The estimate is counted from shapes (documented per family in its runner): the KV cache, the
// largest step's activations and logits, the sampling buffers and one VAE decode chunk at full
// resolution. It is not a measurement: `bench e2e` reports it beside the measured peak
// (memory_estimate vs peak_device_bytes); on the H200 it came within 2 % below the peak for
// VAR-d30 and Infinity-2B at 1024² (bench/results/2026-11-28-h200/session23), which the check's
// headroom covers.
#pragma once

#include <c10/core/Device.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace varscope {

struct MemoryEstimate {
    int64_t images = 1;
    int64_t per_image = 0;  // bytes that grow with each image
    int64_t fixed = 0;      // bytes independent of the batch
    // A method whose memory depends on the image (AMS-KV): per_image is the least it may need,
    // per_image_most the most; 0 when they are the same.
    int64_t per_image_most = 0;
    // Device bytes the runner gives back by itself before a run that would not fit otherwise
    // (Infinity's automatic block streaming: the weights of blocks it moves to host memory);
    // the check counts them as available.
    int64_t reclaimable = 0;
    int64_t bytes() const { return fixed + per_image * images; }
    int64_t bytes_most() const { return fixed + std::max(per_image, per_image_most) * images; }
    // The most images that fit into `available` bytes (0 when not even one does).
    int64_t max_images(int64_t available) const;
    nlohmann::json to_json() const;
};

// Bytes that new allocations on `device` can still get: on CUDA the driver's free memory plus
// what the caching allocator holds unused; on the CPU the kernel's MemAvailable. -1 when it
// cannot be read (then nothing is refused).
int64_t available_memory(const c10::Device& device);

// Share of the available memory a run may plan to use: the estimate is an upper bound, but
// other allocations (CUDA graphs' pools, the allocator's rounding, fragmentation) are not in it.
constexpr double kMemoryHeadroom = 0.9;

// Throws std::invalid_argument when `estimate` does not fit `available` bytes (with
// kMemoryHeadroom) of `device_name`: the estimate, what is free and the largest batch that fits.
// `available` < 0: unknown, nothing is checked.
void check_memory_fits(const MemoryEstimate& estimate, int64_t available,
                       const std::string& device_name);

std::string format_bytes(int64_t bytes);  // "1.5 GiB", "300 MiB", "12 KiB"

// The terms the families' estimates are made of (their assumptions in one place). rows: batch
// rows of one image (2 with guidance); eb: bytes per element of the transformer's dtype.
// Keys and values of `layers` layers for `keys` tokens of width `width`.
int64_t kv_cache_bytes(int64_t layers, int64_t rows, int64_t keys, int64_t width, int64_t eb);
// One forward over `tokens` rows: QKV (3 width), attention output, FFN hidden and its GELU (2
// hidden), residual and norm copies (4 width).
int64_t step_activation_bytes(int64_t rows, int64_t tokens, int64_t width, int64_t hidden,
                              int64_t eb);
// The fp32 residual stream beside those activations in Infinity's loop (fp32 in both of its
// modes) and VAR's bf16-autocast one: the residual, the norm outputs, the gated sums and the
// cross-attention output, `copies` width-wide fp32 rows per token. Calibrated on one measurement
// (session 37, a 4-block width-1024 Infinity at 1024^2 in the official bf16 mode, CUDA: the run's
// peak allocation grew 776 MB against 615 MB estimated without this term and the workspaces below).
int64_t fp32_stream_bytes(int64_t rows, int64_t tokens, int64_t width, int64_t copies);
// The copies both loops count (Infinity always, VAR under bf16-autocast).
constexpr int64_t kFp32StreamCopies = 6;
// The matrix-product library's workspace on CUDA, one per stream (the graphs capture on a side
// stream, eager steps run on the default one): cuBLAS's default 32 MiB each.
constexpr int64_t kMatmulWorkspaceBytes = 2 * (32ll << 20);
// Eager attention's fp32 scores and their softmax.
int64_t eager_score_bytes(int64_t rows, int64_t heads, int64_t queries, int64_t keys);
// fp32 logits with the sampler's softmax and top-k copies.
int64_t logit_bytes(int64_t rows, int64_t tokens, int64_t vocab);
// A VAE decode of `images` images of `side` pixels in fp32 in chunks (chunked_decode.h): about
// six `channels`-wide maps at full resolution live per image of a chunk.
int64_t decode_bytes(int64_t channels, int64_t side, int64_t images);

}  // namespace varscope
