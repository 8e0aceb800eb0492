// core/io/json_read.h: bounded depth, no duplicate keys, regular files only.
#include "core/io/json_read.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <future>

#include "core/accel/accel_config.h"
#include "core/io/checkpoint.h"
#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;

std::string nested(int levels, const std::string& open = "[", const std::string& close = "]") {
    std::string s;
    for (int i = 0; i < levels; ++i) s += open;
    for (int i = 0; i < levels; ++i) s += close;
    return s;
}

TEST(JsonRead, DepthIsBounded) {
    EXPECT_NO_THROW(parse_json(nested(kMaxJsonDepth), "x"));
    EXPECT_NE(error_of([] {
                  parse_json(nested(kMaxJsonDepth + 1), "x");
              }).find("x: JSON nested deeper than 64 levels"),
              std::string::npos);
    // The newcomer's crash: ~100k levels inside an accelerator object (the serializer recursed).
    const std::string deep = R"({"fastvar":)" + nested(100000) + "}";
    EXPECT_NE(error_of<JsonReadError>([&] { parse_json(deep, "x"); }).find("deeper than"),
              std::string::npos);
    EXPECT_NE(error_of<AccelConfigError>([&] {
                  AccelConfig::from_argument(deep);
              }).find("nested deeper than"),
              std::string::npos);
    // Objects count as much as arrays.
    std::string objects;
    for (int i = 0; i < 100; ++i) objects += R"({"a":)";
    objects += "1" + std::string(100, '}');
    EXPECT_NE(error_of([&] { parse_json(objects, "x"); }).find("deeper than"), std::string::npos);
}

TEST(JsonRead, DuplicateKeysAreRefused) {
    EXPECT_NE(error_of([] {
                  parse_json(R"({"steps": 10, "steps": 1000000})", "config");
              }).find("config: key 'steps' appears twice in one object"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  parse_json(R"({"a": {"b": 1, "c": [1, {"b": 2, "b": 3}]}})", "x");
              }).find("key 'b' appears twice"),
              std::string::npos);
    // One key in sibling objects, or in an object and its parent, is fine.
    const auto j = parse_json(R"({"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}], "c": {"a": 4}})", "x");
    EXPECT_EQ(j["b"][1]["a"], 3);
    EXPECT_EQ(j["c"]["a"], 4);
}

TEST(JsonRead, SyntaxAndRangeErrorsNameTheInput) {
    EXPECT_NE(error_of([] {
                  parse_json("{not json", "inline config");
              }).find("inline config is not valid JSON"),
              std::string::npos);
    EXPECT_NE(error_of([] { parse_json(R"({"a": 1e400})", "c"); }).find("c is not valid JSON"),
              std::string::npos);
    EXPECT_NE(error_of([] { parse_json("", "c"); }).find("not valid JSON"), std::string::npos);
}

TEST(JsonRead, OnlyRegularFilesAreRead) {
    testing::TempDir dir;
    const std::string good = dir.file("a.json");
    std::ofstream(good) << R"({"x": 1})";
    EXPECT_EQ(read_json_file(good, "a")["x"], 1);
    EXPECT_NE(error_of([&] { read_json_file(dir.path().string(), "cfg"); }).find("is a folder"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  read_json_file(dir.file("none.json"), "cfg");
              }).find("cfg: cannot open: No such file"),
              std::string::npos);
    EXPECT_NE(error_of([] { read_json_file("/dev/zero", "cfg"); }).find("not a regular file"),
              std::string::npos);
    EXPECT_NE(error_of([&] { read_regular_file(good, "cfg", 3); }).find("too large"),
              std::string::npos);

    // A FIFO with no writer: opening it for reading used to block forever.
    const std::string fifo = dir.file("fifo.json");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    auto refused = std::async(std::launch::async, [&] {
        return error_of([&] { read_json_file(fifo, "cfg"); }) +
               error_of([&] { AccelConfig::from_argument(fifo); });
    });
    ASSERT_EQ(refused.wait_for(std::chrono::seconds(20)), std::future_status::ready)
        << "blocked on a FIFO";
    const std::string msg = refused.get();
    EXPECT_NE(msg.find("cfg is not a regular file"), std::string::npos) << msg;
    EXPECT_NE(msg.find("accelerator config '" + fifo + "' is not a regular file"),
              std::string::npos)
        << msg;
}

// A safetensors header that names one tensor twice: the later one used to win silently.
TEST(JsonRead, SafetensorsHeaderWithATensorTwiceIsRefused) {
    testing::TempDir dir;
    const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    bytes += header + std::string(8, '\0');
    const std::string path = dir.file("dup.safetensors");
    std::ofstream(path, std::ios::binary) << bytes;
    const std::string msg = error_of([&] { load_checkpoint(path); });
    EXPECT_NE(msg.find("key 'w' appears twice"), std::string::npos) << msg;
}

}  // namespace
}  // namespace varscope
