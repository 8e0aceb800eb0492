// Sharded safetensors (core/io/checkpoint.h): the writer's split and the index reader's checks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"
#include "core/io/quant_int8.h"
#include "tests/test_util.h"

using namespace varscope;
namespace fs = std::filesystem;

namespace {

// Eight 4 KiB float tensors, one int8 weight with its scales, one tensor larger than a shard.
StateDict sample(std::map<std::string, std::string>& metadata) {
    StateDict full;
    for (int i = 0; i < 8; ++i) full["layer" + std::to_string(i) + ".w"] = at::randn({32, 32});
    full["big"] = at::randn({64, 64});  // 16 KiB
    full["proj.weight"] = at::randn({64, 32});
    std::string q;
    StateDict out = quantize_state_dict_int8(
        full, [](const std::string& n, const at::Tensor&) { return n == "proj.weight"; },
        at::kFloat, q);
    metadata = {{"varscope.config", "{\"x\":1}"}, {kQuantMetadataKey, q}};
    return out;
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const CheckpointError& e) {
        return e.what();
    }
    return "(no error)";
}

bool equal_dicts(const StateDict& a, const StateDict& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [n, t] : a)
        if (!b.count(n) || !at::equal(t, b.at(n))) return false;
    return true;
}

}  // namespace

TEST(SafetensorsIndex, ShardsLoadAsTheOneFileDoesAndKeepScalesWithTheirWeights) {
    varscope::testing::TempDir dir;
    std::map<std::string, std::string> meta;
    const StateDict stored = sample(meta);
    ASSERT_TRUE(stored.count("proj.weight.qscale"));
    save_safetensors(stored, dir.file("one.safetensors"), meta);
    const std::string index =
        save_safetensors_sharded(stored, dir.file("m.safetensors"), meta, 10 * 1024);
    EXPECT_EQ(index, dir.file("m.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(dir.file("m.safetensors")));
    int shards = 0;
    for (const auto& e : fs::directory_iterator(dir.path())) {
        const std::string name = e.path().filename().string();
        if (name.rfind("m-", 0) != 0) continue;
        ++shards;
        const auto names = read_safetensors_names(e.path().string());
        const bool has_big = std::find(names.begin(), names.end(), "big") != names.end();
        // Each shard fits the cap, but a tensor larger than it gets a shard of its own.
        if (has_big)
            EXPECT_EQ(names.size(), 1u) << name;
        else
            EXPECT_LE(fs::file_size(e.path()), 10u * 1024) << name;
        // An int8 weight and its scales are in the same shard.
        const bool w = std::find(names.begin(), names.end(), "proj.weight") != names.end();
        const bool s = std::find(names.begin(), names.end(), "proj.weight.qscale") != names.end();
        EXPECT_EQ(w, s) << name;
        // Each shard reads alone: the metadata, with the int8 description of its own weights.
        const auto m = read_safetensors_metadata(e.path().string());
        EXPECT_EQ(m.at("varscope.config"), meta.at("varscope.config")) << name;
        EXPECT_EQ(m.count(kQuantMetadataKey), w ? 1u : 0u) << name;
    }
    EXPECT_GE(shards, 3);
    EXPECT_TRUE(equal_dicts(load_checkpoint(index), load_checkpoint(dir.file("one.safetensors"))));
    EXPECT_EQ(load_checkpoint(index).at("proj.weight").scalar_type(), at::kFloat);  // expanded
    EXPECT_EQ(read_safetensors_metadata(index), meta);
    // Under the cap: one plain file, and the index of an earlier save of that path is gone
    // (the loaders would open the single file first; the reverse holds too).
    EXPECT_EQ(save_safetensors_sharded(stored, dir.file("m.safetensors"), meta, 1 << 20),
              dir.file("m.safetensors"));
    EXPECT_FALSE(fs::exists(index));
    EXPECT_TRUE(equal_dicts(load_checkpoint(dir.file("m.safetensors")),
                            load_checkpoint(dir.file("one.safetensors"))));
    EXPECT_EQ(save_safetensors_sharded(stored, dir.file("m.safetensors"), meta, 10 * 1024), index);
    EXPECT_FALSE(fs::exists(dir.file("m.safetensors")));
    EXPECT_NE(error_of([&] {
                  save_safetensors_sharded(stored, dir.file("x.bin"), meta, 1024);
              }).find("must end in .safetensors"),
              std::string::npos);
}

TEST(SafetensorsIndex, AShardWithoutWantedTensorsIsNotOpened) {
    varscope::testing::TempDir dir;
    StateDict d;
    for (int i = 0; i < 4; ++i) d["a" + std::to_string(i)] = at::randn({32, 32});
    d["b"] = at::randn({32, 32});
    const auto index = save_safetensors_sharded(d, dir.file("m.safetensors"), {}, 5000);
    fs::remove(dir.file("m-00005-of-00005.safetensors"));  // holds "b" alone
    const auto kept = load_safetensors_index(index, [](const std::string& n) { return n != "b"; });
    EXPECT_EQ(kept.size(), 4u);
    EXPECT_NE(error_of([&] { load_checkpoint(index); }).find("m-00005-of-00005.safetensors"),
              std::string::npos);
}

TEST(SafetensorsIndex, BadIndexesAreNamed) {
    varscope::testing::TempDir dir;
    StateDict d{{"a", at::zeros({2})}, {"b", at::ones({2})}};
    save_safetensors({{"a", d["a"]}}, dir.file("s1.safetensors"));
    save_safetensors({{"b", d["b"]}}, dir.file("s2.safetensors"));
    auto index_with = [&](const nlohmann::json& j) {
        const std::string p = dir.file("t.safetensors.index.json");
        std::ofstream(p) << j.dump();
        return p;
    };
    const auto good =
        index_with({{"weight_map", {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}}});
    EXPECT_TRUE(equal_dicts(load_checkpoint(good), d));
    auto err = [&](const nlohmann::json& j) {
        const auto p = index_with(j);
        return error_of([&] { load_checkpoint(p); });
    };
    EXPECT_NE(err({{"metadata", {}}}).find("no \"weight_map\" object"), std::string::npos);
    EXPECT_NE(err({{"weight_map", {{"a", "../s1.safetensors"}}}}).find("is not a file name"),
              std::string::npos);
    EXPECT_NE(err({{"weight_map", {{"a", 3}}}}).find("shard of 'a' is not a string"),
              std::string::npos);
    EXPECT_NE(err({{"weight_map", {{"a", "s1.safetensors"}, {"c", "s1.safetensors"}}}})
                  .find("lacks tensor 'c'"),
              std::string::npos);
    EXPECT_NE(err({{"weight_map", nlohmann::json::object()}}).find("lists no tensor"),
              std::string::npos);
    EXPECT_NE(err({{"weight_map", {{"a", "missing.safetensors"}}}}).find("missing.safetensors"),
              std::string::npos);
    {
        const std::string p = dir.file("t.safetensors.index.json");
        std::ofstream(p) << "{ not json";
        EXPECT_NE(error_of([&] { load_checkpoint(p); }).find("t.safetensors.index.json"),
                  std::string::npos);
    }
    // A shard holding a tensor the index does not place there.
    save_safetensors(d, dir.file("both.safetensors"));
    EXPECT_NE(err({{"weight_map", {{"a", "both.safetensors"}}}}).find("holds tensor 'b'"),
              std::string::npos);
}
