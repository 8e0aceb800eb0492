#include "core/sampling/chunked_decode.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

namespace varscope {

int64_t decode_chunk_images(int64_t side) {
    constexpr int64_t kPixelsPerChunk = int64_t(256) * 256 * 16;
    return std::max<int64_t>(1, kPixelsPerChunk / std::max<int64_t>(1, side * side));
}

at::Tensor decode_in_chunks(const at::Tensor& latents, int64_t chunk,
                            const std::function<at::Tensor(const at::Tensor&)>& decode) {
    const int64_t n = latents.size(0);
    if (chunk <= 0 || n <= chunk) return decode(latents);
    std::vector<at::Tensor> parts;
    for (int64_t i = 0; i < n; i += chunk)
        parts.push_back(decode(latents.narrow(0, i, std::min(chunk, n - i))));
    return at::cat(parts, 0);
}

}  // namespace varscope
