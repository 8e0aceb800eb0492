// VAE decoding in chunks of images: a VAE's full-resolution activations are large (the VAR
// VQVAE holds about six 160-channel fp32 maps at full size in a residual block: ~4 GB for one
// 1024² image), so a whole batch at once spikes memory by the batch size. Chunks keep the peak
// at one chunk's whatever the batch; the images are the same (each image is decoded alone).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace varscope {

// Images per chunk for images of `side` pixels: 256 * 256 * 16 pixels per chunk (16 images at
// 256², 4 at 512², 1 at 1024²), at least one.
int64_t decode_chunk_images(int64_t side);

// decode(latents[i:i+chunk]) for each chunk, concatenated along the batch; one call when the
// batch fits in a chunk.
at::Tensor decode_in_chunks(const at::Tensor& latents, int64_t chunk,
                            const std::function<at::Tensor(const at::Tensor&)>& decode);

}  // namespace varscope
