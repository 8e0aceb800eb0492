#include "core/io/module_binding.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

using namespace varscope;

namespace {
struct Tiny : torch::nn::Module {
    Tiny() { fc = register_module("fc", torch::nn::Linear(3, 2)); }
    torch::nn::Linear fc{nullptr};
};
}  // namespace

TEST(ModuleBinding, CopiesMatchingTensors) {
    Tiny m;
    StateDict d{{"fc.weight", at::ones({2, 3})}, {"fc.bias", at::full({2}, 7.0)}};
    bind_state_dict(m, d, {});
    EXPECT_TRUE(m.fc->weight.equal(at::ones({2, 3})));
    EXPECT_FLOAT_EQ(m.fc->bias[1].item<float>(), 7.f);
}

TEST(ModuleBinding, NamesEveryProblem) {
    Tiny m;
    StateDict d{{"fc.weight", at::ones({3, 3})}, {"extra.thing", at::zeros({1})}};
    try {
        bind_state_dict(m, d, {{}, {}, "toy.pth"});
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("toy.pth"), std::string::npos);
        EXPECT_NE(msg.find("'fc.weight' has shape [3, 3], expected [2, 3]"), std::string::npos)
            << msg;
        EXPECT_NE(msg.find("missing tensor 'fc.bias'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("unexpected tensor 'extra.thing'"), std::string::npos) << msg;
    }
}
