// The loops' grouping rule (core/sampling/grouped_step.h): the hooks' group size clamped to the
// scales left, segments packed in order (into the graphs' buffers only with graphs), the
// block-causal mask inside a group and its extension over earlier keys and selected rows.
#include "core/sampling/grouped_step.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/models/var.h"

using namespace varscope;

namespace {

VarConfig config() {
    VarConfig c;
    c.patch_nums = {1, 2, 3, 4, 6};
    return c;
}

struct Group : SamplingHooks {
    int64_t size = 1;
    int64_t group_size(const ScaleContext&) override { return size; }
};

ScaleContext context(const VarConfig& c, int64_t si, const ExecPolicy& exec) {
    return ScaleContext{c, si, c.patch_nums[si], 1, c.scale_begin(si), at::Tensor(), {}, 0, exec};
}

}  // namespace

TEST(GroupedStep, SegmentsFollowTheHooksGroupClampedToTheScalesLeft) {
    const auto c = config();
    const ExecPolicy exec;
    auto ctx = context(c, 2, exec);
    plan_step_segments(ctx, nullptr, 5);
    ASSERT_EQ(ctx.segments.size(), 1u);
    Group hooks;
    hooks.size = 9;  // more than the scales left: 2, 3, 4
    auto grouped = context(c, 2, exec);
    plan_step_segments(grouped, &hooks, 5);
    ASSERT_EQ(grouped.segments.size(), 3u);
    for (int64_t g = 0; g < 3; ++g) {
        EXPECT_EQ(grouped.segments[g].scale, 2 + g);
        EXPECT_EQ(grouped.segments[g].patch_num, c.patch_nums[2 + g]);
        EXPECT_EQ(grouped.segments[g].token_begin, c.scale_begin(2 + g));
    }
    auto cut = context(c, 2, exec);  // scale skipping: only scales up to 3 run
    plan_step_segments(cut, &hooks, 4);
    EXPECT_EQ(cut.segments.size(), 2u);
    hooks.size = 0;  // at least one scale
    auto one = context(c, 1, exec);
    plan_step_segments(one, &hooks, 5);
    EXPECT_EQ(one.segments.size(), 1u);

    // Offsets follow the rows; the layout names each segment's scale and row count.
    grouped.segments[1].rows = at::tensor({0, 4, 8}, at::kInt);
    const auto layout = place_step_segments(grouped, at::kCPU, nullptr);
    EXPECT_EQ(layout, (std::vector<int64_t>{2, -1, 3, 3, 4, -1}));
    EXPECT_EQ(grouped.segments[1].rows.scalar_type(), at::kLong);
    EXPECT_EQ(grouped.segments[1].offset, 9);
    EXPECT_EQ(grouped.segments[2].offset, 12);
    EXPECT_EQ(grouped.packed_length(), 12 + 36);
    grouped.segments[2].rows = at::zeros({0}, at::kLong);
    EXPECT_THROW(place_step_segments(grouped, at::kCPU, nullptr), c10::Error);
}

