// The shipped emoji model: loads through the same path as official checkpoints, generates
// deterministically, and makes images that are mostly a white background around a figure.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/resources.h"
#include "tests/emoji_model.h"

using namespace varscope;

TEST(EmbeddedModel, LoadsAndDescribesItself) {
    ASSERT_TRUE(embedded_model_available()) << resource_dir();
    auto pipe = VarPipeline::load(embedded_model_files(), {});
    EXPECT_EQ(pipe.var_config().num_classes, 1911);
    EXPECT_EQ(pipe.var_config().patch_nums.back(), 16);
    EXPECT_EQ(pipe.vae_config().downsample(), 4);  // 64x64 images from 16x16 token maps
    EXPECT_TRUE(pipe.var_config().shared_aln);
}

TEST(EmbeddedModel, SameSeedSameImageAndEmojiLikeOutput) {
    auto pipe = VarPipeline::load(embedded_model_files(), {});
    const auto o = varscope::testing::emoji_options({1891, 581});  // red heart, cat
    auto a = pipe.generate(o), b = pipe.generate(o);
    ASSERT_EQ(a.images.sizes(), (at::IntArrayRef{2, 3, 64, 64}));
    EXPECT_TRUE(a.images.equal(b.images));
    // Emoji sit on white: the corners are near-white, the centre is not.
    for (int i = 0; i < 2; ++i) {
        auto img = a.images[i];
        EXPECT_GT(img.narrow(1, 0, 6).narrow(2, 0, 6).mean().item<float>(), 0.85f) << i;
        EXPECT_LT(img.narrow(1, 24, 16).narrow(2, 24, 16).mean().item<float>(), 0.85f) << i;
    }
    // The heart is red: red channel clearly above green in the centre.
    auto c = a.images[0].narrow(1, 24, 16).narrow(2, 24, 16);
    EXPECT_GT(c[0].mean().item<float>(), c[1].mean().item<float>() + 0.2f);
}
