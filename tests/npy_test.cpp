// .npy/.npz reading and writing (core/io/npy.*): round trips of every dtype, numpy's own files
// (tests/fixtures/fid_parity.npz, written by np.savez), Fortran order, and malformed input that
// must be refused with a message naming the file, the member and the problem.
#include "core/io/npy.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

using testing::error_of;

std::string npy_with_header(const std::string& dict, const std::string& data) {
    std::string header = dict;
    header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
    std::string out = "\x93NUMPY";
    out.push_back(1);
    out.push_back(0);
    out.push_back(static_cast<char>(header.size() & 0xff));
    out.push_back(static_cast<char>(header.size() >> 8));
    return out + header + data;
}

std::string float_bytes(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

TEST(Npy, RoundTripsEveryDtypeAndShape) {
    std::map<std::string, at::Tensor> arrays = {
        {"f32", at::arange(12, at::kFloat).reshape({3, 4}).mul(0.5)},
        {"f64", at::arange(5, at::kDouble).sub(2.25)},
        {"f16", at::arange(6, at::kFloat).to(at::kHalf)},
        {"u8", at::arange(24, at::kByte).reshape({2, 3, 4})},
        {"i8", at::arange(-3, 3, at::kChar)},
        {"i16", at::arange(4, at::kShort).mul(-300)},
        {"i32", at::arange(4, at::kInt).mul(100000)},
        {"i64", at::arange(3, at::kLong).mul(int64_t{1} << 40)},
        {"b", at::arange(4, at::kLong).remainder(2).eq(1)},
        {"scalar", at::scalar_tensor(3.5, at::kDouble)},
        {"empty", at::empty({0, 7}, at::kFloat)},
    };
    const auto back = parse_npz(npz_bytes(arrays), "memory");
    ASSERT_EQ(back.size(), arrays.size());
    for (const auto& [name, t] : arrays) {
        SCOPED_TRACE(name);
        ASSERT_EQ(back.at(name).scalar_type(), t.scalar_type());
        ASSERT_EQ(back.at(name).sizes(), t.sizes());
        EXPECT_TRUE(at::equal(back.at(name), t));
    }
    // Non-contiguous input is written in its logical order.
    const auto t = at::arange(6, at::kFloat).reshape({2, 3}).t();
    EXPECT_TRUE(at::equal(parse_npy(npy_bytes(t), "t"), t.contiguous()));

    testing::TempDir dir;
    write_npz(arrays, dir.file("a.npz"));
    auto names = list_npz(dir.file("a.npz"));
    EXPECT_EQ(names.size(), arrays.size());
    const auto two = read_npz(dir.file("a.npz"), {"u8", "f64"});
    ASSERT_EQ(two.size(), 2u);
    EXPECT_TRUE(at::equal(two.at("u8"), arrays.at("u8")));
}

TEST(Npy, ReadsNumpysOwnArchive) {
    const std::string path = testing::source_dir() + "/tests/fixtures/fid_parity.npz";
    const auto a = read_npz(path, {"images_a", "mu_x", "sigma_x"});
    EXPECT_EQ(a.at("images_a").scalar_type(), at::kByte);
    EXPECT_EQ(a.at("images_a").sizes(), at::IntArrayRef({12, 3, 64, 64}));
    EXPECT_EQ(a.at("sigma_x").scalar_type(), at::kDouble);
    EXPECT_EQ(a.at("sigma_x").sizes(), at::IntArrayRef({24, 24}));
    // np.cov is symmetric: a wrong element order would break that.
    EXPECT_TRUE(at::allclose(a.at("sigma_x"), a.at("sigma_x").t()));
}

// np.savez_compressed, as pytorch-fid's --save-stats writes (float32 mu, float64 sigma):
// tests/fixtures/stats_compressed.npz from tools/parity/fid_parity.py.
TEST(Npy, ReadsCompressedArchives) {
    const std::string dir = testing::source_dir() + "/tests/fixtures/";
    const auto c = read_npz(dir + "stats_compressed.npz");
    const auto plain = read_npz(dir + "fid_parity.npz", {"mu_x", "sigma_x"});
    EXPECT_EQ(c.at("mu").scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(c.at("mu"), plain.at("mu_x").to(at::kFloat)));
    EXPECT_TRUE(at::equal(c.at("sigma"), plain.at("sigma_x")));
}

// Every single-bit change and every truncation of a small archive is read or refused with an
// NpyError; nothing else escapes (what fuzz/fuzz_npz.cpp does at length).
TEST(Npy, EveryByteFlipAndTruncationIsReadOrRefused) {
    const auto good = npz_bytes(
        {{"mu", at::arange(3, at::kDouble)}, {"m", at::arange(6, at::kByte).reshape({2, 3})}});
    for (size_t i = 0; i < good.size(); ++i) {
        for (int bit : {0, 7}) {
            auto bad = good;
            bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
            try {
                parse_npz(bad, "x");
            } catch (const NpyError&) {
            }
        }
        try {
            parse_npz(good.substr(0, i), "x");
        } catch (const NpyError&) {
        }
    }
}

TEST(Npy, FortranOrderBecomesCOrder) {
    // A (2, 3) array stored column by column: 0 1 2 / 3 4 5 in C order.
    const auto bytes = npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                                       float_bytes({0, 3, 1, 4, 2, 5}));
    EXPECT_TRUE(at::equal(parse_npy(bytes, "f"), at::arange(6, at::kFloat).reshape({2, 3})));
}

