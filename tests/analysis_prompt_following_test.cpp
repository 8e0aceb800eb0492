#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/analysis/prompt_following.h"

using namespace varscope;
using namespace varscope::analysis;

namespace {

// Rows 0/1 are one emoji in two styles (their second phrasing names no style, so it is shared),
// row 2 another emoji.
EmojiCaptions three_rows() {
    EmojiCaptions c;
    c.train = {{"a"}, {"b"}, {"c"}};
    c.heldout = {{"heart noto", "icon heart"}, {"heart twemoji", "icon heart"}, {"dog noto"}};
    return c;
}

at::Tensor random_pack(int64_t n, int64_t seed) {
    auto g = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
    return at::randint(0, 256, {n, 3, 8, 8}, g, at::kLong).to(at::kByte);
}

// The index of the prompt with text `t` in r.prompts (a test failure when there is none).
int64_t prompt_index(const PromptFollowing& r, const std::string& t) {
    for (size_t i = 0; i < r.prompts.size(); ++i)
        if (r.prompts[i].text == t) return static_cast<int64_t>(i);
    ADD_FAILURE() << t;
    return 0;
}

}  // namespace

TEST(PromptFollowing, PicksDistinctPhrasingsWithEveryRowTheyDescribe) {
    const auto c = three_rows();
    const at::Tensor labels = at::tensor({7, 7, 3}, at::kLong);
    const auto p = pick_heldout_prompts(c, labels, 4);
    ASSERT_EQ(p.size(), 4u);
    std::set<std::string> texts;
    for (const auto& q : p) {
        texts.insert(q.text);
        EXPECT_EQ(q.label, labels[q.row].item<int64_t>());
        if (q.text == "icon heart") {
            EXPECT_EQ(q.intended_rows, (std::vector<int64_t>{0, 1}));
        } else {
            EXPECT_EQ(q.intended_rows, (std::vector<int64_t>{q.row}));
        }
    }
    EXPECT_EQ(texts.size(), 4u);  // all four distinct phrasings, none twice
    // Deterministic.
    const auto again = pick_heldout_prompts(c, labels, 4);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(again[i].text, p[i].text);
}

TEST(PromptFollowing, RefusesMoreThanThePackHolds) {
    const auto c = three_rows();
    EXPECT_THROW(pick_heldout_prompts(c, at::tensor({7, 7, 3}, at::kLong), 5),
                 std::invalid_argument);
    EXPECT_THROW(pick_heldout_prompts(c, at::tensor({7, 7}, at::kLong), 2), std::invalid_argument);
    EXPECT_THROW(pick_heldout_prompts(c, at::tensor({7, 7, 3}, at::kLong), 0),
                 std::invalid_argument);
}

TEST(PromptFollowing, NearestRowsFindsTheRowANoisyCopyCameFrom) {
    const at::Tensor pack = random_pack(50, 1);
    auto g = at::detail::createCPUGenerator(2);
    const at::Tensor images =
        (pack.index_select(0, at::tensor({37, 4, 12}, at::kLong)).to(at::kFloat) / 255.0 +
         0.02 * at::randn({3, 3, 8, 8}, g))
            .clamp(0, 1);
    const auto nn = nearest_rows(images, pack, /*chunk=*/7);  // chunks cross the rows
    EXPECT_EQ(nn.rows[0].item<int64_t>(), 37);
    EXPECT_EQ(nn.rows[1].item<int64_t>(), 4);
    EXPECT_EQ(nn.rows[2].item<int64_t>(), 12);
    // PSNR of noise 0.02: about 34 dB (clamping lowers the error a little).
    for (int i = 0; i < 3; ++i) {
        EXPECT_GT(nn.psnr[i].item<double>(), 32.0);
        EXPECT_LT(nn.psnr[i].item<double>(), 37.0);
    }
    // An exact copy of a row stored twice goes to the lower row.
    at::Tensor twice = pack.clone();
    twice[30].copy_(twice[10]);
    const auto tie = nearest_rows(twice[30].unsqueeze(0).to(at::kFloat) / 255.0, twice, 16);
    EXPECT_EQ(tie.rows[0].item<int64_t>(), 10);
    EXPECT_THROW(nearest_rows(at::zeros({1, 3, 4, 4}), pack), std::invalid_argument);
}

