// The safetensors format: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the tensors' bytes back to back (offsets are relative to the end of the header).
#include <ATen/ops/empty.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/io/atomic_file.h"
#include "core/io/checkpoint.h"
#include "core/io/checkpoint_internal.h"
#include "core/io/json_read.h"
#include "core/io/quant_int8.h"

namespace varscope {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

const std::vector<std::pair<std::string, at::ScalarType>>& dtype_names() {
    static const std::vector<std::pair<std::string, at::ScalarType>> names = {
        {"F32", at::kFloat},
        {"F16", at::kHalf},
        {"BF16", at::kBFloat16},
        {"F64", at::kDouble},
        {"I64", at::kLong},
        {"I32", at::kInt},
        {"I16", at::kShort},
        {"I8", at::kChar},
        {"U8", at::kByte},
        {"BOOL", at::kBool},
        {"U16", at::kUInt16},
        {"U32", at::kUInt32},
        {"U64", at::kUInt64},
        {"F8_E4M3", at::kFloat8_e4m3fn},
        {"F8_E5M2", at::kFloat8_e5m2},
    };
    return names;
}

std::optional<at::ScalarType> dtype_from_name(const std::string& name) {
    for (const auto& [n, t] : dtype_names()) {
        if (n == name) return t;
    }
    return std::nullopt;
}

std::optional<std::string> name_from_dtype(at::ScalarType type) {
    for (const auto& [n, t] : dtype_names()) {
        if (t == type) return n;
    }
    return std::nullopt;
}

struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0;
    uint64_t end = 0;
};

struct Header {
    uint64_t data_start = 0;  // file offset of the first data byte
    std::vector<Entry> entries;
    std::map<std::string, std::string> metadata;
};

Entry parse_entry(const std::string& path, const std::string& name, const json& j) {
    const auto bad = [&](const std::string& what) {
        detail::checkpoint_fail(path, "tensor '" + name + "': " + what);
    };
    if (!j.is_object()) bad("header entry is not an object");
    Entry e;
    e.name = name;
    const auto dtype = j.find("dtype");
    if (dtype == j.end() || !dtype->is_string()) bad("missing dtype");
    const std::optional<at::ScalarType> type = dtype_from_name(dtype->get<std::string>());
    if (!type) bad("unsupported dtype '" + dtype->get<std::string>() + "'");
    e.dtype = *type;

    const auto shape = j.find("shape");
    if (shape == j.end() || !shape->is_array()) bad("missing shape");
    uint64_t bytes = c10::elementSize(e.dtype);
    for (const json& d : *shape) {
        if (!d.is_number_unsigned()) bad("shape must hold non-negative integers");
        const auto n = d.get<uint64_t>();
        if (n > uint64_t(INT64_MAX) || __builtin_mul_overflow(bytes, n, &bytes))
            bad("shape is too large");
        e.shape.push_back(static_cast<int64_t>(n));
    }

    const auto offsets = j.find("data_offsets");
    if (offsets == j.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
        bad("data_offsets must be [begin, end]");
    }
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    if (e.end < e.begin || e.end - e.begin != bytes) {
        bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
            ") do not match its " + std::to_string(bytes) + " bytes");
    }
    return e;
}

// Tensors must tile the data section exactly: sorted by offset, no overlap, no gap, no excess.
void check_layout(const std::string& path, std::vector<Entry>& entries, uint64_t data_size) {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t expected = 0;
    for (const Entry& e : entries) {
        if (e.end > data_size) {
            detail::checkpoint_fail(path, "tensor '" + e.name + "' ends at data byte " +
                                              std::to_string(e.end) + " but the file holds only " +
                                              std::to_string(data_size) +
                                              " data bytes (truncated?)");
        }
        if (e.begin != expected) {
            detail::checkpoint_fail(
                path, "tensor '" + e.name + "' starts at data byte " + std::to_string(e.begin) +
                          (e.begin < expected ? ", overlapping the tensor before it"
                                              : ", leaving a gap after the tensor before it"));
        }
        expected = e.end;
    }
    if (expected != data_size) {
        detail::checkpoint_fail(
            path, std::to_string(data_size - expected) + " bytes after the last tensor");
    }
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& j) {
    if (!j.is_object()) detail::checkpoint_fail(path, "__metadata__ is not an object");
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : j.items()) {
        if (!value.is_string())
            detail::checkpoint_fail(path, "__metadata__ value '" + key + "' is not a string");
        out[key] = value.get<std::string>();
    }
    return out;
}

Header read_header(std::ifstream& in, const std::string& path, uint64_t file_size) {
    if (file_size < 8)
        detail::checkpoint_fail(
            path, "too short for a safetensors file (" + std::to_string(file_size) + " bytes)");
    unsigned char len_bytes[8];
    in.read(reinterpret_cast<char*>(len_bytes), 8);
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
    if (!in || len > file_size - 8 || len > kMaxHeaderBytes) {
        detail::checkpoint_fail(path, "safetensors header length " + std::to_string(len) +
                                          " exceeds the file size " + std::to_string(file_size) +
                                          " (not a safetensors file, or truncated)");
    }
    std::string text(len, '\0');
    in.read(text.data(), static_cast<std::streamsize>(len));
    if (!in) detail::checkpoint_fail(path, "cannot read the safetensors header");

    json j;
    try {
        j = parse_json(text, "safetensors header");  // also a tensor named twice
    } catch (const JsonReadError& e) {
        detail::checkpoint_fail(path, e.what());
    }
    if (!j.is_object()) detail::checkpoint_fail(path, "safetensors header is not a JSON object");

    Header h;
    h.data_start = 8 + len;
    for (const auto& [name, value] : j.items()) {
        if (name == kMetadataKey)
            h.metadata = parse_metadata(path, value);
        else
            h.entries.push_back(parse_entry(path, name, value));
    }
    check_layout(path, h.entries, file_size - h.data_start);
    return h;
}

