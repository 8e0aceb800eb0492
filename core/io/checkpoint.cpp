#include "core/io/checkpoint.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/io/checkpoint_internal.h"

namespace varscope {

namespace detail {

void checkpoint_fail(const std::string& path, const std::string& what) {
    throw CheckpointError(path + ": " + what);
}

uint64_t checked_file_size(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) checkpoint_fail(path, "cannot open: no such file");
    if (!fs::is_regular_file(st)) checkpoint_fail(path, "cannot open: not a regular file");
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) checkpoint_fail(path, "cannot open: " + ec.message());
    return size;
}

std::string read_head(const std::string& path, size_t n) {
    std::ifstream in(path, std::ios::binary);
    if (!in) checkpoint_fail(path, std::string("cannot open: ") + std::strerror(errno));
    std::string head(n, '\0');
    in.read(head.data(), static_cast<std::streamsize>(n));
    head.resize(static_cast<size_t>(in.gcount()));
    return head;
}

void reject_raw_pickle(const std::string& path, const std::string& head) {
    // The legacy format starts with a pickled magic number: PROTO 2, LONG1 of 10 bytes.
    static const std::string legacy_magic(
        "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14);
    if (head.compare(0, legacy_magic.size(), legacy_magic) == 0) {
        checkpoint_fail(path,
                        "legacy (pre-1.6) torch.save format is not supported, re-save with "
                        "torch.save(..., _use_new_zipfile_serialization=True)");
    }
    // A safetensors header length may start with 0x80 too; its JSON header starts at byte 8.
    const bool safetensors_like = head.size() > 8 && head[8] == '{';
    if (!head.empty() && static_cast<unsigned char>(head[0]) == 0x80 && !safetensors_like) {
        checkpoint_fail(
            path, "a bare pickle stream, not a torch.save zip archive; re-save with torch.save");
    }
}

}  // namespace detail

StateDict load_checkpoint(const std::string& path) {
    detail::checked_file_size(path);
    if (is_safetensors_index(path)) return load_safetensors_index(path);
    const std::string head = detail::read_head(path, 16);
    if (head.rfind("PK\x03\x04", 0) == 0 || head.rfind("PK\x05\x06", 0) == 0) return load_pth(path);
    detail::reject_raw_pickle(path, head);
    // A safetensors file starts with its header's length, then the JSON header's '{'. Anything
    // else is named for what it is not, rather than as a broken safetensors header (a text file
    // named .pth read "header length 7491... exceeds the file size").
    if (head.size() <= 8 || head[8] != '{')
        detail::checkpoint_fail(path,
                                "not a checkpoint: neither a torch.save zip archive (.pth) nor a "
                                "safetensors file");
    return load_safetensors(path);
}

StateDict select_prefix(const StateDict& all, const std::string& prefix) {
    if (prefix.empty()) return all;
    const std::string dotted = prefix + ".";
    StateDict out;
    // Keys with the prefix are contiguous in the sorted map.
    for (auto it = all.lower_bound(dotted); it != all.end() && it->first.rfind(dotted, 0) == 0;
         ++it) {
        out.emplace(it->first.substr(dotted.size()), it->second);
    }
    return out;
}

}  // namespace varscope
