#include "core/io/npy.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>

#include "core/io/atomic_file.h"

// miniz's raw-deflate decoder, which libtorch_cpu exports (PyTorch's zip serialisation is built
// on miniz): np.savez_compressed members (pytorch-fid's --save-stats files) without a new
// dependency. Returns the bytes written, or (size_t)-1 on damaged input or a full buffer.
extern "C" size_t tinfl_decompress_mem_to_mem(void* out, size_t out_len, const void* src,
                                              size_t src_len, int flags);

namespace varscope {
namespace {

constexpr uint64_t kMaxHeader = 1 << 20;
constexpr uint64_t kMaxDeflateRatio = 1032;  // deflate's limit; a larger claim is damage

[[noreturn]] void fail(const std::string& source, const std::string& what) {
    throw NpyError(source + ": " + what);
}

struct Dtype {
    const char* descr;  // without the byte-order character
    at::ScalarType type;
    size_t size;
};

const std::vector<Dtype>& dtypes() {
    static const std::vector<Dtype> d = {
        {"b1", at::kBool, 1},  {"u1", at::kByte, 1},  {"i1", at::kChar, 1},
        {"i2", at::kShort, 2}, {"i4", at::kInt, 4},   {"i8", at::kLong, 8},
        {"f2", at::kHalf, 2},  {"f4", at::kFloat, 4}, {"f8", at::kDouble, 8}};
    return d;
}

// The header dict literal: {'key': value, ...} with string, True/False and int-tuple values.
struct HeaderParser {
    const std::string& s;
    const std::string& source;
    size_t pos = 0;

    [[noreturn]] void bad(const std::string& what) const {
        fail(source, "malformed .npy header (" + what + " at character " + std::to_string(pos) +
                         "): " + s.substr(0, 120));
    }
    void space() {
        while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n')) ++pos;
    }
    bool eat(char c) {
        space();
        if (pos < s.size() && s[pos] == c) {
            ++pos;
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) bad(std::string("expected '") + c + "'");
    }
    std::string quoted() {
        space();
        if (pos >= s.size() || (s[pos] != '\'' && s[pos] != '"')) bad("expected a string");
        const char q = s[pos++];
        const size_t end = s.find(q, pos);
        if (end == std::string::npos) bad("unterminated string");
        std::string out = s.substr(pos, end - pos);
        pos = end + 1;
        return out;
    }
    bool boolean() {
        space();
        for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
            const size_t n = std::strlen(word);
            if (s.compare(pos, n, word) == 0) {
                pos += n;
                return value;
            }
        }
        bad("expected True or False");
    }
    std::vector<int64_t> shape() {
        expect('(');
        std::vector<int64_t> dims;
        while (!eat(')')) {
            space();
            int64_t v = 0;
            size_t digits = 0;
            while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
                if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) bad("dimension too large");
                v = v * 10 + (s[pos++] - '0');
                ++digits;
            }
            if (digits == 0) bad("expected a dimension");
            dims.push_back(v);
            if (dims.size() > 32) bad("more than 32 dimensions");
            if (!eat(',')) {
                expect(')');
                break;
            }
        }
        return dims;
    }
};

struct Header {
    std::string descr;
    bool fortran = false;
    std::vector<int64_t> shape;
};

Header parse_header(const std::string& text, const std::string& source) {
    HeaderParser p{text, source};
    Header h;
    std::set<std::string> seen;
    p.expect('{');
    while (!p.eat('}')) {
        const std::string key = p.quoted();
        p.expect(':');
        if (!seen.insert(key).second) p.bad("key '" + key + "' twice");
        if (key == "descr")
            h.descr = p.quoted();
        else if (key == "fortran_order")
            h.fortran = p.boolean();
        else if (key == "shape")
            h.shape = p.shape();
        else
            p.bad("unknown key '" + key + "'");
        if (!p.eat(',')) {
            p.expect('}');
            break;
        }
    }
    p.space();
    if (p.pos != text.size()) p.bad("text after the dict");
    for (const char* k : {"descr", "fortran_order", "shape"})
        if (!seen.count(k)) fail(source, std::string(".npy header without '") + k + "'");
    return h;
}

