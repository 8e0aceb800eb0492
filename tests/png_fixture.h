// Tiny PNG files for tests of image inputs (`varscope-cli pack-emoji` on a generated dataset),
// written without an image library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace varscope::testing {

inline uint32_t crc32(const std::string& s) {
    uint32_t c = 0xffffffffu;
    for (const unsigned char b : s) {
        c ^= b;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

inline std::string be32(uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
            static_cast<char>(v)};
}

// An uncompressed (stored-deflate) RGBA PNG; `rgba` is row-major, 4 bytes a pixel.
inline void write_png(const std::string& path, int w, int h, const std::vector<uint8_t>& rgba) {
    std::string raw;
    for (int y = 0; y < h; ++y) {
        raw.push_back(0);  // filter: none
        raw.append(reinterpret_cast<const char*>(rgba.data()) + y * w * 4,
                   static_cast<size_t>(w) * 4);
    }
    std::string z = "\x78\x01";
    for (size_t off = 0; off < raw.size() || off == 0; off += 65535) {
        const size_t n = std::min<size_t>(65535, raw.size() - off);
        z.push_back(off + n >= raw.size() ? 1 : 0);
        z.push_back(static_cast<char>(n & 0xff));
        z.push_back(static_cast<char>(n >> 8));
        z.push_back(static_cast<char>(~n & 0xff));
        z.push_back(static_cast<char>((~n >> 8) & 0xff));
        z.append(raw, off, n);
        if (raw.empty()) break;
    }
    uint32_t a = 1, b = 0;
    for (const unsigned char ch : raw) a = (a + ch) % 65521, b = (b + a) % 65521;
    z += be32((b << 16) | a);
    auto chunk = [](const std::string& type, const std::string& data) {
        return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc32(type + data));
    };
    std::string ihdr = be32(static_cast<uint32_t>(w)) + be32(static_cast<uint32_t>(h));
    ihdr += std::string("\x08\x06\x00\x00\x00", 5);
    std::ofstream(path, std::ios::binary)
        << (std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", z) +
            chunk("IEND", ""));
}

inline std::vector<uint8_t> solid(int w, int h, uint8_t r, uint8_t g, uint8_t b, uint8_t a) {
    std::vector<uint8_t> v;
    for (int i = 0; i < w * h; ++i) v.insert(v.end(), {r, g, b, a});
    return v;
}

}  // namespace varscope::testing
