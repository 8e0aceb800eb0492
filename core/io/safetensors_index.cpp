// Sharded safetensors (checkpoint.h): the index's checks and the writer's split.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/io/atomic_file.h"
#include "core/io/checkpoint.h"
#include "core/io/checkpoint_internal.h"
#include "core/io/json_read.h"
#include "core/io/quant_int8.h"

namespace varscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kIndexSuffix = ".safetensors.index.json";

// `s` ends with `suffix` and has something before it.
bool has_suffix(const std::string& s, const std::string& suffix) {
    return s.size() > suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

json read_index(const std::string& index_path) {
    try {
        json j = read_json_file(index_path, "shard index '" + index_path + "'");
        if (!j.is_object()) detail::checkpoint_fail(index_path, "a shard index must be an object");
        return j;
    } catch (const JsonReadError& e) {
        throw CheckpointError(e.what());
    }
}

// shard file -> the tensors the index places there.
std::map<std::string, std::set<std::string>> shards_of(const json& j, const std::string& path) {
    const auto map = j.find("weight_map");
    if (map == j.end() || !map->is_object())
        detail::checkpoint_fail(path, "no \"weight_map\" object");
    std::map<std::string, std::set<std::string>> shards;
    for (const auto& [name, file] : map->items()) {
        if (!file.is_string())
            detail::checkpoint_fail(path, "shard of '" + name + "' is not a string");
        const std::string f = file.get<std::string>();
        // Shards are files beside the index, never paths elsewhere.
        if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
            f == "." || f == "..")
            detail::checkpoint_fail(path, "shard '" + f + "' of '" + name +
                                              "' is not a file name in the index's folder");
        shards[f].insert(name);
    }
    if (shards.empty()) detail::checkpoint_fail(path, "the weight_map lists no tensor");
    return shards;
}

// `metadata` for a shard: the int8 description (quant_int8.h) lists only the shard's weights,
// so each shard dequantises alone.
std::map<std::string, std::string> metadata_for_shard(
    const std::map<std::string, std::string>& metadata, const StateDict& shard) {
    auto out = metadata;
    const auto q = out.find(kQuantMetadataKey);
    if (q == out.end()) return out;
    json desc = json::parse(q->second, nullptr, /*allow_exceptions=*/false);
    if (!desc.is_object() || !desc.contains("tensors") || !desc["tensors"].is_array())
        return out;  // malformed: left for the reader to name
    json kept = json::array();
    for (const auto& n : desc["tensors"])
        if (n.is_string() && shard.count(n.get<std::string>())) kept.push_back(n);
    if (kept.empty()) {
        out.erase(q);
    } else {
        desc["tensors"] = kept;
        q->second = desc.dump();
    }
    return out;
}

}  // namespace

bool is_safetensors_index(const std::string& path) {
    return has_suffix(path, kIndexSuffix);
}

std::map<std::string, std::string> read_safetensors_index_metadata(const std::string& index_path) {
    const json j = read_index(index_path);
    std::map<std::string, std::string> out;
    if (const auto m = j.find("metadata"); m != j.end() && m->is_object())
        for (const auto& [k, v] : m->items())
            if (v.is_string()) out[k] = v.get<std::string>();  // HF's total_size is a number
    return out;
}

StateDict load_safetensors_index(const std::string& index_path,
                                 const std::function<bool(const std::string&)>& keep) {
    const json j = read_index(index_path);
    const fs::path dir = fs::path(index_path).parent_path();
    StateDict out;
    for (const auto& [file, names] : shards_of(j, index_path)) {
        const bool wanted = !keep || std::any_of(names.begin(), names.end(),
                                                 [&](const auto& n) { return keep(n); });
        if (!wanted) continue;
        const std::string shard = (dir / file).string();
        const auto held = read_safetensors_names(shard);  // names the shard when missing
        const std::set<std::string> in_shard(held.begin(), held.end());
        for (const auto& n : names)
            if (!in_shard.count(n))
                detail::checkpoint_fail(
                    shard, "lacks tensor '" + n + "' that " + index_path + " places there");
        for (const auto& n : in_shard)
            if (!names.count(n))
                detail::checkpoint_fail(
                    shard, "holds tensor '" + n + "' that " + index_path + " does not list there");
        StateDict part = keep ? load_safetensors_selected(shard, keep) : load_safetensors(shard);
        for (auto& [n, t] : part) out.emplace(n, std::move(t));
    }
    return out;
}

std::string save_safetensors_sharded(const StateDict& tensors, const std::string& path,
                                     const std::map<std::string, std::string>& metadata,
                                     uint64_t max_file_bytes) {
    const std::string ext = ".safetensors";
    if (!has_suffix(path, ext))
        detail::checkpoint_fail(path, "a sharded checkpoint's path must end in .safetensors");
    // Groups: a name and the names that extend it with a '.' (sorted, they follow it).
    std::vector<std::vector<std::string>> groups;
    for (const auto& [name, t] : tensors) {
        if (!groups.empty() && name.rfind(groups.back().front() + ".", 0) == 0)
            groups.back().push_back(name);
        else
            groups.push_back({name});
    }
    // The header costs too: a shard is cut with room for its JSON (the metadata every shard
    // repeats, and a generous entry per tensor).
    constexpr uint64_t kHeaderPerTensor = 256;
    json meta_json = json::object();
    for (const auto& [k, v] : metadata) meta_json[k] = v;
    const uint64_t header_base = meta_json.dump().size() + 64;
    auto bytes_of = [&](const std::vector<std::string>& g) {
        uint64_t n = 0;
        for (const auto& name : g) n += tensors.at(name).nbytes() + kHeaderPerTensor;
        return n;
    };
    std::vector<StateDict> shards(1);
    uint64_t used = header_base;
    for (const auto& g : groups) {
        const uint64_t n = bytes_of(g);
        if (!shards.back().empty() && used + n > max_file_bytes) {
            shards.emplace_back();
            used = header_base;
        }
        for (const auto& name : g) shards.back()[name] = tensors.at(name);
        used += n;
    }
    // The loaders prefer `path` to its index (resources.cpp): the form not written is removed
    // once the new one is complete, so a re-export never leaves the older model in front.
    const std::string index = path + ".index.json";
    std::error_code ignored;
    if (shards.size() == 1) {
        save_safetensors(tensors, path, metadata);
        fs::remove(index, ignored);
        return path;
    }
    const fs::path base(path);
    const std::string stem =
        base.filename().string().substr(0, base.filename().string().size() - ext.size());
    json weight_map = json::object();
    uint64_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
        char name[64];
        std::snprintf(name, sizeof(name), "-%05zu-of-%05zu", i + 1, shards.size());
        const std::string file = stem + name + ext;
        save_safetensors(shards[i], (base.parent_path() / file).string(),
                         metadata_for_shard(metadata, shards[i]));
        for (const auto& [n, t] : shards[i]) {
            weight_map[n] = file;
            total += t.nbytes();
        }
    }
    json meta = meta_json;
    meta["total_size"] = total;
    write_file_atomic(index, json{{"metadata", meta}, {"weight_map", weight_map}}.dump(1) + "\n");
    fs::remove(path, ignored);
    return index;
}

}  // namespace varscope
