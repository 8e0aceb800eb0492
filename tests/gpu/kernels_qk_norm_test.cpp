// The fused q/k normalisation kernel (kernels/qk_norm.h) against the ATen composition it replaces
// in VAR's bf16-autocast attention ((q / norm_q.clamp_min(1e-12)).mul(mul).to(bf16), k likewise
// without mul): bitwise equal, for q and k as views of a (B, L, 3, H, c) QKV product (the
// sampling loop's case), head dims 64 / 128 / 6 (vector and scalar paths), a misaligned view,
// one head scale for all heads, zero vectors, special values; the layout is what ATen gives. The
// allocator is poisoned with NaN first so an unwritten output shows. Skips without CUDA or
// without kernels for the device.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>
#include <tuple>

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
                    // The QKV product's bf16 (B, L, 3, H, c), values over many magnitudes with
                    // special values, two zero vectors; misaligned: one element in.
                    auto flat = varscope::testing::special_values_stream(
                                    1, 1, B * L * 3 * H * c + 1, gen, 11)
                                    .to(at::kBFloat16)
                                    .view(-1);
                    auto qkv = flat.narrow(0, misaligned ? 1 : 0, B * L * 3 * H * c)
                                   .view({B, L, 3, H, c})
                                   .to(at::kCUDA);
                    if (misaligned)  // keep the one-element offset on the device too
                        qkv = at::cat({at::zeros({1}, qkv.options()), qkv.view(-1)})
                                  .narrow(0, 1, qkv.numel())
                                  .view({B, L, 3, H, c});
                    qkv.select(2, 0).select(2, 1).select(1, 0).zero_();      // a zero q row
                    qkv.select(2, 1).select(2, 2).select(1, L - 1).zero_();  // a zero k row
                    const auto parts = qkv.permute({2, 0, 3, 1, 4}).unbind(0);
                    const auto& q = parts[0];
                    const auto& k = parts[1];
                    const auto mul =
                        at::rand({1, one_mul ? 1 : H, 1, 1}, gen).mul(9.0).add(1.0).to(at::kCUDA);
                    const auto nq = norm_of(q), nk = norm_of(k);
                    const auto want_q = (q / nq.clamp_min(1e-12)).mul(mul).to(at::kBFloat16);
                    const auto want_k = (k / nk.clamp_min(1e-12)).to(at::kBFloat16);
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
}