const Dtype& dtype_of(const std::string& descr, const std::string& source) {
    if (descr.size() == 3) {
        const char order = descr[0];
        for (const auto& d : dtypes()) {
            if (descr.compare(1, 2, d.descr) != 0) continue;
            const bool one_byte = d.size == 1;
            if (order == '<' || (one_byte && (order == '|' || order == '='))) return d;
            if (order == '>')
                fail(source, "big-endian array ('" + descr +
                                 "') is not supported; save it "
                                 "little-endian (arr.astype('<" +
                                 d.descr + "'))");
        }
    }
    fail(source, "unsupported dtype '" + descr + "' (supported: bool, uint8, int8-64, " +
                     "float16/32/64, little-endian; object arrays are never read)");
}

uint32_t crc32(const char* data, size_t n, uint32_t crc = 0) {
    static const auto table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    crc = ~crc;
    for (size_t i = 0; i < n; ++i)
        crc = table[(crc ^ static_cast<uint8_t>(data[i])) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint64_t le(const std::string& b, size_t at, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(static_cast<uint8_t>(b[at + i])) << (8 * i);
    return v;
}

void put(std::string& out, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Random access to the archive: a file (read piecewise) or bytes in memory.
struct Bytes {
    uint64_t size = 0;
    std::function<std::string(uint64_t offset, uint64_t n)> read;
};

struct Member {
    std::string name;
    uint16_t method = 0;
    uint32_t crc = 0;
    uint64_t compressed = 0, size = 0, local_offset = 0;
};

// The central directory (zip64 where the archive needs it).
std::vector<Member> zip_members(const Bytes& in, const std::string& source) {
    if (in.size < 22) fail(source, "not a zip archive (.npz): too short");
    const uint64_t tail_n = std::min<uint64_t>(in.size, 22 + 65535);
    const std::string tail = in.read(in.size - tail_n, tail_n);
    size_t eocd = std::string::npos;
    for (size_t i = tail.size() - 22 + 1; i-- > 0;)
        if (le(tail, i, 4) == 0x06054b50) {
            eocd = i;
            break;
        }
    if (eocd == std::string::npos) fail(source, "not a zip archive (.npz): no end record");
    uint64_t entries = le(tail, eocd + 10, 2), cd_size = le(tail, eocd + 12, 4),
             cd_offset = le(tail, eocd + 16, 4);
    if ((entries == 0xffff || cd_offset == 0xffffffff || cd_size == 0xffffffff) && eocd >= 20 &&
        le(tail, eocd - 20, 4) == 0x07064b50) {
        const uint64_t z64 = le(tail, eocd - 20 + 8, 8);
        if (z64 > in.size || in.size - z64 < 56) fail(source, "zip64 end record out of range");
        const std::string rec = in.read(z64, 56);
        if (le(rec, 0, 4) != 0x06064b50) fail(source, "damaged zip64 end record");
        entries = le(rec, 32, 8);
        cd_size = le(rec, 40, 8);
        cd_offset = le(rec, 48, 8);
    }
    if (cd_offset > in.size || cd_size > in.size - cd_offset)
        fail(source, "central directory out of range (truncated file?)");
    if (entries > cd_size / 46) fail(source, "central directory too small for its entry count");
    const std::string cd = in.read(cd_offset, cd_size);
    std::vector<Member> members;
    size_t p = 0;
    for (uint64_t e = 0; e < entries; ++e) {
        if (cd.size() - p < 46 || le(cd, p, 4) != 0x02014b50)
            fail(source, "damaged central directory entry " + std::to_string(e));
        Member m;
        m.method = static_cast<uint16_t>(le(cd, p + 10, 2));
        m.crc = static_cast<uint32_t>(le(cd, p + 16, 4));
        m.compressed = le(cd, p + 20, 4);
        m.size = le(cd, p + 24, 4);
        const size_t name_n = le(cd, p + 28, 2), extra_n = le(cd, p + 30, 2),
                     comment_n = le(cd, p + 32, 2);
        m.local_offset = le(cd, p + 42, 4);
        if (cd.size() - p - 46 < name_n + extra_n + comment_n)
            fail(source, "damaged central directory entry " + std::to_string(e));
        m.name = cd.substr(p + 46, name_n);
        // Zip64 extra field: the 0xffffffff fields, in order size, compressed, offset.
        size_t x = p + 46 + name_n;
        const size_t x_end = x + extra_n;
        while (x + 4 <= x_end) {
            const uint64_t id = le(cd, x, 2), n = le(cd, x + 2, 2);
            if (x + 4 + n > x_end) fail(source, "damaged extra field of '" + m.name + "'");
            if (id == 1) {
                size_t q = x + 4;
                auto take = [&](uint64_t& field) {
                    if (field != 0xffffffff) return;
                    if (q + 8 > x + 4 + n) fail(source, "short zip64 field of '" + m.name + "'");
                    field = le(cd, q, 8);
                    q += 8;
                };
                take(m.size);
                take(m.compressed);
                take(m.local_offset);
            }
            x += 4 + n;
        }
        members.push_back(m);
        p += 46 + name_n + extra_n + comment_n;
    }
    return members;
}

std::string member_bytes(const Bytes& in, const Member& m, const std::string& source) {
    const std::string where = source + " member '" + m.name + "'";
    if (m.method != 0 && m.method != 8)
        fail(where, "unsupported zip compression method " + std::to_string(m.method) +
                        " (stored and deflate are read)");
    if (m.method == 0 && m.compressed != m.size) fail(where, "stored member with differing sizes");
    if (m.method == 8 && m.size > m.compressed * kMaxDeflateRatio + 1024)
        fail(where, "claims " + std::to_string(m.size) + " bytes from " +
                        std::to_string(m.compressed) + " compressed (damaged)");
    if (m.local_offset > in.size || in.size - m.local_offset < 30)
        fail(where, "local header out of range");
    const std::string local = in.read(m.local_offset, 30);
    if (le(local, 0, 4) != 0x04034b50) fail(where, "damaged local header");
    const uint64_t start = m.local_offset + 30 + le(local, 26, 2) + le(local, 28, 2);
    if (start > in.size || in.size - start < m.compressed)
        fail(where, "data out of range (truncated?)");
    std::string data = in.read(start, m.compressed);
    if (m.method == 8) {  // np.savez_compressed: raw deflate
        std::string out(m.size, '\0');
        const size_t n = tinfl_decompress_mem_to_mem(out.data(), out.size(), data.data(),
                                                     data.size(), /*raw deflate*/ 0);
        if (n != out.size()) fail(where, "damaged deflate data");
        data = std::move(out);
    }
    if (crc32(data.data(), data.size()) != m.crc) fail(where, "CRC mismatch (damaged file)");
    return data;
}

std::string strip_npy(const std::string& name) {
    return name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0
               ? name.substr(0, name.size() - 4)
               : name;
}

std::map<std::string, at::Tensor> read_members(const Bytes& in, const std::string& source,
                                               const std::vector<std::string>& names) {
    const auto members = zip_members(in, source);
    std::map<std::string, const Member*> by_name;
    for (const auto& m : members) {
        if (m.name.size() <= 4 || m.name.compare(m.name.size() - 4, 4, ".npy") != 0)
            fail(source, "member '" + m.name + "' is not an .npy array");
        if (!by_name.emplace(strip_npy(m.name), &m).second)
            fail(source, "member '" + m.name + "' twice");
    }
    std::vector<std::string> wanted = names;
    if (wanted.empty())
        for (const auto& [name, m] : by_name) wanted.push_back(name);
    std::map<std::string, at::Tensor> out;
    for (const auto& name : wanted) {
        const auto it = by_name.find(name);
        if (it == by_name.end()) {
            std::string have;
            for (const auto& [n, m] : by_name) have += (have.empty() ? "" : ", ") + n;
            fail(source, "no array '" + name + "' (it has: " + have + ")");
        }
        out[name] = parse_npy(member_bytes(in, *it->second, source),
                              source + " member '" + it->second->name + "'");
    }
    return out;
}

Bytes file_bytes(const std::string& path, std::shared_ptr<std::ifstream>& file) {
    file = std::make_shared<std::ifstream>(path, std::ios::binary);
    if (!*file) fail(path, "cannot open");
    file->seekg(0, std::ios::end);
    const auto end = file->tellg();
    if (end < 0) fail(path, "cannot read (not a regular file?)");
    Bytes b;
    b.size = static_cast<uint64_t>(end);
    std::weak_ptr<std::ifstream> weak = file;
    b.read = [weak, path](uint64_t offset, uint64_t n) {
        auto f = weak.lock();
        std::string out(n, '\0');
        f->clear();
        f->seekg(static_cast<std::streamoff>(offset));
        if (n && !f->read(out.data(), static_cast<std::streamsize>(n)))
            fail(path, "read error at byte " + std::to_string(offset));
        return out;
    };
    return b;
}

Bytes memory_bytes(const std::string& data) {
    Bytes b;
    b.size = data.size();
    b.read = [&data](uint64_t offset, uint64_t n) { return data.substr(offset, n); };
    return b;
}

}  // namespace

at::Tensor parse_npy(const std::string& bytes, const std::string& source) {
    if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
        fail(source, "not an .npy array (no \\x93NUMPY magic)");
    const int major = static_cast<uint8_t>(bytes[6]);
    if (major < 1 || major > 3)
        fail(source, ".npy format version " + std::to_string(major) + " is not supported");
    const size_t len_n = major == 1 ? 2 : 4;
    if (bytes.size() < 8 + len_n) fail(source, "truncated .npy header");
    const uint64_t header_n = le(bytes, 8, len_n);
    if (header_n > kMaxHeader || bytes.size() - 8 - len_n < header_n)
        fail(source, "truncated .npy header");
    std::string text = bytes.substr(8 + len_n, header_n);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\n')) text.pop_back();
    const Header h = parse_header(text, source);
    const Dtype& d = dtype_of(h.descr, source);
    // The product of the non-zero dimensions bounds what the tensor's shape may claim (a zero
    // dimension would hide an overflowing one from the data-size check).
    uint64_t count = 1, bound = 1;
    for (int64_t dim : h.shape) {
        if (dim > 0 && bound > std::numeric_limits<uint64_t>::max() / 16 / uint64_t(dim))
            fail(source, "shape too large");
        bound *= std::max<uint64_t>(uint64_t(dim), 1);
        count *= uint64_t(dim);
    }
    if (bound > (uint64_t(1) << 62) / 16) fail(source, "shape too large");
    const uint64_t data_at = 8 + len_n + header_n;
    const uint64_t have = bytes.size() - data_at;
    if (have != count * d.size)
        fail(source, "data holds " + std::to_string(have) + " bytes, the header's shape " +
                         c10::str(at::IntArrayRef(h.shape)) + " of " + h.descr + " needs " +
                         std::to_string(count * d.size));
    std::vector<int64_t> shape = h.shape;
    if (h.fortran) std::reverse(shape.begin(), shape.end());
    auto t = at::empty(shape, at::TensorOptions().dtype(d.type));
    if (count) std::memcpy(t.data_ptr(), bytes.data() + data_at, count * d.size);
    if (h.fortran && shape.size() > 1) {
        std::vector<int64_t> order(shape.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(order.size() - 1 - i);
        t = t.permute(order).contiguous();
    }
    return t;
}

std::string npy_bytes(const at::Tensor& tensor) {
    const auto t = tensor.detach().cpu().contiguous();
    const Dtype* d = nullptr;
    for (const auto& cand : dtypes())
        if (cand.type == t.scalar_type()) d = &cand;
    if (!d)
        throw NpyError(std::string("npy: cannot write dtype ") + c10::toString(t.scalar_type()));
    std::string shape = "(";
    for (int64_t i = 0; i < t.dim(); ++i) shape += (i ? ", " : "") + std::to_string(t.size(i));
    shape += t.dim() == 1 ? ",)" : ")";
    std::string header = std::string("{'descr': '") + (d->size == 1 ? "|" : "<") + d->descr +
                         "', 'fortran_order': False, 'shape': " + shape + ", }";
    // Padded with spaces and a newline so the data starts at a multiple of 64, as numpy does.
    const size_t total = 10 + header.size() + 1;
    header += std::string((64 - total % 64) % 64, ' ') + "\n";
    std::string out = "\x93NUMPY";
    out.push_back(1);
    out.push_back(0);
    put(out, header.size(), 2);
    out += header;
    out.append(static_cast<const char*>(t.data_ptr()), t.numel() * d->size);
    return out;
}

std::string npz_bytes(const std::map<std::string, at::Tensor>& arrays) {
    std::string out, cd;
    uint64_t entries = 0;
    for (const auto& [name, t] : arrays) {
        const std::string member = name + ".npy";
        const std::string data = npy_bytes(t);
        const uint32_t crc = crc32(data.data(), data.size());
        if (out.size() + data.size() + member.size() + 30 > 0xfffffffful)
            throw NpyError("npz: archive over 4 GiB (zip64 writing is not supported)");
        const uint64_t offset = out.size();
        auto header = [&](std::string& h, bool central) {
            put(h, central ? 0x02014b50 : 0x04034b50, 4);
            if (central) put(h, 20, 2);  // made by
            put(h, 20, 2);               // version needed
            put(h, 0, 2);                // flags
            put(h, 0, 2);                // stored
            put(h, 0, 2);                // time
            put(h, 0x21, 2);             // date: 1980-01-01
            put(h, crc, 4);
            put(h, data.size(), 4);
            put(h, data.size(), 4);
            put(h, member.size(), 2);
            put(h, 0, 2);  // extra
            if (central) {
                put(h, 0, 2);  // comment
                put(h, 0, 2);  // disk
                put(h, 0, 2);  // internal attributes
                put(h, 0, 4);  // external attributes
                put(h, offset, 4);
            }
            h += member;
        };
        header(out, false);
        out += data;
        header(cd, true);
        ++entries;
    }
    const uint64_t cd_offset = out.size();
    out += cd;
    put(out, 0x06054b50, 4);
    put(out, 0, 4);
    put(out, entries, 2);
    put(out, entries, 2);
    put(out, cd.size(), 4);
    put(out, cd_offset, 4);
    put(out, 0, 2);
    return out;
}

std::vector<std::string> list_zip(const std::string& path) {
    std::shared_ptr<std::ifstream> file;
    std::vector<std::string> names;
    for (const auto& m : zip_members(file_bytes(path, file), path)) names.push_back(m.name);
    return names;
}

std::vector<std::string> list_npz(const std::string& path) {
    std::vector<std::string> names = list_zip(path);
    for (auto& n : names) n = strip_npy(n);
    return names;
}

std::map<std::string, at::Tensor> read_npz(const std::string& path,
                                           const std::vector<std::string>& names) {
    std::shared_ptr<std::ifstream> file;
    return read_members(file_bytes(path, file), path, names);
}

std::map<std::string, at::Tensor> parse_npz(const std::string& bytes, const std::string& source) {
    return read_members(memory_bytes(bytes), source, {});
}

void write_npz(const std::map<std::string, at::Tensor>& arrays, const std::string& path) {
    write_file_atomic(path, npz_bytes(arrays));
}

}  // namespace varscope
