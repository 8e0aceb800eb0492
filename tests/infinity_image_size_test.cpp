// The image size an Infinity model samples at by default: its export's metadata, else its BSQ
// VAE's training scales, else the official 1M; malformed entries name the entry.
#include "core/models/infinity_image_size.h"

#include <gtest/gtest.h>

#include "core/models/infinity_schedule.h"
#include "tests/error_of.h"

using namespace varscope;
using varscope::testing::error_of;

TEST(InfinityImageSize, TheLatentSideGivesTheSmallestBudgetEndingThere) {
    for (const auto& px : infinity_pixel_budgets()) {
        const int64_t side = infinity_schedule(1.0, px).scales.back()[0];
        EXPECT_EQ(pixels_for_latent_side(side), px) << side;
    }
    EXPECT_EQ(pixels_for_latent_side(15), std::nullopt);
    EXPECT_EQ(pixels_for_latent_side(0), std::nullopt);
}

TEST(InfinityImageSize, TheTrainingMetadataWinsOverTheVaeScales) {
    const auto a = infinity_image_size_from(R"({"pixels": "0.25M", "h_div_w": 1.0, "t5": {}})",
                                            "[1, 2, 3, 4, 6, 8, 10, 13, 16]");
    EXPECT_EQ(a.pixels, "0.25M");
    EXPECT_EQ(a.source, "metadata");
    const auto b = infinity_image_size_from("", "[1,2,3,4,6,8,10,13,16]");
    EXPECT_EQ(b.pixels, "0.06M");
    EXPECT_EQ(b.source, "vae scales");
    // Metadata without "pixels" (an older export) falls through to the VAE.
    EXPECT_EQ(infinity_image_size_from(R"({"t5": {}})", "[1,2,4,8,16]").pixels, "0.06M");
    const auto c = infinity_image_size_from("", "");
    EXPECT_EQ(c.pixels, "1M");
    EXPECT_EQ(c.source, "official");
    // A VAE trained on a grid no square schedule ends at: the official size.
    EXPECT_EQ(infinity_image_size_from("", "[1, 2, 5]").pixels, "1M");
}

TEST(InfinityImageSize, MalformedEntriesNameTheField) {
    EXPECT_NE(error_of([] {
                  infinity_image_size_from(R"({"pixels": 5})", "");
              }).find("varscope.infinity_train.pixels"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  infinity_image_size_from(R"({"pixels": "2M"})", "");
              }).find("varscope.infinity_train"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  infinity_image_size_from(R"({"pixels": "1M", "h_div_w": -1})", "");
              }).find("h_div_w"),
              std::string::npos);
    EXPECT_NE(
        error_of([] { infinity_image_size_from("", R"({"a": 1})"); }).find("varscope.bsq_scales"),
        std::string::npos);
    EXPECT_NE(
        error_of([] { infinity_image_size_from("not json", ""); }).find("varscope.infinity_train"),
        std::string::npos);
}
