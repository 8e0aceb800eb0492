// Token kernels: FastVAR's pivotal scores and top-K selection, LazyVAR's update index.
// Memory-bound one-pass reductions in float32; see kernels/token_ops.h for the math.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/token_ops_params.h"

namespace varscope::kernels::cuda {
namespace {

__device__ __forceinline__ float to_float(float v) {
    return v;
}
__device__ __forceinline__ float to_float(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

constexpr int kMeanChannels = 32;  // channels per CTA of the mean kernel (one per lane)
constexpr int kMeanRowGroups = 8;  // token groups per CTA, reduced in shared memory
constexpr int kWarpsPerBlock = 8;

// mean[r, c] = sum_n x[r, n, c] / tokens. CTA (32 channels) x (8 token groups).
template <typename T>
__global__ void token_mean_kernel(const T* __restrict__ x, int tokens, int channels,
                                  float* __restrict__ mean) {
    __shared__ float partial[kMeanRowGroups][kMeanChannels + 1];
    const int c = blockIdx.x * kMeanChannels + threadIdx.x;
    const int r = blockIdx.y;
    float acc = 0.f;
    if (c < channels) {
        const T* base = x + static_cast<long long>(r) * tokens * channels + c;
        for (int n = threadIdx.y; n < tokens; n += kMeanRowGroups)
            acc += to_float(base[static_cast<long long>(n) * channels]);
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < channels) {
        float sum = 0.f;
        for (int g = 0; g < kMeanRowGroups; ++g) sum += partial[g][threadIdx.x];
        mean[static_cast<long long>(r) * channels + c] = sum / static_cast<float>(tokens);
    }
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One warp per token: scores[r, n] = sum_c (x[r, n, c] - mean[r, c])^2.
template <typename T>
__global__ void pivotal_score_kernel(const T* __restrict__ x, const float* __restrict__ mean,
                                     int rows, int tokens, int channels,
                                     float* __restrict__ scores) {
    const long long t = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (t >= static_cast<long long>(rows) * tokens) return;  // the whole warp leaves together
    const int lane = threadIdx.x % 32;
    const long long r = t / tokens;
    const T* row = x + t * channels;
    const float* mu = mean + r * channels;
    float acc = 0.f;
    for (int c = lane; c < channels; c += 32) {
        const float d = to_float(row[c]) - mu[c];
        acc += d * d;
    }
    acc = warp_sum(acc);
    if (lane == 0) scores[t] = acc;
}

// One thread per (batch, position); channels are strided by `positions`, so neighbouring
// threads read neighbouring addresses.
template <typename T>
__global__ void update_index_kernel(const T* __restrict__ a, const T* __restrict__ b, int batch,
                                    int channels, int positions, float* __restrict__ out) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<long long>(batch) * positions) return;
    const long long n = i / positions, p = i % positions;
    const long long base = n * channels * positions + p;
    float dot = 0.f, na = 0.f, nb = 0.f;
    for (int c = 0; c < channels; ++c) {
        const float x = to_float(a[base + static_cast<long long>(c) * positions]);
        const float y = to_float(b[base + static_cast<long long>(c) * positions]);
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    out[i] = 1.f - dot / fmaxf(sqrtf(na) * sqrtf(nb), 1e-12f);
}

constexpr int kTopThreads = 512;
constexpr int kTopWarps = kTopThreads / 32;

// Exclusive prefix sum of v over the CTA (kTopThreads threads) and the total. `warp_sums` holds
// kTopWarps + 1 ints of shared memory; every thread must call it (it synchronises the CTA).
__device__ __forceinline__ int block_exclusive_sum(int v, int* total, int* warp_sums) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int inclusive = v;
    for (int d = 1; d < 32; d <<= 1) {
        const int up = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += up;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        const int w = lane < kTopWarps ? warp_sums[lane] : 0;
        int scan = w;
        for (int d = 1; d < 32; d <<= 1) {
            const int up = __shfl_up_sync(0xffffffffu, scan, d);
            if (lane >= d) scan += up;
        }
        if (lane < kTopWarps) warp_sums[lane] = scan - w;  // exclusive offsets of the warps
        if (lane == kTopWarps - 1) warp_sums[kTopWarps] = scan;
    }
    __syncthreads();
    const int out = warp_sums[warp] + inclusive - v;
    *total = warp_sums[kTopWarps];
    __syncthreads();  // warp_sums is reused by the next call
    return out;
}

// An order-preserving key of a score: a larger score has a larger key; NaN is above every
// number (as ATen's sorts place it) and -0 equals +0.
__device__ __forceinline__ unsigned score_key(float s) {
    if (s != s) return 0xffffffffu;
    if (s == 0.f) return 0x80000000u;
    const unsigned u = __float_as_uint(s);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One CTA per row: the key T of the keep-th highest score by a radix select (four 8-bit
// digits, most significant first, histograms in shared memory; the row is read from L2 each
// pass), then one pass in id order that writes every id above T and the lowest ids equal to T
// until `keep` are written: ascending ids with no sort. Replaces ATen's topk and a sort (about
// ten launches for a FastVAR block).
__global__ void __launch_bounds__(kTopThreads)
    top_rows_kernel(const float* __restrict__ scores, int tokens, int keep,
                    int64_t* __restrict__ out) {
    __shared__ int warp_sums[kTopWarps + 1];
    __shared__ unsigned hist[256];
    __shared__ unsigned s_prefix;
    __shared__ int s_remaining;
    const float* row = scores + static_cast<long long>(blockIdx.x) * tokens;
    int64_t* dst = out + static_cast<long long>(blockIdx.x) * keep;
    unsigned prefix = 0, mask = 0;
    int remaining = keep;  // the rank of T among the keys that match `prefix` under `mask`
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += kTopThreads) hist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < tokens; i += kTopThreads) {
            const unsigned k = score_key(row[i]);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int r = remaining, b = 255;
            for (; b > 0; --b) {
                if (static_cast<int>(hist[b]) >= r) break;
                r -= static_cast<int>(hist[b]);
            }
            s_prefix = prefix | (static_cast<unsigned>(b) << shift);
            s_remaining = r;
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
    }
    // prefix is T; `remaining` of the keys equal to T are taken, the lowest ids first.
    int written = 0, equal_seen = 0;
    for (int start = 0; start < tokens; start += kTopThreads) {
        const int i = start + threadIdx.x;
        const unsigned k = i < tokens ? score_key(row[i]) : 0u;
        const int above = i < tokens && k > prefix ? 1 : 0;
        const int equal = i < tokens && k == prefix ? 1 : 0;
        int equal_total, taken;
        const int equal_rank = block_exclusive_sum(equal, &equal_total, warp_sums);
        const int take = above | (equal && equal_seen + equal_rank < remaining ? 1 : 0);
        const int pos = block_exclusive_sum(take, &taken, warp_sums);
        if (take) dst[written + pos] = i;
        written += taken;
        equal_seen += equal_total;
    }
}

template <typename T>
cudaError_t pivotal(const void* x, int rows, int tokens, int channels, float* mean, float* scores,
                    cudaStream_t stream) {
    const T* xt = static_cast<const T*>(x);
    const dim3 mean_grid((channels + kMeanChannels - 1) / kMeanChannels, rows);
    token_mean_kernel<T>
        <<<mean_grid, dim3(kMeanChannels, kMeanRowGroups), 0, stream>>>(xt, tokens, channels, mean);
    const long long warps = static_cast<long long>(rows) * tokens;
    const auto blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
    pivotal_score_kernel<T>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(xt, mean, rows, tokens, channels, scores);
    return cudaGetLastError();
}

template <typename T>
cudaError_t update(const void* a, const void* b, int batch, int channels, int positions, float* out,
                   cudaStream_t stream) {
    const long long n = static_cast<long long>(batch) * positions;
    const auto blocks = static_cast<unsigned>((n + 255) / 256);
    update_index_kernel<T><<<blocks, 256, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), batch, channels, positions, out);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_pivotal_scores(const void* x, TokenElem elem, int rows, int tokens, int channels,
                                  float* mean, float* scores, cudaStream_t stream) {
    if (rows == 0 || tokens == 0) return cudaSuccess;
    switch (elem) {
        case TokenElem::Float32:
            return pivotal<float>(x, rows, tokens, channels, mean, scores, stream);
        case TokenElem::Float16:
            return pivotal<__half>(x, rows, tokens, channels, mean, scores, stream);
        case TokenElem::BFloat16:
            return pivotal<__nv_bfloat16>(x, rows, tokens, channels, mean, scores, stream);
    }
    return cudaErrorNotSupported;
}

cudaError_t launch_top_rows(const float* scores, int rows, int tokens, int keep, int64_t* out,
                            cudaStream_t stream) {
    if (rows == 0 || keep == 0) return cudaSuccess;
    top_rows_kernel<<<rows, kTopThreads, 0, stream>>>(scores, tokens, keep, out);
    return cudaGetLastError();
}

cudaError_t launch_update_index(const void* a, const void* b, TokenElem elem, int batch,
                                int channels, int positions, float* out, cudaStream_t stream) {
    if (batch == 0 || positions == 0) return cudaSuccess;
    switch (elem) {
        case TokenElem::Float32:
            return update<float>(a, b, batch, channels, positions, out, stream);
        case TokenElem::Float16:
            return update<__half>(a, b, batch, channels, positions, out, stream);
        case TokenElem::BFloat16:
            return update<__nv_bfloat16>(a, b, batch, channels, positions, out, stream);
    }
    return cudaErrorNotSupported;
}

}  // namespace varscope::kernels::cuda
