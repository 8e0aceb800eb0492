// The teacher-forced input check of a VAR model: every rule a user's file can break is named
// with the tensor, and a valid input passes through as int64.
#include "core/models/var_teacher_input.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

namespace varscope {
namespace {

using testing::error_of;

VarConfig two_scales() {
    VarConfig c;
    c.num_classes = 10;
    c.vocab_size = 16;
    c.patch_nums = {1, 2};
    return c;
}

StateDict valid_input() {
    return {{"labels", at::tensor({3, -1}, at::kInt)},
            {"tokens.0", at::tensor({0, 15}, at::kInt).view({2, 1})},
            {"tokens.1", at::zeros({2, 4}, at::kLong)}};
}

std::string problem(const StateDict& in) {
    return error_of<std::invalid_argument>(
        [&] { check_var_teacher_input(in, two_scales(), "in.safetensors"); });
}

TEST(VarTeacherInput, AValidInputComesBackAsInt64) {
    const auto in = check_var_teacher_input(valid_input(), two_scales(), "in.safetensors");
    EXPECT_EQ(in.labels.scalar_type(), at::kLong);
    ASSERT_EQ(in.tokens.size(), 2u);
    EXPECT_EQ(in.tokens[0].scalar_type(), at::kLong);
    EXPECT_EQ(in.tokens[0][1][0].item<int64_t>(), 15);
    EXPECT_EQ(in.labels[1].item<int64_t>(), -1);
}

TEST(VarTeacherInput, EachBrokenRuleIsNamedWithTheFileAndTensor) {
    auto in = valid_input();
    in.erase("labels");
    EXPECT_EQ(problem(in), "in.safetensors: no 'labels' tensor");

    in = valid_input();
    in["labels"] = at::tensor({10, 11});  // 11 > num_classes (10 = unconditional)
    EXPECT_NE(problem(in).find("'labels' values must be in [-1, 10]"), std::string::npos);

    in = valid_input();
    in["tokens.1"] = at::zeros({2, 4}, at::kFloat);
    EXPECT_NE(problem(in).find("'tokens.1' must hold integers"), std::string::npos);

    in = valid_input();
    in["tokens.1"] = at::full({2, 4}, 16, at::kLong);  // vocab 16: ids 0..15
    EXPECT_NE(problem(in).find("'tokens.1' values must be in [0, 15]"), std::string::npos);

    in = valid_input();
    in["tokens.1"] = at::zeros({2, 5}, at::kLong);
    EXPECT_NE(problem(in).find("'tokens.1' must be (2, 4)"), std::string::npos);

    in = valid_input();
    in.erase("tokens.0");
    EXPECT_NE(problem(in).find("no 'tokens.0'"), std::string::npos);

    in = valid_input();
    in["tokens.2"] = at::zeros({2, 9}, at::kLong);
    EXPECT_NE(problem(in).find("more token maps than the model's 2 scales"), std::string::npos);

    in = valid_input();
    in["labels"] = at::zeros({0}, at::kLong);
    EXPECT_NE(problem(in).find("'labels' must be (B) with B >= 1"), std::string::npos);
}

}  // namespace
}  // namespace varscope