TEST(GroupedStep, MasksAreBlockCausalInsideTheGroupAndOpenToEarlierKeys) {
    const auto c = config();
    const ExecPolicy exec;
    Group hooks;
    hooks.size = 2;
    auto ctx = context(c, 1, exec);  // scales 1 (4 rows) and 2 (9 rows)
    EXPECT_FALSE(step_group_mask(context(c, 1, exec), at::TensorOptions(), nullptr).defined());
    plan_step_segments(ctx, &hooks, 5);
    place_step_segments(ctx, at::kCPU, nullptr);
    const auto m = step_group_mask(ctx, at::TensorOptions().dtype(at::kFloat), nullptr);
    ASSERT_EQ(m.sizes(), (std::vector<int64_t>{13, 13}));
    for (int64_t i = 0; i < 13; ++i)
        for (int64_t j = 0; j < 13; ++j) {
            const bool visible = (j < 4) || (i >= 4);
            EXPECT_EQ(std::isinf(m[i][j].item<float>()), !visible) << i << "," << j;
        }
    // A block computing rows {0, 5} of the step, with 1 earlier key in the cache (the step's
    // own keys are the newest: the selected rows' keys, 2 of them).
    const auto rows = at::tensor({0, 5}, at::kLong);
    const auto b = block_group_mask(m, rows, 3);
    ASSERT_EQ(b.sizes(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(b[0][0].item<float>(), 0.0f);          // earlier key
    EXPECT_EQ(b[0][1].item<float>(), 0.0f);          // row 0 sees itself
    EXPECT_TRUE(std::isinf(b[0][2].item<float>()));  // row 0 (scale 1) not row 5 (scale 2)
    EXPECT_EQ(b[1][1].item<float>() + b[1][2].item<float>(), 0.0f);  // row 5 sees both
    EXPECT_THROW(block_group_mask(m, at::zeros({2, 2}, at::kLong), 15), c10::Error);
    EXPECT_THROW(block_group_mask(m, {}, 5), c10::Error);  // fewer keys than the step's rows
}

// The grouped step's attention without the mask (one SDPA per scale over its visible prefix)
// is the masked attention: same values within fp32 rounding, and the segment boundaries are
// where the mask puts them (a key of a later scale changes nothing before it).
TEST(GroupedStep, PerScaleAttentionIsTheMaskedAttention) {
    const auto c = config();
    const ExecPolicy exec;
    Group hooks;
    hooks.size = 3;
    auto ctx = context(c, 2, exec);  // scales 2, 3, 4: 9 + 16 + 36 = 61 rows
    plan_step_segments(ctx, &hooks, 5);
    place_step_segments(ctx, at::kCPU, nullptr);
    const int64_t earlier = 5, rows = 61;
    at::manual_seed(3);
    const auto q = at::randn({2, 3, rows, 8});
    auto k = at::randn({2, 3, earlier + rows, 8});
    auto v = at::randn({2, 3, earlier + rows, 8});
    const auto step = step_group_mask(ctx, at::TensorOptions().dtype(at::kFloat), nullptr);
    const auto masked = attention_sdpa(q, k, v, 0.3, block_group_mask(step, {}, earlier + rows));
    const auto split = grouped_attention_sdpa(ctx.segments, q, k, v, 0.3);
    ASSERT_EQ(split.sizes(), masked.sizes());
    EXPECT_LT((split - masked).abs().max().item<float>(), 1e-5f);
    // Changing the keys of the last scale moves only the last scale's rows.
    k.narrow(2, earlier + 25, 36).add_(1.0);
    const auto moved = grouped_attention_sdpa(ctx.segments, q, k, v, 0.3);
    EXPECT_TRUE(at::equal(moved.narrow(2, 0, 25), split.narrow(2, 0, 25)));
    EXPECT_FALSE(at::allclose(moved.narrow(2, 25, 36), split.narrow(2, 25, 36)));
    EXPECT_THROW(grouped_attention_sdpa(ctx.segments, q.narrow(2, 0, 60), k, v, 0.3), c10::Error);
}

// The block mask is built only where something reads it; per-scale SDPA needs none.
TEST(GroupedStep, BlockMaskOnlyWhereSomethingReadsIt) {
    const auto step = at::zeros({4, 4});
    const auto rows = at::arange(2, at::kLong);
    EXPECT_FALSE(block_needs_group_mask({}, rows, true, true));     // not a grouped step
    EXPECT_FALSE(block_needs_group_mask(step, {}, false, false));   // grouped_attention_sdpa
    EXPECT_TRUE(block_needs_group_mask(step, rows, false, false));  // some rows: masked SDPA
    EXPECT_TRUE(block_needs_group_mask(step, {}, true, false));     // eager attention
    EXPECT_TRUE(block_needs_group_mask(step, {}, false, true));     // a probe may read it
}
