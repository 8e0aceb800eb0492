// Checkpoint readers: safetensors round trips, torch.save fixtures (tests/fixtures, written by
// make_pth_fixtures.py with torch 2.11.0), and malformed or hostile input that must be refused
// with a CheckpointError instead of crashing or running anything.
#include "core/io/checkpoint.h"

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/io/pickle_reader.h"
#include "tests/test_util.h"

using namespace varscope;
using varscope::testing::TempDir;

namespace {

std::string fixture(const std::string& name) {
    return varscope::testing::source_dir() + "/tests/fixtures/" + name;
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <size_t N>
std::string bytes_of(const char (&literal)[N]) {
    return std::string(literal, N - 1);
}

// Runs `load` and returns the CheckpointError's message; fails the test on any other outcome.
template <typename F>
std::string checkpoint_error(F&& load) {
    try {
        load();
    } catch (const CheckpointError& e) {
        return e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "expected CheckpointError, got another exception: " << e.what();
        return {};
    }
    ADD_FAILURE() << "expected CheckpointError, but loading succeeded";
    return {};
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

void expect_same(const at::Tensor& actual, const at::Tensor& expected, const std::string& name) {
    ASSERT_TRUE(actual.defined()) << name;
    EXPECT_EQ(actual.scalar_type(), expected.scalar_type()) << name;
    EXPECT_EQ(actual.sizes(), expected.sizes()) << name;
    const at::Tensor a = actual.contiguous();
    const at::Tensor e = expected.contiguous();
    ASSERT_EQ(a.nbytes(), e.nbytes()) << name;
    if (a.nbytes() > 0) {
        EXPECT_EQ(std::memcmp(a.data_ptr(), e.data_ptr(), a.nbytes()), 0) << name << " differs";
    }
}

std::vector<std::string> keys(const StateDict& d) {
    std::vector<std::string> out;
    for (const auto& [k, v] : d) out.push_back(k);
    return out;
}

// Records of a torch.save archive that carry data (not the writer's bookkeeping).
using Records = std::vector<std::pair<std::string, std::string>>;

Records read_archive(const std::string& path) {
    caffe2::serialize::PyTorchStreamReader reader(path);
    Records out;
    for (const std::string& name : reader.getAllRecords()) {
        if (name != "data.pkl" && name != "byteorder" && name.rfind("data/", 0) != 0) continue;
        auto [data, size] = reader.getRecord(name);
        out.emplace_back(name, std::string(static_cast<const char*>(data.get()), size));
    }
    return out;
}

void write_archive(const std::string& path, const Records& records) {
    caffe2::serialize::PyTorchStreamWriter writer(path);
    for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
    writer.writeEndOfFile();
}

Records with_record(Records records, const std::string& name, const std::string& bytes) {
    for (auto& [n, b] : records) {
        if (n == name) {
            b = bytes;
            return records;
        }
    }
    records.emplace_back(name, bytes);
    return records;
}

at::Tensor f32_arange(int64_t n) {
    return at::arange(n, at::kFloat);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// safetensors
// ---------------------------------------------------------------------------------------------

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
    TempDir dir;
    StateDict tensors{
        {"f32", f32_arange(6).reshape({2, 3}) * 0.5},
        {"f16", (f32_arange(5) - 2.5).to(at::kHalf)},
        {"bf16", (f32_arange(4) * 0.25).to(at::kBFloat16)},
        {"f64", at::arange(3, at::kDouble) / 3.0},
        {"i64", at::arange(4, at::kLong) * int64_t(1000000007) - int64_t(3)},
        {"i32", at::arange(4, at::kInt) - 2},
        {"i16", at::arange(4, at::kShort) * 1000},
        {"i8", at::arange(-3, 3, at::kChar)},
        {"u8", at::arange(250, 256, at::kInt).to(at::kByte)},
        {"bool", at::arange(5, at::kInt).remainder(2).to(at::kBool)},
        {"scalar", at::scalar_tensor(7.0, at::kFloat)},
        {"empty", at::zeros({0, 3}, at::kFloat)},
        {"transposed", f32_arange(6).reshape({2, 3}).t()},  // saved as a contiguous copy
    };
    const std::map<std::string, std::string> metadata{{"format", "pt"},
                                                      {"note", "caf\xc3\xa9 \"quoted\""}};
    const std::string path = dir.file("all.safetensors");
    save_safetensors(tensors, path, metadata);

    const StateDict loaded = load_safetensors(path);
    EXPECT_EQ(keys(loaded), keys(tensors));
    for (const auto& [name, t] : tensors) expect_same(loaded.at(name), t, name);
    EXPECT_EQ(read_safetensors_metadata(path), metadata);
    EXPECT_EQ(keys(load_checkpoint(path)), keys(tensors));  // dispatch picks safetensors

    // The data section starts 8-byte aligned, as the reference writer does.
    const std::string bytes = read_bytes(path);
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    EXPECT_EQ(header_len % 8, 0u);
}

TEST(Safetensors, WithoutMetadataGivesEmptyMap) {
    TempDir dir;
    const std::string path = dir.file("plain.safetensors");
    save_safetensors({{"x", f32_arange(3)}}, path);
    EXPECT_TRUE(read_safetensors_metadata(path).empty());
    expect_same(load_safetensors(path).at("x"), f32_arange(3), "x");
}

TEST(Safetensors, RefusesUnsupportedDtypeOnSave) {
    TempDir dir;
    const std::string msg = checkpoint_error([&] {
        save_safetensors({{"c", at::zeros({2}, at::kComplexFloat)}}, dir.file("c.safetensors"));
    });
    EXPECT_TRUE(contains(msg, "'c'")) << msg;
}

namespace {
std::string safetensors_bytes(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + header + data;
}
}  // namespace

TEST(Safetensors, HeaderLengthBeyondFileIsAnError) {
    TempDir dir;
    const std::string path = dir.file("long.safetensors");
    std::string bytes = safetensors_bytes("{}", "");
    bytes[0] = static_cast<char>(0xe8);  // claims a 1000-byte header
    bytes[1] = 0x03;
    write_bytes(path, bytes);
    const std::string msg = checkpoint_error([&] { load_safetensors(path); });
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_TRUE(contains(msg, "header length 1000 exceeds the file size")) << msg;
}

TEST(Safetensors, RejectsInvalidHeaders) {
    TempDir dir;
    const std::string data(16, '\0');
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
         "overlapping"},
        {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", "ends at data byte 24"},
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", "gap"},
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
         "8 bytes after the last tensor"},
        {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", "do not match"},
        {R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", "non-negative"},
        {R"({"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", "unsupported dtype 'Q7'"},
        {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", "do not match"},
        {R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
         "not a string"},
        {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", "not valid JSON"},
        {R"([1,2])", "not a JSON object"},
        {R"({"a":{"dtype":"BOOL","shape":[16],"data_offsets":[0,16]}})", ""},  // valid: zeros
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string path = dir.file("bad" + std::to_string(i) + ".safetensors");
        write_bytes(path, safetensors_bytes(cases[i].first, data));
        if (cases[i].second.empty()) {
            EXPECT_NO_THROW(load_safetensors(path)) << cases[i].first;
            continue;
        }
        const std::string msg = checkpoint_error([&] { load_safetensors(path); });
        EXPECT_TRUE(contains(msg, cases[i].second)) << cases[i].first << "\n -> " << msg;
    }
}

TEST(Safetensors, RejectsBoolBytesOtherThanZeroAndOne) {
    TempDir dir;
    const std::string path = dir.file("bool.safetensors");
    write_bytes(path,
                safetensors_bytes(R"({"m":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}})",
                                  std::string("\x00\x01\x02\x00\x00\x00\x00\x00", 8)));
    EXPECT_TRUE(contains(checkpoint_error([&] { load_safetensors(path); }), "other than 0 and 1"));
}

TEST(Safetensors, TruncatedFilesThrow) {
    TempDir dir;
    const std::string full_path = dir.file("full.safetensors");
    save_safetensors({{"a", f32_arange(16)}, {"b", at::arange(8, at::kLong)}}, full_path,
                     {{"k", "v"}});
    const std::string full = read_bytes(full_path);
    for (size_t len = 0; len < full.size(); ++len) {
        const std::string path = dir.file("cut.safetensors");
        write_bytes(path, full.substr(0, len));
        checkpoint_error([&] { load_checkpoint(path); });
    }
}

// ---------------------------------------------------------------------------------------------
// torch.save (.pth)
// ---------------------------------------------------------------------------------------------

TEST(Pth, LoadsStateDictFixture) {
    const StateDict d = load_pth(fixture("state_dict.pth"));
    EXPECT_EQ(keys(d), (std::vector<std::string>{"idx", "mask", "shared_a", "shared_b",
                                                 "transposed", "w16", "w32", "wbf16"}));
    expect_same(d.at("w32"), f32_arange(12).reshape({3, 4}) * 0.5, "w32");
    expect_same(d.at("w16"), (f32_arange(6) - 2.5).to(at::kHalf), "w16");
    expect_same(d.at("wbf16"), (f32_arange(8) * 0.25).to(at::kBFloat16), "wbf16");
    expect_same(d.at("idx"), at::arange(5, at::kLong) * int64_t(1000000007), "idx");
    expect_same(d.at("mask"), at::arange(4, at::kLong).remainder(2).eq(1), "mask");

    const at::Tensor& t = d.at("transposed");
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(t.strides(), (std::vector<int64_t>{1, 3}));  // kept as the same strided view
    expect_same(t, f32_arange(6).reshape({2, 3}).t(), "transposed");

    // Views of one storage stay views of one storage.
    const at::Tensor& a = d.at("shared_a");
    const at::Tensor& b = d.at("shared_b");
    expect_same(a, f32_arange(4), "shared_a");
    expect_same(b, (f32_arange(6) + 2).reshape({2, 3}), "shared_b");
    EXPECT_TRUE(a.storage().is_alias_of(b.storage()));
    EXPECT_EQ(b.storage_offset(), 2);
    a[3].fill_(-1.0);
    EXPECT_EQ(b[0][1].item<float>(), -1.0f);
}

TEST(Pth, LoadsMarLikeCheckpointSkippingOpaqueObjects) {
    const StateDict d = load_checkpoint(fixture("mar_like.pth"));
    EXPECT_EQ(keys(d), (std::vector<std::string>{"history.0", "history.1", "model.head.bias",
                                                 "model.head.weight", "model_ema.head.bias",
                                                 "model_ema.head.weight"}));
    expect_same(d.at("model.head.weight"), f32_arange(6).reshape({2, 3}), "nn.Parameter");
    expect_same(d.at("history.1"), at::arange(3, at::kInt) * 2, "history.1");

    const StateDict ema = select_prefix(d, "model_ema");
    EXPECT_EQ(keys(ema), (std::vector<std::string>{"head.bias", "head.weight"}));
    expect_same(ema.at("head.weight"), f32_arange(6).reshape({2, 3}) + 100, "ema weight");
    expect_same(ema.at("head.bias"), f32_arange(2) + 100, "ema bias");
}

TEST(Pth, RefusesMaliciousPickleWithoutRunningIt) {
    const std::string marker = "/tmp/varscope_pth_fixture_pwned";  // see make_pth_fixtures.py
    std::filesystem::remove(marker);
    const std::string path = fixture("malicious.pth");
    const std::string msg = checkpoint_error([&] { load_checkpoint(path); });
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_TRUE(contains(msg, "refusing to call global 'posix.system'")) << msg;
    EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Pth, TruncatedCopiesThrow) {
    TempDir dir;
    const std::string full = read_bytes(fixture("state_dict.pth"));
    ASSERT_GT(full.size(), 1000u);
    for (size_t len = 0; len < full.size(); len += 13) {
        const std::string path = dir.file("cut.pth");
        write_bytes(path, full.substr(0, len));
        const std::string msg = checkpoint_error([&] { load_checkpoint(path); });
        EXPECT_TRUE(contains(msg, path)) << msg;
    }
}

TEST(Pth, TruncatedOrMutatedPickleNeverCrashes) {
    TempDir dir;
    const Records records = read_archive(fixture("state_dict.pth"));
    std::string pkl;
    for (const auto& [name, bytes] : records) {
        if (name == "data.pkl") pkl = bytes;
    }
    ASSERT_FALSE(pkl.empty());
    const std::string path = dir.file("fuzz.pth");
    for (size_t len = 0; len < pkl.size(); ++len) {  // no STOP: every prefix is an error
        write_archive(path, with_record(records, "data.pkl", pkl.substr(0, len)));
        checkpoint_error([&] { load_pth(path); });
    }
    std::mt19937 rng(1234);
    int loaded = 0;
    for (int round = 0; round < 400; ++round) {
        std::string mutated = pkl;
        for (int k = 0; k < 1 + round % 3; ++k)
            mutated[rng() % mutated.size()] = static_cast<char>(rng() & 0xff);
        write_archive(path, with_record(records, "data.pkl", mutated));
        try {
            load_pth(path);
            ++loaded;
        } catch (const CheckpointError&) {
        }
    }
    EXPECT_LT(loaded, 400);  // most mutations must be caught
}

TEST(Pth, StorageRecordShorterThanTensorIsAnError) {
    TempDir dir;
    const Records records = read_archive(fixture("state_dict.pth"));
    const std::string path = dir.file("short.pth");
    write_archive(path,
                  with_record(records, "data/0", std::string(20, '\0')));  // w32 needs 48 bytes
    const std::string msg = checkpoint_error([&] { load_pth(path); });
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_TRUE(contains(msg, "'data/0' holds 20 bytes")) << msg;
}

TEST(Pth, ArchiveProblemsAreNamed) {
    TempDir dir;
    const Records records = read_archive(fixture("state_dict.pth"));
    const std::string path = dir.file("x.pth");
    // L = []; 40 times L = [L, L]: 2**40 paths through one small object graph.
    std::string dag = bytes_of("\x80\x02]");
    for (int i = 0; i < 40; ++i)
        dag += bytes_of(
            "q\x00"
            "0]h\x00"
            "ah\x00"
            "a");
    dag += ".";
    const std::vector<std::pair<Records, std::string>> cases = {
        {{{"weights.bin", "abc"}}, "no data.pkl"},
        {with_record(records, "byteorder", "big"), "only little-endian"},
        {with_record(records, "data.pkl", bytes_of("\x80\x02\xff")),
         "unknown or unsupported opcode 0xff"},
        {with_record(records, "data.pkl", bytes_of("\x80\x02.")), "stack underflow"},
        {with_record(records, "data.pkl", bytes_of("\x80\x02]e.")), "no MARK"},
        {with_record(records, "data.pkl", bytes_of("\x80\x02h\x05.")),
         "memo entry 5 was never stored"},
        // {"a": d} with d == itself: a cycle, stopped by the nesting limit.
        {with_record(records, "data.pkl",
                     bytes_of("\x80\x02}q\x00X\x01\x00\x00\x00"
                              "aq\x01h\x00s.")),
         "nested deeper"},
        {with_record(records, "data.pkl", dag), "too many nested containers"},
    };
    for (const auto& [recs, expected] : cases) {
        write_archive(path, recs);
        const std::string msg = checkpoint_error([&] { load_pth(path); });
        EXPECT_TRUE(contains(msg, path)) << msg;
        EXPECT_TRUE(contains(msg, expected)) << "expected '" << expected << "' in: " << msg;
    }
}

// ---------------------------------------------------------------------------------------------
// The pickle interpreter on its own
// ---------------------------------------------------------------------------------------------

namespace {
using pickle::Value;
using pickle::ValuePtr;

const ValuePtr& dict_get(const ValuePtr& d, const std::string& key) {
    for (const auto& [k, v] : d->entries) {
        if (k->is(Value::Kind::String) && k->text == key) return v;
    }
    throw std::out_of_range(key);
}

// {"a": [1, -2, 3.5, True, None, 2**40, -2**63, 2**70], "b": (b"x\xffy", "hé"), "s": {7}}
void expect_sample(const std::string& bytes) {
    pickle::Unpickler u(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), {});
    const ValuePtr root = u.load();
    ASSERT_TRUE(root->is(Value::Kind::Dict));
    const ValuePtr a = dict_get(root, "a");
    ASSERT_EQ(a->items.size(), 8u);
    EXPECT_EQ(a->items[0]->integer, 1);
    EXPECT_EQ(a->items[1]->integer, -2);
    EXPECT_EQ(a->items[2]->real, 3.5);
    EXPECT_TRUE(a->items[3]->is(Value::Kind::Bool) && a->items[3]->boolean);
    EXPECT_TRUE(a->items[4]->is(Value::Kind::None));
    EXPECT_EQ(a->items[5]->integer, int64_t(1) << 40);
    EXPECT_EQ(a->items[6]->integer, INT64_MIN);
    EXPECT_TRUE(a->items[7]->is(Value::Kind::Opaque));  // beyond int64
    const ValuePtr b = dict_get(root, "b");
    ASSERT_TRUE(b->is(Value::Kind::Tuple));
    EXPECT_TRUE(b->items[0]->is(Value::Kind::Bytes));
    EXPECT_EQ(b->items[0]->text, std::string("x\xffy"));
    EXPECT_EQ(b->items[1]->text, "h\xc3\xa9");
    const ValuePtr s = dict_get(root, "s");
    ASSERT_TRUE(s->is(Value::Kind::Set));
    EXPECT_EQ(s->items.at(0)->integer, 7);
}

std::string unpickle_error(const std::string& bytes) {
    try {
        pickle::Unpickler u(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), {});
        u.load();
    } catch (const pickle::PickleError& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a PickleError";
    return {};
}
}  // namespace

TEST(PthPickle, ReadsProtocol2AndProtocol4) {
    // pickle.dumps(sample, protocol=2) and protocol=4, from CPython 3.11.
    expect_sample(bytes_of(
        "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x4a\xfe"
        "\xff\xff\xff\x47"
        "\x40\x0c\x00\x00\x00\x00\x00\x00\x88\x4e\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x08\x00\x00"
        "\x00\x00\x00\x00"
        "\x00\x80\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x65\x58\x01\x00\x00\x00\x62\x71\x03"
        "\x63\x5f\x63\x6f"
        "\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x04\x58\x04\x00\x00\x00\x78\xc3\xbf"
        "\x79\x71\x05\x58"
        "\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x06\x86\x71\x07\x52\x71\x08\x58\x03\x00\x00"
        "\x00\x68\xc3\xa9"
        "\x71\x09\x86\x71\x0a\x58\x01\x00\x00\x00\x73\x71\x0b\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69"
        "\x6e\x5f\x5f\x0a"
        "\x73\x65\x74\x0a\x71\x0c\x5d\x71\x0d\x4b\x07\x61\x85\x71\x0e\x52\x71\x0f\x75\x2e"));
    expect_sample(bytes_of(
        "\x80\x04\x95\x58\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b"
        "\x01\x4a\xfe\xff"
        "\xff\xff\x47\x40\x0c\x00\x00\x00\x00\x00\x00\x88\x4e\x8a\x06\x00\x00\x00\x00\x00\x01\x8a"
        "\x08\x00\x00\x00"
        "\x00\x00\x00\x00\x80\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x65\x8c\x01\x62\x94\x43"
        "\x03\x78\xff\x79"
        "\x94\x8c\x03\x68\xc3\xa9\x94\x86\x94\x8c\x01\x73\x94\x8f\x94\x28\x4b\x07\x90\x75\x2e"));
}

TEST(PthPickle, SurvivesSelfReferenceAndReportsMalformedInput) {
    // l = []; l.append(l): a cycle that the Unpickler must free without recursing forever.
    {
        const std::string bytes = bytes_of(
            "\x80\x02]q\x00h\x00"
            "a.");
        pickle::Unpickler u(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), {});
        const ValuePtr l = u.load();
        ASSERT_EQ(l->items.size(), 1u);
        EXPECT_EQ(l->items[0].get(), l.get());
    }
    EXPECT_TRUE(contains(unpickle_error(bytes_of("\x80\x02X\xff\xff\x00\x00"
                                                 "ab.")),
                         "truncated"));
    EXPECT_TRUE(contains(unpickle_error(bytes_of("\x80\x02K\x01")), "no STOP"));
    EXPECT_TRUE(contains(unpickle_error(bytes_of("\x80\x02K\x01R.")), "stack underflow"));
    EXPECT_TRUE(contains(unpickle_error(bytes_of("\x80\x02K\x01K\x02R.")), "not a tuple"));
    EXPECT_TRUE(contains(unpickle_error(bytes_of("\x80\x02K\x01)R.")), "calling a int"));
    EXPECT_TRUE(contains(unpickle_error(bytes_of("\x80\x02"
                                                 "cbuiltins\neval\n)R.")),
                         "'builtins.eval'"));
    EXPECT_TRUE(contains(unpickle_error(bytes_of("\x80\x02K\x01Q.")), "persistent id"));
    EXPECT_TRUE(
        contains(unpickle_error(bytes_of("\x80\x02K\x01K\x02K\x03s.")), "setting items on a int"));
    EXPECT_TRUE(contains(unpickle_error(bytes_of("\x80\x02"
                                                 "cos\nsys")),
                         "unterminated line"));
}

// ---------------------------------------------------------------------------------------------
// load_checkpoint dispatch and select_prefix
// ---------------------------------------------------------------------------------------------

TEST(Checkpoint, NonexistentPathCannotBeOpened) {
    const std::string path = "/nonexistent/dir/model.pth";
    const std::string msg = checkpoint_error([&] { load_checkpoint(path); });
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_TRUE(contains(msg, "cannot open")) << msg;
    EXPECT_TRUE(contains(checkpoint_error([&] { load_pth(path); }), "cannot open"));
    EXPECT_TRUE(contains(checkpoint_error([&] { load_safetensors(path); }), "cannot open"));
    TempDir dir;
    EXPECT_TRUE(contains(checkpoint_error([&] { load_checkpoint(dir.path().string()); }),
                         "not a regular file"));
}

TEST(Checkpoint, RandomBytesAreRejected) {
    TempDir dir;
    std::mt19937 rng(7);
    for (int i = 0; i < 20; ++i) {
        std::string bytes(64 + i * 37, '\0');
        for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
        if (i == 0) bytes.replace(0, 4, "PK\x03\x04");  // looks like a zip, is not one
        const std::string path = dir.file("random" + std::to_string(i) + ".bin");
        write_bytes(path, bytes);
        EXPECT_TRUE(contains(checkpoint_error([&] { load_checkpoint(path); }), path));
        checkpoint_error([&] { load_pth(path); });
    }
    const std::string empty = dir.file("empty.bin");
    write_bytes(empty, "");
    checkpoint_error([&] { load_checkpoint(empty); });
    // Neither format: named as such, not as a broken safetensors header.
    const std::string text = dir.file("notes.pth");
    write_bytes(text, "these are not weights\n");
    const std::string msg = checkpoint_error([&] { load_checkpoint(text); });
    EXPECT_TRUE(contains(msg, "neither a torch.save zip archive (.pth) nor a safetensors file"))
        << msg;
    // A truncated safetensors file keeps its own message.
    const std::string cut = dir.file("cut.safetensors");
    std::string bytes = safetensors_bytes("{}", "");
    bytes[0] = static_cast<char>(0xe8);
    bytes[1] = 0x03;
    write_bytes(cut, bytes);
    EXPECT_TRUE(contains(checkpoint_error([&] { load_checkpoint(cut); }), "exceeds the file size"));
}

// A header of 128 bytes makes the file's first byte 0x80, which also starts a pickle stream.
TEST(Checkpoint, SafetensorsWhoseFirstByteLooksLikePickleLoads) {
    TempDir dir;
    const std::string path = dir.file("x80.safetensors");
    std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    header.resize(128, ' ');  // the format allows trailing spaces
    const float value = 2.5f;
    write_bytes(path,
                safetensors_bytes(header, std::string(reinterpret_cast<const char*>(&value), 4)));
    const StateDict d = load_checkpoint(path);
    ASSERT_EQ(d.count("w"), 1u);
    EXPECT_EQ(d.at("w").item<float>(), 2.5f);
    // A real bare pickle stream is still refused with its explanation.
    const std::string pickle_path = dir.file("bare.pkl");
    write_bytes(pickle_path, bytes_of("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94."));
    EXPECT_TRUE(
        contains(checkpoint_error([&] { load_checkpoint(pickle_path); }), "bare pickle stream"));
}

TEST(Checkpoint, LegacyTorchSaveFormatIsExplained) {
    TempDir dir;
    const std::string path = dir.file("legacy.pt");
    // What torch.save(..., _use_new_zipfile_serialization=False) writes first: the magic number.
    write_bytes(
        path,
        bytes_of("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03."));
    for (const std::string& msg : {checkpoint_error([&] { load_checkpoint(path); }),
                                   checkpoint_error([&] { load_pth(path); })}) {
        EXPECT_TRUE(contains(msg,
                             "legacy (pre-1.6) torch.save format is not supported, re-save with "
                             "torch.save(..., _use_new_zipfile_serialization=True)"))
            << msg;
    }
}

TEST(Checkpoint, SelectPrefixStripsOnlyWholeComponents) {
    const StateDict all{{"model.a", f32_arange(1)},
                        {"model.b.c", f32_arange(2)},
                        {"model_ema.a", f32_arange(3)},
                        {"modelx.a", f32_arange(4)},
                        {"model", f32_arange(5)}};
    EXPECT_EQ(keys(select_prefix(all, "model")), (std::vector<std::string>{"a", "b.c"}));
    EXPECT_EQ(keys(select_prefix(all, "model.b")), (std::vector<std::string>{"c"}));
    EXPECT_EQ(select_prefix(all, "").size(), all.size());
    EXPECT_TRUE(select_prefix(all, "nothing").empty());
}