std::ifstream open_input(const std::string& path, uint64_t& file_size) {
    file_size = detail::checked_file_size(path);
    std::ifstream in(path, std::ios::binary);
    if (!in) detail::checkpoint_fail(path, "cannot open for reading");
    return in;
}

void read_tensor(std::ifstream& in, const std::string& path, const Header& h, const Entry& e,
                 at::Tensor& t) {
    const uint64_t n = e.end - e.begin;
    if (n == 0) return;
    in.seekg(static_cast<std::streamoff>(h.data_start + e.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(n));
    if (!in)
        detail::checkpoint_fail(path, "tensor '" + e.name + "': read failed (file truncated?)");
    if (e.dtype == at::kBool) {
        // Bytes other than 0/1 are not valid bools for ATen's kernels.
        const auto* p = static_cast<const uint8_t*>(t.data_ptr());
        if (std::any_of(p, p + n, [](uint8_t b) { return b > 1; })) {
            detail::checkpoint_fail(
                path, "tensor '" + e.name + "': BOOL data holds bytes other than 0 and 1");
        }
    }
}

}  // namespace

namespace {
StateDict read_all(const std::string& path, std::map<std::string, std::string>& metadata) {
    uint64_t file_size = 0;
    std::ifstream in = open_input(path, file_size);
    const Header h = read_header(in, path, file_size);
    StateDict out;
    for (const Entry& e : h.entries) {
        at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
        read_tensor(in, path, h, e, t);
        out.emplace(e.name, std::move(t));
    }
    metadata = h.metadata;
    return out;
}
}  // namespace

StateDict load_safetensors(const std::string& path) {
    std::map<std::string, std::string> metadata;
    StateDict out = read_all(path, metadata);
    // Weight-only int8 files (quant_int8.h) are expanded here, the one place every reader
    // goes through, so models and tools see float tensors under their official names.
    dequantize_state_dict_in_place(out, metadata, path);
    return out;
}

StateDict load_safetensors_stored(const std::string& path,
                                  std::map<std::string, std::string>* metadata) {
    std::map<std::string, std::string> m;
    StateDict out = read_all(path, m);
    if (metadata) *metadata = std::move(m);
    return out;
}

StateDict load_safetensors_selected(const std::string& path,
                                    const std::function<bool(const std::string&)>& keep) {
    uint64_t file_size = 0;
    std::ifstream in = open_input(path, file_size);
    const Header h = read_header(in, path, file_size);
    // An int8 file's scales pair with their weights: read it whole, dequantise, then select.
    const bool quantized = h.metadata.count(kQuantMetadataKey) > 0;
    StateDict out;
    for (const Entry& e : h.entries) {
        if (!quantized && !keep(e.name)) continue;  // never read from disk
        at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
        read_tensor(in, path, h, e, t);
        out.emplace(e.name, std::move(t));
    }
    if (quantized) {
        dequantize_state_dict_in_place(out, h.metadata, path);
        for (auto it = out.begin(); it != out.end();)
            it = keep(it->first) ? std::next(it) : out.erase(it);
    }
    return out;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
    if (is_safetensors_index(path)) return read_safetensors_index_metadata(path);
    uint64_t file_size = 0;
    std::ifstream in = open_input(path, file_size);
    return read_header(in, path, file_size).metadata;
}

std::vector<std::string> read_safetensors_names(const std::string& path) {
    uint64_t file_size = 0;
    std::ifstream in = open_input(path, file_size);
    std::vector<std::string> names;
    for (const Entry& e : read_header(in, path, file_size).entries) names.push_back(e.name);
    return names;
}

void save_safetensors(const StateDict& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
    json header = json::object();
    if (!metadata.empty()) header[kMetadataKey] = metadata;
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        if (name == kMetadataKey)
            detail::checkpoint_fail(path, "a tensor may not be named __metadata__");
        if (!t.defined()) detail::checkpoint_fail(path, "tensor '" + name + "' is undefined");
        const std::optional<std::string> dtype = name_from_dtype(t.scalar_type());
        if (!dtype) {
            detail::checkpoint_fail(path, "tensor '" + name + "' has dtype " +
                                              std::string(c10::toString(t.scalar_type())) +
                                              ", which safetensors cannot store");
        }
        const uint64_t n = t.nbytes();
        header[name] = {{"dtype", *dtype},
                        {"shape", t.sizes().vec()},
                        {"data_offsets", json::array({offset, offset + n})}};
        offset += n;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned

    // AtomicFileWriter: a process killed mid-write, a full disk or an unwritable folder leaves
    // the previous file whole, never a truncated one (FileWriteError naming the path).
    AtomicFileWriter out(path);
    char len_bytes[8];
    for (int i = 0; i < 8; ++i)
        len_bytes[i] = static_cast<char>((uint64_t(text.size()) >> (8 * i)) & 0xff);
    out.write(len_bytes, 8);
    out.write(text);
    for (const auto& [name, t] : tensors) {
        // One tensor at a time, so a GPU model needs only one extra CPU copy at once.
        const at::Tensor c = t.detach().to(at::kCPU).contiguous();
        if (c.nbytes() > 0) out.write(c.data_ptr(), c.nbytes());
    }
    out.commit();
}

}  // namespace varscope
