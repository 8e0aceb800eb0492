// The fused q/k normalisation kernel (kernels/qk_norm.h) against the ATen composition it replaces
// in VAR's bf16-autocast attention ((q / norm_q.clamp_min(1e-12)).mul(mul).to(bf16), k likewise
// without mul): bitwise equal, for q and k as views of a (B, L, 3, H, c) QKV product (the
// sampling loop's case), head dims 64 / 128 / 6 (vector and scalar paths), a misaligned view,
// one head scale for all heads, zero vectors, special values; the layout is what ATen gives; and
// with the keys and values written into a KV cache's slots. The
// allocator is poisoned with NaN first so an unwritten output shows. Skips without CUDA or
// without kernels for the device.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>
#include <tuple>
#include <utility>

#include "kernels/qk_norm.h"
#include "tests/gpu/poison_allocator.h"
#include "tests/gpu/special_values.h"

namespace vk = varscope::kernels;

namespace {

const auto kCuda = at::TensorOptions().device(at::kCUDA);

at::Tensor norm_of(const at::Tensor& t) {  // what autocast's F.normalize computes first
    return at::linalg_vector_norm(t, 2, at::IntArrayRef{-1}, /*keepdim=*/true, at::kFloat);
}

bool kernel_runs(std::string* why) {
    if (!torch::cuda::is_available()) {
        *why = "no CUDA device";
        return false;
    }
    const auto q = at::zeros({1, 1, 1, 4}, kCuda.dtype(at::kBFloat16));
    const auto n = at::ones({1, 1, 1, 1}, kCuda);
    return vk::fused_qk_norm_supported(q, q, n, n, n, {}, why);
}

void expect_same_bits(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    ASSERT_EQ(got.scalar_type(), at::kBFloat16) << what;
    ASSERT_EQ(want.scalar_type(), at::kBFloat16) << what;
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_EQ(got.strides(), want.strides()) << what << ": the layout ATen gives";
    const auto a = got.contiguous().view(at::kShort), b = want.contiguous().view(at::kShort);
    const int64_t differ = a.ne(b).sum().item<int64_t>();
    EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << a.numel() << " elements differ";
}

// The QKV product's bf16 (B, L, 3, H, c) on the device, values over many magnitudes with special
// values, a zero q row and a zero k row; misaligned: one element in. Returns its q, k, v views.
struct QkvViews {
    at::Tensor q, k, v;
};

QkvViews qkv_views(int64_t B, int64_t H, int64_t L, int64_t c, bool misaligned,
                   at::Generator& gen) {
    auto flat = varscope::testing::special_values_stream(1, 1, B * L * 3 * H * c + 1, gen, 11)
                    .to(at::kBFloat16)
                    .view(-1);
    auto qkv =
        flat.narrow(0, misaligned ? 1 : 0, B * L * 3 * H * c).view({B, L, 3, H, c}).to(at::kCUDA);
    if (misaligned)  // keep the one-element offset on the device too
        qkv = at::cat({at::zeros({1}, qkv.options()), qkv.view(-1)})
                  .narrow(0, 1, qkv.numel())
                  .view({B, L, 3, H, c});
    qkv.select(2, 0).select(2, 1).select(1, 0).zero_();      // a zero q row
    qkv.select(2, 1).select(2, 2).select(1, L - 1).zero_();  // a zero k row
    const auto parts = qkv.permute({2, 0, 3, 1, 4}).unbind(0);
    return {parts[0], parts[1], parts[2]};
}

// The autocast composition the kernel reproduces: q / max(|q|, 1e-12) * mul and
// k / max(|k|, 1e-12), each rounded to bf16 (norm_q, norm_k: the fp32 norms).
std::pair<at::Tensor, at::Tensor> composition(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& norm_q, const at::Tensor& norm_k,
                                              const at::Tensor& mul) {
    return {(q / norm_q.clamp_min(1e-12)).mul(mul).to(at::kBFloat16),
            (k / norm_k.clamp_min(1e-12)).to(at::kBFloat16)};
}

}  // namespace

TEST(KernelsQkNormGpu, BitwiseEqualToTheAutocastComposition) {
    std::string why;
    if (!kernel_runs(&why)) GTEST_SKIP() << why;
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
    int cases = 0;
    for (int64_t c : {64, 128, 6})
        for (int64_t L : {1, 37})
            for (bool one_mul : {false, true})
                for (bool misaligned : {false, true}) {
                    const int64_t B = 2, H = 3;
                    const std::string what = "c " + std::to_string(c) + " L " + std::to_string(L) +
                                             (one_mul ? " one mul" : "") +
                                             (misaligned ? " misaligned" : "");
                    const auto [q, k, v] = qkv_views(B, H, L, c, misaligned, gen);
                    const auto mul =
                        at::rand({1, one_mul ? 1 : H, 1, 1}, gen).mul(9.0).add(1.0).to(at::kCUDA);
                    const auto nq = norm_of(q), nk = norm_of(k);
                    const auto [want_q, want_k] = composition(q, k, nq, nk, mul);
                    varscope::testing::poison_cuda_allocator(2 * q.numel());
                    ASSERT_TRUE(vk::fused_qk_norm_supported(q, k, nq, nk, mul, {}, &why))
                        << what << ": " << why;
                    const auto [got_q, got_k] = vk::fused_qk_norm_bf16(q, k, nq, nk, mul);
                    expect_same_bits(got_q, want_q, what + " q");
                    expect_same_bits(got_k, want_k, what + " k");
                    ++cases;
                }
    EXPECT_EQ(cases, 24);
}

