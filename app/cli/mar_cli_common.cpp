#include "app/cli/mar_cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/cli/image_io.h"
#include "app/cli/io_paths.h"
#include "app/cli/option_checks.h"
#include "app/cli/seed_option.h"
#include "core/accel/lazymar.h"
#include "core/io/json_read.h"
#include "core/io/state_dict.h"  // CheckpointError
#include "core/models/sampling_recommendation.h"
#include "core/resources.h"

namespace varscope::cli {
namespace {

namespace fs = std::filesystem;

// Can a file be created in `dir`? (access() says yes for root even on read-only mounts.)
bool writable_dir(const fs::path& dir) {
    const fs::path probe = dir / (".varscope-write-test-" + std::to_string(::getpid()));
    bool ok = false;
    {
        std::ofstream f(probe);
        ok = static_cast<bool>(f);
    }
    std::error_code ec;
    fs::remove(probe, ec);
    return ok;
}

}  // namespace

MarConfig mar_config_argument(const std::string& spec) {
    if (spec.empty()) throw std::invalid_argument("--random needs a preset or a JSON config");
    // JSON errors name the flag and exit 2 (they were nlohmann's text alone, exit 3).
    const auto config_of = [&](const nlohmann::json& j) {
        try {
            return MarConfig::from_json(j);
        } catch (const nlohmann::json::exception& e) {
            throw std::invalid_argument("--random: " + std::string(e.what()));
        }
    };
    if (spec.front() == '{') return config_of(parse_json(spec, "--random: inline JSON"));
    // Whether a file is there, without opening it (opening a FIFO would block).
    std::error_code ec;
    if (fs::exists(spec, ec)) return config_of(read_json_file(spec, "--random: '" + spec + "'"));
    return MarConfig::named(spec);
}

void check_output_file(const std::string& path, bool force, const std::string& flag, bool image) {
    if (path.empty()) return;
    check_not_an_input(path, flag);  // --force or not
    const fs::path p(path);
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    std::error_code ec;
    if (!fs::exists(dir, ec))
        throw std::invalid_argument(flag + ": output folder '" + dir.string() + "' does not exist");
    if (!fs::is_directory(dir, ec))
        throw std::invalid_argument(flag + ": '" + dir.string() + "' is not a folder");
    if (fs::is_directory(p, ec))
        throw std::invalid_argument(flag + ": '" + path + "' is a folder, expected a file name");
    if (fs::exists(p, ec) && !force)
        throw std::invalid_argument(flag + ": '" + path + "' exists; pass --force to overwrite it");
    if (!writable_dir(dir))
        throw std::invalid_argument(flag + ": cannot write in '" + dir.string() + "'");
    if (image) {
        std::string ext = p.extension().string();
        std::transform(ext.begin(), ext.end(), ext.begin(),
                       [](unsigned char ch) { return std::tolower(ch); });
        if (ext == ".jpeg") ext = ".jpg";
        // supported_image_formats(): ".png, .jpg, .ppm, .npy" or ".ppm, .npy (...)".
        const std::string formats = supported_image_formats();
        const std::string list = formats.substr(0, formats.find(" ("));
        bool ok = false;
        std::istringstream in(list);
        for (std::string item; std::getline(in, item, ',');) {
            item.erase(0, item.find_first_not_of(' '));
            ok = ok || (!ext.empty() && item == ext);
        }
        if (!ok)
            throw std::invalid_argument(flag + ": unsupported image format '" + ext + "' for '" +
                                        path + "' (supported: " + formats + ")");
    }
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
    std::vector<std::pair<std::string, fs::path>> seen;  // flag, normalised path
    for (const auto& [flag, path] : outputs) {
        if (path.empty()) continue;
        std::error_code ec;
        fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
        if (ec) p = fs::absolute(path).lexically_normal();
        for (const auto& [other_flag, other] : seen)
            if (other == p)
                throw std::invalid_argument(
                    other_flag + (other_flag == flag ? " names '" : " and " + flag + " name '") +
                    path + "' twice: each output needs a file of its own");
        seen.emplace_back(flag, p);
    }
}

void check_generate_outputs(const std::string& out, int64_t n, const std::string& tokens_out,
                            const std::string& timings_json, bool force) {
    std::vector<std::pair<std::string, std::string>> outputs = {{"--tokens-out", tokens_out},
                                                                {"--timings-json", timings_json}};
    for (int64_t i = 0; i < n && !out.empty(); ++i) {
        outputs.emplace_back("--out", numbered_path(out, i, n));
        check_output_file(outputs.back().second, force, "--out");
    }
    check_distinct_outputs(outputs);
}

void prepare_output_dir(const std::string& dir, const std::string& flag) {
    if (dir.empty()) return;
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        throw std::invalid_argument(flag + ": '" + dir + "' exists and is not a folder");
    fs::create_directories(dir, ec);
    if (ec)
        throw std::invalid_argument(flag + ": cannot create the folder '" + dir +
                                    "': " + ec.message());
    if (!writable_dir(dir)) throw std::invalid_argument(flag + ": cannot write in '" + dir + "'");
}

}  // namespace varscope::cli