TEST(PromptFollowing, ScoresFollowsAndClassMatch) {
    const auto c = three_rows();
    const at::Tensor labels = at::tensor({7, 7, 3}, at::kLong);
    const at::Tensor pack = random_pack(3, 5);
    PromptFollowing r;
    r.prompts = pick_heldout_prompts(c, labels, 4);
    // Find the prompts by text.
    auto index_of = [&](const std::string& t) { return prompt_index(r, t); };
    const at::Tensor img = pack.to(at::kFloat) / 255.0;
    // "heart noto" drawn as row 1 (the other style): not following, class matches;
    // "icon heart" drawn as row 1: follows; "dog noto" drawn as row 0: neither.
    const at::Tensor images = at::stack({img[1], img[1], img[0]});
    score_batch(r, images, {index_of("heart noto"), index_of("icon heart"), index_of("dog noto")},
                3, pack, labels);
    ASSERT_EQ(r.samples.size(), 3u);
    EXPECT_FALSE(r.samples[0].follows);
    EXPECT_TRUE(r.samples[0].class_match);
    EXPECT_TRUE(r.samples[1].follows);
    EXPECT_FALSE(r.samples[2].follows);
    EXPECT_FALSE(r.samples[2].class_match);
    EXPECT_EQ(r.samples[1].seed, 3u);
    EXPECT_DOUBLE_EQ(r.follow_rate(), 1.0 / 3.0);
    EXPECT_DOUBLE_EQ(r.class_rate(), 2.0 / 3.0);
    EXPECT_EQ(r.prompts_always(), 1);
    EXPECT_EQ(r.prompts_never(), 2);
    const auto j = to_json(r);
    EXPECT_EQ(j["n_samples"], 3);
    EXPECT_NEAR(j["follow_rate"].get<double>(), 1.0 / 3.0, 1e-12);
    const std::string csv = to_csv(r);
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
    EXPECT_NE(csv.find("\"icon heart\""), std::string::npos);
    EXPECT_THROW(score_batch(r, images, {0}, 0, pack, labels), std::invalid_argument);
}

// The feature judge disagrees with the pixels on purpose: the features put each image beside
// another row than its pixels do, and the classifier says what the test tells it.
TEST(PromptFollowing, FeatureJudgeScoresItsOwnNeighboursAndPredictions) {
    const auto c = three_rows();
    const at::Tensor labels = at::tensor({7, 7, 3}, at::kLong);
    const at::Tensor pack = random_pack(3, 5);
    PromptFollowing r;
    r.prompts = pick_heldout_prompts(c, labels, 4);
    auto index_of = [&](const std::string& t) { return prompt_index(r, t); };
    const at::Tensor img = pack.to(at::kFloat) / 255.0;
    // Pixels: all three images are row 2 ("dog noto"); features: rows 0, 1, 0.
    const at::Tensor images = at::stack({img[2], img[2], img[2]});
    FeatureJudgeBatch judge;
    judge.dataset_features =
        at::tensor({0.0, 0.0, 10.0, 0.0, 0.0, 10.0}, at::kDouble).reshape({3, 2});
    judge.features = at::tensor({0.1, 0.2, 9.0, 1.0, 0.0, 1.0}, at::kDouble).reshape({3, 2});
    judge.predicted = at::tensor({7, 3, 3}, at::kLong);
    score_batch(r, images,
                {index_of("heart noto"), index_of("heart twemoji"), index_of("dog noto")}, 0, pack,
                labels, &judge);
    ASSERT_EQ(r.samples.size(), 3u);
    EXPECT_TRUE(r.judged_by_features);
    // Pixels say: only "dog noto" follows.
    EXPECT_FALSE(r.samples[0].follows);
    EXPECT_TRUE(r.samples[2].follows);
    // Features: row 0 for "heart noto" (follows), row 1 for "heart twemoji" (follows),
    // row 0 for "dog noto" (neither).
    EXPECT_EQ(r.samples[0].feature_row, 0);
    EXPECT_EQ(r.samples[1].feature_row, 1);
    EXPECT_EQ(r.samples[2].feature_row, 0);
    EXPECT_TRUE(r.samples[0].feature_follows);
    EXPECT_TRUE(r.samples[1].feature_follows);
    EXPECT_FALSE(r.samples[2].feature_follows);
    EXPECT_FALSE(r.samples[2].feature_class_match);
    // Classifier: 7 (right), 3 (wrong: a heart was asked for), 3 (right).
    EXPECT_TRUE(r.samples[0].classifier_match);
    EXPECT_FALSE(r.samples[1].classifier_match);
    EXPECT_TRUE(r.samples[2].classifier_match);
    EXPECT_DOUBLE_EQ(r.feature_follow_rate(), 2.0 / 3.0);
    EXPECT_DOUBLE_EQ(r.classifier_rate(), 2.0 / 3.0);
    const auto j = to_json(r);
    EXPECT_NEAR(j["feature_judge"]["classifier_rate"].get<double>(), 2.0 / 3.0, 1e-12);
    EXPECT_EQ(j["samples"][1]["predicted_class"], 3);
    // A batch without the judge cannot join a judged result.
    EXPECT_THROW(score_batch(r, images, {0, 1, 2}, 1, pack, labels), std::invalid_argument);
    // Feature dimensions must agree.
    FeatureJudgeBatch bad = judge;
    bad.dataset_features = at::zeros({3, 5}, at::kDouble);
    EXPECT_THROW(score_batch(r, images, {0, 1, 2}, 1, pack, labels, &bad), std::invalid_argument);
}

TEST(PromptFollowing, WithoutTheJudgeTheJsonSaysSo) {
    const auto c = three_rows();
    const at::Tensor labels = at::tensor({7, 7, 3}, at::kLong);
    const at::Tensor pack = random_pack(3, 5);
    PromptFollowing r;
    r.prompts = pick_heldout_prompts(c, labels, 2);
    score_batch(r, pack.slice(0, 0, 1).to(at::kFloat) / 255.0, {0}, 0, pack, labels);
    EXPECT_TRUE(to_json(r)["feature_judge"].is_null());
    EXPECT_EQ(r.samples[0].feature_row, -1);
}
