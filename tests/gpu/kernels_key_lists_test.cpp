// The CUDA key-list kernel (kernels/key_lists.h) equals the LibTorch reference bit for bit, pair
// count included, on the cases of tests/key_lists_oracle.h (the decision scale's Top-k lists, a
// later scale's mapped lists with counts and the block homography, empty rows, sinks beyond the
// sequence, SparVAR's 1024^2 size). Outputs land in NaN-poisoned memory so an unwritten entry
// shows. Skips without CUDA or without kernels for the device.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <limits>
#include <string>

#include "kernels/key_lists.h"
#include "tests/key_lists_oracle.h"

namespace vk = varscope::kernels;

namespace {

bool key_list_kernel_runnable(std::string* why) {
    if (!torch::cuda::is_available()) {
        *why = "no CUDA device";
        return false;
    }
    return vk::cuda_key_lists_supported(
        at::zeros({1, 1, 1}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong)), {}, {}, {},
        why);
}

at::Tensor on_gpu(const at::Tensor& t) {
    return t.defined() ? t.to(at::kCUDA) : at::Tensor();
}

}  // namespace

TEST(KernelsKeyListsGpu, BitwiseTheReference) {
    std::string why;
    if (!key_list_kernel_runnable(&why)) GTEST_SKIP() << why;
    c10::InferenceMode guard;
    at::manual_seed(11);
    for (const auto& c : varscope::testing::key_list_cases()) {
        SCOPED_TRACE(c.name);
        {  // leave NaN-filled blocks for the outputs
            auto junk = at::full({1 << 22}, std::numeric_limits<float>::quiet_NaN(),
                                 at::TensorOptions().device(at::kCUDA));
            torch::cuda::synchronize();
        }
        auto pairs = at::zeros({3}, at::TensorOptions().device(at::kCUDA).dtype(at::kDouble));
        const auto got =
            vk::key_lists(on_gpu(c.source), on_gpu(c.counts), on_gpu(c.blocks), on_gpu(c.map),
                          c.spec, pairs.select(0, 2), 512.0, vk::KernelPath::Cuda);
        auto ref_pairs = at::zeros({3}, at::kDouble);
        const auto want = vk::reference::key_lists(c.source, c.counts, c.blocks, c.map, c.spec,
                                                   ref_pairs.select(0, 2), 512.0);
        EXPECT_TRUE(got.keys.cpu().equal(want.keys));
        EXPECT_TRUE(got.counts.cpu().equal(want.counts));
        EXPECT_TRUE(got.attn_keys.cpu().equal(want.attn_keys));
        EXPECT_TRUE(got.attn_counts.cpu().equal(want.attn_counts));
        EXPECT_TRUE(pairs.cpu().equal(ref_pairs)) << pairs.cpu() << " vs " << ref_pairs;
        EXPECT_GT(ref_pairs[2].item<double>(), 0.0);
    }
}

TEST(KernelsKeyListsGpu, AMapNotPromisedIncreasingTakesTheReference) {
    std::string why;
    if (!key_list_kernel_runnable(&why)) GTEST_SKIP() << why;
    c10::InferenceMode guard;
    at::manual_seed(12);
    // A map with repeats (several source keys on one target key): only the reference handles it.
    const auto [ids, counts] = varscope::testing::ascending_rows(2, 3, 8, 30, false);
    const auto map = at::arange(30, at::kLong).div(2, "floor");
    vk::KeyListsSpec spec;
    spec.sinks = 2;
    spec.kv_len = 15;
    spec.query_block = 4;
    spec.q_len = 12;
    spec.offset_stride = 15;
    EXPECT_FALSE(
        vk::cuda_key_lists_supported(ids.to(at::kCUDA), map.to(at::kCUDA), spec, {}, &why));
    EXPECT_NE(why.find("increasing"), std::string::npos) << why;
    EXPECT_THROW(vk::key_lists(ids.to(at::kCUDA), counts.to(at::kCUDA), {}, map.to(at::kCUDA), spec,
                               {}, 1.0, vk::KernelPath::Cuda),
                 c10::Error);
    const auto got =
        vk::key_lists(ids.to(at::kCUDA), counts.to(at::kCUDA), {}, map.to(at::kCUDA), spec);
    const auto want = vk::reference::key_lists(ids, counts, {}, map, spec);
    EXPECT_TRUE(got.keys.cpu().equal(want.keys));
    EXPECT_TRUE(got.counts.cpu().equal(want.counts));
    // The policy's reference switch too.
    vk::KernelPolicy forced;
    forced.reference = true;
    EXPECT_FALSE(vk::cuda_key_lists_supported(ids.to(at::kCUDA), {}, spec, forced, &why));
    EXPECT_THROW(vk::key_lists(ids.to(at::kCUDA), counts.to(at::kCUDA), {}, {}, spec, {}, 1.0,
                               vk::KernelPath::Cuda, forced),
                 c10::Error);
}