// The sampling loop's case: the keys go straight into a KV cache's slots for the step and the
// values are copied beside them (no append copies). The slots hold the composition's keys and
// the values' bits; every other cache element keeps its bits.
TEST(KernelsQkNormGpu, KeysAndValuesLandInTheCacheSlots) {
    std::string why;
    if (!kernel_runs(&why)) GTEST_SKIP() << why;
    c10::InferenceMode guard;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(43);
    int cases = 0;
    for (int64_t c : {64, 6})
        for (int64_t L : {1, 37})
            for (bool misaligned : {false, true}) {
                const int64_t B = 2, H = 3, before = 5, capacity = before + L + 3;
                const std::string what = "c " + std::to_string(c) + " L " + std::to_string(L) +
                                         (misaligned ? " misaligned" : "");
                const auto [q, k, v] = qkv_views(B, H, L, c, misaligned, gen);
                const auto mul = at::rand({1, H, 1, 1}, gen).mul(9.0).add(1.0).to(at::kCUDA);
                const auto nq = norm_of(q), nk = norm_of(k);
                const auto [want_q, want_k] = composition(q, k, nq, nk, mul);
                // Cache buffers (B, H, capacity, c) full of distinct bits.
                auto fill = [&] {
                    return at::arange(B * H * capacity * c, kCuda.dtype(at::kInt))
                        .to(at::kShort)
                        .view(at::kBFloat16)
                        .view({B, H, capacity, c});
                };
                const auto cache_k = fill(), cache_v = fill();
                const auto before_k = cache_k.clone(), before_v = cache_v.clone();
                const vk::QkCacheSlots slots{cache_k.narrow(2, before, L), v,
                                             cache_v.narrow(2, before, L)};
                ASSERT_TRUE(vk::fused_qk_norm_supported(q, k, nq, nk, mul, {}, &why, &slots))
                    << what << ": " << why;
                const auto [got_q, got_k] = vk::fused_qk_norm_bf16(q, k, nq, nk, mul, {}, &slots);
                EXPECT_EQ(got_k.data_ptr(), slots.k_out.data_ptr()) << what;
                expect_same_bits(got_q, want_q, what + " q");
                EXPECT_TRUE(at::equal(got_k.view(at::kShort), want_k.view(at::kShort)))
                    << what << ": keys in the slots";
                EXPECT_TRUE(
                    at::equal(slots.v_out.view(at::kShort), v.contiguous().view(at::kShort)))
                    << what << ": values in the slots";
                for (const auto& [now, was] : {std::pair{cache_k, before_k}, {cache_v, before_v}})
                    for (auto [from, n] : {std::pair<int64_t, int64_t>{0, before},
                                           {before + L, capacity - before - L}})
                        EXPECT_TRUE(at::equal(now.narrow(2, from, n).view(at::kShort),
                                              was.narrow(2, from, n).view(at::kShort)))
                            << what << ": a cache element outside the slots changed";
                ++cases;
            }
    EXPECT_EQ(cases, 8);
}

TEST(KernelsQkNormGpu, PolicyDtypesAndShapesDecide) {
    std::string why;
    if (!kernel_runs(&why)) GTEST_SKIP() << why;
    c10::InferenceMode guard;
    const auto q = at::zeros({1, 2, 3, 8}, kCuda.dtype(at::kBFloat16));
    const auto n = at::ones({1, 2, 3, 1}, kCuda), mul = at::ones({1, 2, 1, 1}, kCuda);
    EXPECT_TRUE(vk::fused_qk_norm_supported(q, q, n, n, mul, {}, &why)) << why;
    vk::KernelPolicy off;
    off.fused_elementwise = false;
    EXPECT_FALSE(vk::fused_qk_norm_supported(q, q, n, n, mul, off, &why));
    EXPECT_FALSE(vk::fused_qk_norm_supported(q.to(at::kFloat), q.to(at::kFloat), n, n, mul, {},
                                             &why));  // fp32 q: not the kernel's
    EXPECT_FALSE(vk::fused_qk_norm_supported(q, q, n, n, mul.to(at::kBFloat16), {}, &why));
    EXPECT_FALSE(vk::fused_qk_norm_supported(q, q, n.narrow(2, 0, 2), n, mul, {}, &why));
    const auto n_t = at::ones({1, 2, 8, 1}, kCuda);  // the norms of q.transpose(2, 3)'s rows
    EXPECT_FALSE(vk::fused_qk_norm_supported(q.transpose(2, 3), q.transpose(2, 3), n_t, n_t, mul,
                                             {}, &why));  // channels not contiguous
    vk::KernelPolicy reference;
    reference.reference = true;
    EXPECT_FALSE(vk::fused_qk_norm_supported(q, q, n, n, mul, reference, &why));
    const auto slot = at::zeros({1, 2, 3, 8}, kCuda.dtype(at::kBFloat16));
    const vk::QkCacheSlots good{slot, q, slot.clone()}, fp32{slot.to(at::kFloat), q, slot},
        short_slot{slot, q, slot.narrow(2, 0, 2)}, no_values{slot, at::Tensor(), slot},
        cpu{slot, q, slot.cpu()};
    EXPECT_TRUE(vk::fused_qk_norm_supported(q, q, n, n, mul, {}, &why, &good)) << why;
    for (const auto* bad : {&fp32, &short_slot, &no_values, &cpu})
        EXPECT_FALSE(vk::fused_qk_norm_supported(q, q, n, n, mul, {}, &why, bad));
}
