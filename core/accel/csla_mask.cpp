#include "core/accel/csla_mask.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "kernels/block_list_order.h"

namespace varscope {
namespace {

// round(num / den) with ties to even, exact for non-negative integers.
int64_t round_half_even(int64_t num, int64_t den) {
    const int64_t q = num / den, twice_rem = 2 * (num % den);
    if (twice_rem > den || (twice_rem == den && (q % 2) == 1)) return q + 1;
    return q;
}

// near[x, j]: key row (or column) j of a pn_h grid lies within radius r of query row x of a pn_k
// grid after rescaling. The 2D window is the outer AND of this matrix with itself.
at::Tensor window_1d(int64_t pn_k, int64_t pn_h, int64_t radius) {
    auto near = at::zeros({pn_k, pn_h}, at::kBool);
    auto acc = near.accessor<bool, 2>();
    for (int64_t x = 0; x < pn_k; ++x) {
        const int64_t centre = round_half_even(x * pn_h, pn_k);
        for (int64_t j = std::max<int64_t>(0, centre - radius);
             j <= std::min(pn_h - 1, centre + radius); ++j)
            acc[x][j] = true;
    }
    return near;
}

}  // namespace

int64_t CslaSpec::window_for(int64_t query_scale, int64_t key_scale) const {
    const int64_t distance = query_scale - key_scale;  // 0 = the query's own scale
    const int64_t n = static_cast<int64_t>(windows.size());
    return distance < n ? windows[n - 1 - distance] : middle_window;
}

at::Tensor csla_token_mask(const std::vector<int64_t>& patch_nums, int64_t query_scale,
                           const CslaSpec& spec) {
    const int64_t S = static_cast<int64_t>(patch_nums.size());
    if (query_scale < 0 || query_scale >= S)
        throw std::invalid_argument("csla_token_mask: query scale " + std::to_string(query_scale) +
                                    " is outside the " + std::to_string(S) + " scales");
    if (spec.middle_window < 1)
        throw std::invalid_argument("csla_token_mask: window sizes must be >= 1");
    for (auto w : spec.windows)
        if (w < 1) throw std::invalid_argument("csla_token_mask: window sizes must be >= 1");

    const int64_t pn_q = patch_nums[query_scale];
    std::vector<at::Tensor> parts;
    parts.reserve(query_scale + 1);
    for (int64_t h = 0; h <= query_scale; ++h) {
        const int64_t pn_h = patch_nums[h];
        if (h < spec.sink_scales) {
            parts.push_back(at::ones({pn_q * pn_q, pn_h * pn_h}, at::kBool));
            continue;
        }
        const auto near = window_1d(pn_q, pn_h, spec.window_for(query_scale, h) / 2);
        // (x, y) x (x_k, y_k): rows and columns must both be near.
        parts.push_back(
            at::logical_and(near.view({pn_q, 1, pn_h, 1}), near.view({1, pn_q, 1, pn_h}))
                .reshape({pn_q * pn_q, pn_h * pn_h}));
    }
    return at::cat(parts, 1);
}

at::Tensor csla_block_mask(const at::Tensor& token_mask, int64_t block_q, int64_t block_k) {
    if (token_mask.dim() != 2 || token_mask.scalar_type() != at::kBool)
        throw std::invalid_argument("csla_block_mask: expects a 2-D bool token mask");
    if (block_q < 1 || block_k < 1)
        throw std::invalid_argument("csla_block_mask: block sizes must be >= 1");
    const int64_t lq = token_mask.size(0), lk = token_mask.size(1);
    const int64_t nq = (lq + block_q - 1) / block_q, nk = (lk + block_k - 1) / block_k;
    const auto padded = at::constant_pad_nd(token_mask.to(at::kByte),
                                            {0, nk * block_k - lk, 0, nq * block_q - lq}, 0);
    return padded.view({nq, block_q, nk, block_k}).amax({1, 3}).to(at::kBool);
}

at::Tensor expand_block_mask(const at::Tensor& block_mask, int64_t block_q, int64_t block_k,
                             int64_t q_len, int64_t kv_len) {
    return block_mask.repeat_interleave(block_q, 0)
        .repeat_interleave(block_k, 1)
        .narrow(0, 0, q_len)
        .narrow(1, 0, kv_len);
}

BlockLists csla_block_lists(const at::Tensor& block_mask) {
    if (block_mask.dim() != 2 || block_mask.scalar_type() != at::kBool)
        throw std::invalid_argument("csla_block_lists: expects a 2-D bool block mask");
    const auto mask = block_mask.cpu();
    const int64_t nk = mask.size(1);
    auto counts = mask.sum(1).to(at::kInt);
    const int64_t max_active = mask.numel() ? counts.max().item<int64_t>() : 0;
    // Inactive columns sort after every active id, then are cut off or marked -1.
    auto ids = at::arange(nk, at::kLong).expand_as(mask);
    auto keyed = at::where(mask, ids, at::full({}, nk, at::kLong));
    auto sorted = std::get<0>(keyed.sort(1)).narrow(1, 0, max_active);
    auto indices = sorted.masked_fill(sorted == nk, -1).to(at::kInt).contiguous();
    counts = counts.contiguous();
    kernels::order_block_lists_for_shared_reads(
        indices.data_ptr<int32_t>(), counts.data_ptr<int32_t>(), indices.size(0), indices.size(1));
    return {indices, counts};
}

double mask_sparsity(const at::Tensor& mask) {
    if (mask.numel() == 0) return 0.0;
    const double on = mask.to(at::kBool).sum().item<double>();
    return 1.0 - on / static_cast<double>(mask.numel());
}

}  // namespace varscope