TEST(Npy, RefusesMalformedArraysNamingTheProblem) {
    const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    const auto two = float_bytes({1, 2});
    EXPECT_NO_THROW(parse_npy(npy_with_header(ok, two), "x"));
    auto err = [](const std::string& bytes) {
        return error_of<NpyError>([&] { parse_npy(bytes, "arr.npy"); }, "no error");
    };
    EXPECT_NE(err("PK\x03\x04 not npy").find("arr.npy: not an .npy"), std::string::npos);
    EXPECT_NE(err(npy_with_header(ok, two.substr(0, 7))).find("needs 8"), std::string::npos);
    EXPECT_NE(err(npy_with_header(ok, two + "x")).find("holds 9 bytes"), std::string::npos);
    EXPECT_NE(err(npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", two))
                  .find("unsupported dtype '|O'"),
              std::string::npos);
    EXPECT_NE(err(npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", two))
                  .find("big-endian"),
              std::string::npos);
    EXPECT_NE(err(npy_with_header("{'descr': '<f4', 'shape': (2,), }", two)).find("fortran_order"),
              std::string::npos);
    EXPECT_NE(
        err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", two))
            .find("unknown key 'x'"),
        std::string::npos);
    EXPECT_NE(err(npy_with_header("{'descr': '<f4', 'fortran_order': No, 'shape': (2,), }", two))
                  .find("True or False"),
              std::string::npos);
    EXPECT_NE(
        err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", two))
            .find("expected a dimension"),
        std::string::npos);
    EXPECT_NE(err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': "
                                  "(99999999999, 99999999999, 99999999999), }",
                                  two))
                  .find("too large"),
              std::string::npos);
    auto bad_version = npy_with_header(ok, two);
    bad_version[6] = 9;
    EXPECT_NE(err(bad_version).find("version 9"), std::string::npos);
}

TEST(Npy, RefusesDamagedArchivesNamingFileAndMember) {
    const auto good = npz_bytes({{"mu", at::ones({3}, at::kDouble)}});
    auto err = [](const std::string& bytes) {
        return error_of<NpyError>([&] { parse_npz(bytes, "ref.npz"); }, "no error");
    };
    EXPECT_NE(err("hello").find("ref.npz: not a zip archive"), std::string::npos);
    EXPECT_NE(err(good.substr(0, good.size() - 30)).find("ref.npz"), std::string::npos);
    // A stored member marked as deflated (method field of its central directory entry): not
    // deflate data. An unknown method is named.
    auto deflated = good;
    const size_t cd = deflated.find("PK\x01\x02");
    ASSERT_NE(cd, std::string::npos);
    deflated[cd + 10] = 8;
    EXPECT_NE(err(deflated).find("ref.npz member 'mu.npy': "), std::string::npos) << err(deflated);
    auto bzip = good;
    bzip[cd + 10] = 12;
    EXPECT_NE(err(bzip).find("unsupported zip compression method 12"), std::string::npos);
    auto flipped = good;
    flipped[flipped.find("\x93NUMPY") + 80] ^= 1;  // inside the data
    EXPECT_NE(err(flipped).find("CRC mismatch"), std::string::npos);

    testing::TempDir dir;
    write_npz({{"mu", at::ones({3}, at::kDouble)}}, dir.file("r.npz"));
    const auto missing =
        error_of<NpyError>([&] { read_npz(dir.file("r.npz"), {"sigma"}); }, "no error");
    EXPECT_NE(missing.find("r.npz: no array 'sigma' (it has: mu)"), std::string::npos) << missing;
    EXPECT_NE(error_of<NpyError>([&] { read_npz(dir.file("none.npz")); }).find("cannot open"),
              std::string::npos);
}

}  // namespace
}  // namespace varscope
