#include "core/eval/shards.h"

#include <algorithm>
#include <filesystem>

#include "core/io/json_read.h"

namespace varscope {

int64_t EvalShard::images() const {
    int64_t n = 0;
    for (const auto& u : units) n += static_cast<int64_t>(u.conditions.size());
    return n;
}

std::vector<EvalShard> plan_shards(const EvalManifest& m) {
    std::vector<EvalUnit> units;
    const int64_t n = m.conditions();
    for (uint64_t seed : m.seeds) {
        for (int64_t first = 0; first < n; first += m.batch) {
            EvalUnit u{seed, {}};
            for (int64_t c = first; c < std::min(n, first + m.batch); ++c)
                u.conditions.push_back(c);
            units.push_back(std::move(u));
        }
    }
    std::vector<EvalShard> shards;
    for (size_t i = 0; i < units.size(); ++i) {
        if (i % m.batches_per_shard == 0)
            shards.push_back({static_cast<int64_t>(shards.size()), {}});
        shards.back().units.push_back(units[i]);
    }
    return shards;
}

std::vector<int64_t> shards_of_rank(int64_t shards, int rank, int world) {
    std::vector<int64_t> mine;
    for (int64_t s = rank; s < shards; s += world) mine.push_back(s);
    return mine;
}

std::vector<int64_t> in_shape_order(std::vector<int64_t> todo,
                                    const std::vector<EvalShard>& shards) {
    const auto sizes = [&](int64_t index) {
        std::vector<size_t> out;
        for (const auto& u : shards.at(static_cast<size_t>(index)).units)
            out.push_back(u.conditions.size());
        return out;
    };
    std::stable_sort(todo.begin(), todo.end(),
                     [&](int64_t a, int64_t b) { return sizes(a) > sizes(b); });
    return todo;
}

nlohmann::json shard_outcome(nlohmann::json shard) {
    for (const char* key : {"timing", "graph_releases", "graph_captures"}) shard.erase(key);
    return shard;
}

std::string manifest_fingerprint(const EvalManifest& m) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : m.work_json().dump()) {
        h ^= c;
        h *= 1099511628211ull;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

std::string shard_path(const std::string& output_dir, int64_t index) {
    char name[32];
    std::snprintf(name, sizeof name, "shard-%05lld.json", static_cast<long long>(index));
    return (std::filesystem::path(output_dir) / "shards" / name).string();
}

void check_shard_result(const nlohmann::json& j, int64_t index, const std::string& fingerprint,
                        const std::string& source) {
    const std::string redo = " (delete it to compute that shard again)";
    if (!j.is_object() || !j.contains("fingerprint") || !j.contains("shard") ||
        !j.contains("images") || !j["images"].is_array() || !j.contains("timing") ||
        !j["timing"].is_object())
        throw ShardFileError(source + ": not a shard result of varscope-cli eval" + redo);
    if (j["fingerprint"] != fingerprint)
        throw ShardFileError(source + ": made by another manifest (fingerprint " +
                             j["fingerprint"].dump() + ", this job's \"" + fingerprint +
                             "\"): use another output_dir, or delete the old shards");
    for (const char* count : {"graph_releases", "graph_captures"})
        if (j.contains(count) && !(j[count].is_number_integer() && j[count].get<int64_t>() >= 0))
            throw ShardFileError(source + ": \"" + count + "\" must be a whole number >= 0" + redo);
    for (const auto& img : j["images"]) {
        const bool ok =
            img.is_object() && img.contains("config") && img["config"].is_string() &&
            img.contains("seed") && img.contains("condition") && img.contains("psnr_db") &&
            (img["psnr_db"].is_null() || img["psnr_db"].is_number()) && img.contains("ssim") &&
            img["ssim"].is_number() && img.contains("token_agreement") &&
            (img["token_agreement"].is_null() || img["token_agreement"].is_number());
        if (!ok)
            throw ShardFileError(source + ": an image entry is malformed: " + img.dump() + redo);
    }
    for (const auto& [name, t] : j["timing"].items()) {
        bool ok = t.is_object() && t.contains("calls") && t["calls"].is_array() &&
                  t.contains("peak_memory_bytes") &&
                  (t["peak_memory_bytes"].is_null() || t["peak_memory_bytes"].is_number_integer());
        if (ok)
            for (const auto& c : t["calls"])
                ok = ok && c.is_object() && c.contains("images") &&
                     c["images"].is_number_integer() && c.contains("millis") &&
                     c["millis"].is_number();
        if (!ok)
            throw ShardFileError(source + ": the timing of '" + name + "' is malformed" + redo);
    }
    if (j["shard"] != index)
        throw ShardFileError(source + ": holds shard " + j["shard"].dump() + ", expected " +
                             std::to_string(index) + redo);
}

std::optional<nlohmann::json> read_shard_result(const std::string& path, int64_t index,
                                                const std::string& fingerprint) {
    if (!std::filesystem::exists(path)) return std::nullopt;
    const std::string source = "shard file '" + path + "'";
    nlohmann::json j;
    try {
        j = read_json_file(path, source);
    } catch (const JsonReadError& e) {
        throw ShardFileError(std::string(e.what()) +
                             " (damaged: delete it to compute that "
                             "shard again)");
    }
    check_shard_result(j, index, fingerprint, source);
    return j;
}

}  // namespace varscope
