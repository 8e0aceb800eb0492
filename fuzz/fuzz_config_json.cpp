// Model and training configs (train --config, MAR --random, a model file's varscope.config and
// sampling metadata): every reader either returns a config or throws std::invalid_argument.
// The whole text goes to each reader, and each section of a training config to its own.
#include "core/io/json_read.h"
#include "core/models/kl_vae.h"
#include "core/models/mar.h"
#include "core/models/sampling_recommendation.h"
#include "core/models/var.h"
#include "core/models/vqvae_config.h"
#include "core/training/kl_vae_trainer.h"
#include "core/training/mar_trainer.h"
#include "core/training/train_common.h"
#include "fuzz/fuzz_util.h"

namespace {

template <class F>
void expect_config_or_invalid(F&& read) {
    try {
        read();
    } catch (const std::invalid_argument&) {
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
}

void read_all(const nlohmann::json& j) {
    using namespace varscope;
    expect_config_or_invalid([&] { VarConfig::from_json(j).validate(); });
    expect_config_or_invalid([&] { (void)VqvaeConfig::from_json(j); });
    expect_config_or_invalid([&] { MarConfig::from_json(j).validate(); });
    expect_config_or_invalid([&] { KlVaeConfig::from_json(j).validate(); });
    expect_config_or_invalid([&] { (void)TrainConfig::from_json(j); });
    expect_config_or_invalid([&] { (void)MarRecipe::from_json(j); });
    expect_config_or_invalid([&] { (void)KlVaeLoss::from_json(j); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    expect_config_or_invalid([&] { (void)varscope::parse_sampling_recommendation(text); });
    expect_config_or_invalid([&] { (void)varscope::parse_mar_sampling_recommendation(text); });
    nlohmann::json j;
    try {
        j = varscope::parse_json(text, "fuzz");
    } catch (const varscope::JsonReadError&) {
        return 0;
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    read_all(j);
    if (j.is_object())
        for (const char* section : {"model", "train", "recipe", "loss"})
            if (j.contains(section)) read_all(j[section]);
    return 0;
}
