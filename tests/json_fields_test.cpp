// The config readers' field rules (core/io/json_fields.h): unknown keys are errors, and a value
// is read only where the JSON library's conversion keeps its meaning.
#include "core/io/json_fields.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/io/json_read.h"
#include "core/models/kl_vae.h"
#include "core/models/var.h"
#include "core/models/vqvae_config.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using nlohmann::json;
using testing::error_of;

TEST(JsonFields, IntegersTakeWholeNumbersInRangeOnly) {
    EXPECT_TRUE(json_value_fits<int64_t>(json(-3)));
    EXPECT_TRUE(json_value_fits<int>(json(2147483647)));
    EXPECT_FALSE(json_value_fits<int>(json(2147483648LL)));
    EXPECT_FALSE(json_value_fits<int64_t>(json(2.5)));     // the library would read 2
    EXPECT_FALSE(json_value_fits<int64_t>(json(2.0)));     // a float literal, not an integer
    EXPECT_FALSE(json_value_fits<int64_t>(json(2.7e39)));  // undefined behaviour in the library
    EXPECT_FALSE(json_value_fits<int64_t>(json(18446744073709551615ULL)));
    EXPECT_TRUE(json_value_fits<uint64_t>(json(18446744073709551615ULL)));
    EXPECT_FALSE(json_value_fits<uint32_t>(json(-1)));
    EXPECT_FALSE(json_value_fits<int>(json(true)));  // the library would read 1
    EXPECT_FALSE(json_value_fits<bool>(json(1)));
    EXPECT_TRUE(json_value_fits<double>(json(3)));
    EXPECT_FALSE(json_value_fits<double>(json("3")));
    EXPECT_TRUE(json_value_fits<std::vector<int64_t>>(json::array({1, 2, 3})));
    EXPECT_FALSE(json_value_fits<std::vector<int64_t>>(json::array({1, 2.5})));
    EXPECT_FALSE(json_value_fits<std::vector<int64_t>>(json(1)));
}

TEST(JsonFields, ReadFieldNamesTheKeyAndLeavesAbsentOnesAlone) {
    const json j = {{"a", 4}, {"b", 1e40}, {"c", json::array({1, 2})}};
    int64_t a = 0, absent = 7;
    std::vector<int64_t> c;
    read_json_field(j, "a", a, "cfg: ");
    read_json_field(j, "zz", absent, "cfg: ");
    read_json_field(j, "c", c, "cfg: ");
    EXPECT_EQ(a, 4);
    EXPECT_EQ(absent, 7);
    EXPECT_EQ(c, (std::vector<int64_t>{1, 2}));
    int64_t b = 0;
    EXPECT_EQ(error_of<std::invalid_argument>([&] { read_json_field(j, "b", b, "cfg: field "); }),
              "cfg: field 'b' has the wrong type");
    std::string s;
    EXPECT_EQ(error_of<std::invalid_argument>([&] { read_json_field(j, "a", s, "cfg: "); }),
              "cfg: 'a' has the wrong type");
}

TEST(JsonFields, JsonAsNamesWhatItRead) {
    EXPECT_EQ(json_as<int64_t>(json(12), "images"), 12);
    EXPECT_EQ(error_of<std::invalid_argument>([] { (void)json_as<int64_t>(json(1e40), "images"); }),
              "images: expected a whole number, got 1e+40");
}

// fuzz_config_json's findings (tests/fixtures/fuzz/fuzz_config_json/): a KL-VAE config whose
// "ch_mult" holds 2.7e39 and a VQVAE config whose "patch_nums" holds 8.9e80 were cast to int64
// (undefined behaviour, UBSan's reports); now refused, naming the field.
TEST(JsonFields, TheFuzzFindingsAreRefusedWithTheFieldsName) {
    const std::string dir = testing::source_dir() + "/tests/fixtures/fuzz/fuzz_config_json/";
    const json kl = read_json_file(dir + "klvae-ch-mult-2.7e39.json", "the finding");
    EXPECT_EQ(error_of<std::invalid_argument>([&] { (void)KlVaeConfig::from_json(kl["model"]); }),
              "KlVaeConfig: 'ch_mult' has the wrong type");
    const json vq = read_json_file(dir + "vqvae-patch-nums-8.9e80.json", "the finding");
    EXPECT_EQ(error_of<std::invalid_argument>([&] { (void)VqvaeConfig::from_json(vq); }),
              "VQVAE config: field 'patch_nums' has the wrong type");
    EXPECT_EQ(error_of<std::invalid_argument>([&] {
                  (void)VarConfig::from_json(json{{"depth", 16.5}});
              }),
              "VAR config: field 'depth' has the wrong type");
}

}  // namespace
}  // namespace varscope
