// `varscope-cli pack-emoji`: packs the emoji64 dataset (Noto / Twemoji PNGs + emoji.json) into one
// safetensors file for training, with every row's text captions in its metadata
// (core/data/emoji_captions.h), and writes the class list the app ships with the emoji model.
#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/io_paths.h"
#include "app/cli/mar_cli_common.h"  // check_distinct_outputs
#include "core/data/emoji_captions.h"
#include "core/io/atomic_file.h"
#include "core/io/checkpoint.h"
#include "core/io/json_read.h"

#ifdef VARSCOPE_HAVE_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#endif

namespace fs = std::filesystem;

namespace varscope::cli {
namespace {

struct PackOptions {
    std::string dataset, out, classes_out;
    bool force = false;
};

#ifdef VARSCOPE_HAVE_OPENCV

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;  // keeps "id" first in the class list
constexpr int kSize = 64;
const char* const kStyles[] = {"google", "twitter"};  // style index = position

std::string json_string(const json& e, const char* key) {
    const auto it = e.find(key);
    return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Reads a 64x64 PNG and writes it as (3, 64, 64) RGB uint8, RGBA composited on white.
void read_emoji_png(const std::string& path, uint8_t* chw) {
    const cv::Mat m = cv::imread(path, cv::IMREAD_UNCHANGED);
    if (m.empty()) throw std::invalid_argument("cannot read image '" + path + "'");
    if (m.depth() != CV_8U)
        throw std::invalid_argument("image '" + path + "' is not 8-bit per channel");
    if (m.rows != kSize || m.cols != kSize)
        throw std::invalid_argument("image '" + path + "' is " + std::to_string(m.cols) + "x" +
                                    std::to_string(m.rows) + ", expected 64x64");
    const int ch = m.channels();
    if (ch != 1 && ch != 2 && ch != 3 && ch != 4)
        throw std::invalid_argument("image '" + path + "' has " + std::to_string(ch) + " channels");
    constexpr int plane = kSize * kSize;
    for (int y = 0; y < kSize; ++y) {
        const uint8_t* row = m.ptr<uint8_t>(y);
        for (int x = 0; x < kSize; ++x) {
            const uint8_t* px = row + x * ch;
            // OpenCV order: B, G, R (, A); gray (, A).
            float rgb[3];
            for (int c = 0; c < 3; ++c) rgb[c] = ch >= 3 ? px[2 - c] : px[0];
            const bool has_alpha = ch == 2 || ch == 4;
            const float a = has_alpha ? px[ch - 1] / 255.0f : 1.0f;
            for (int c = 0; c < 3; ++c) {
                const float v = std::round(rgb[c] * a + 255.0f * (1.0f - a));
                chw[c * plane + y * kSize + x] =
                    static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, v)));
            }
        }
    }
}

void check_writable(const std::string& path, bool force, const std::string& flag) {
    check_not_an_input(path, flag);  // --force or not
    const fs::path p(path);
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    if (!fs::is_directory(dir))
        throw std::invalid_argument("output folder '" + dir.string() + "' does not exist");
    if (fs::exists(p) && !force)
        throw std::invalid_argument("'" + path + "' exists; pass --force to overwrite it");
}

// One class per line so that the committed file diffs well.
void write_class_list(const ordered_json& classes, const std::string& path) {
    std::string text = "{\"source\": \"emoji64 emoji.json\", \"classes\": [\n";
    for (size_t i = 0; i < classes.size(); ++i)
        text += "  " + classes[i].dump() + (i + 1 < classes.size() ? ",\n" : "\n");
    text += "]}\n";
    write_file_atomic(path, text);
}

int run_pack(const PackOptions& o) {
    const fs::path root(o.dataset);
    const fs::path index = root / "emoji.json";
    if (!fs::is_regular_file(index))
        throw std::invalid_argument("'" + index.string() +
                                    "' not found (is --dataset the emoji64 folder?)");
    for (const char* s : kStyles)
        if (!fs::is_directory(root / s))
            throw std::invalid_argument("'" + (root / s).string() + "' is not a folder");
    record_input(index.string(), "--dataset");
    check_writable(o.out, o.force, "--out");
    check_writable(o.classes_out, o.force, "--classes-out");
    check_distinct_outputs({{"--out", o.out}, {"--classes-out", o.classes_out}});

    const json emoji = read_json_file(index.string(), "'" + index.string() + "'");
    if (!emoji.is_array() || emoji.empty())
        throw std::invalid_argument("'" + index.string() + "' should be a non-empty list of emoji");
    // Optional: fills a category or subcategory an entry lacks in the captions.
    const fs::path categories_path = root / "categories.json";
    json categories;
    if (fs::exists(categories_path)) {
        record_input(categories_path.string(), "--dataset");
        categories = read_json_file(categories_path.string(), "'" + categories_path.string() + "'");
        if (!categories.is_object())
            throw std::invalid_argument("'" + categories_path.string() +
                                        "' should be an object {category: {subcategory: [...]}}");
    }

    // Class list and the (class, file) pairs; skin-tone variants are samples of their base class.
    ordered_json classes = ordered_json::array();
    struct File {
        int64_t label;
        std::string image, skin_tone;  // skin tone "" for the base image
    };
    std::vector<File> files;
    for (size_t i = 0; i < emoji.size(); ++i) {
        const json& e = emoji[i];
        const std::string image = e.is_object() ? json_string(e, "image") : std::string();
        if (image.empty())
            throw std::invalid_argument("'" + index.string() + "' entry " + std::to_string(i) +
                                        " has no \"image\"");
        ordered_json aliases = ordered_json::array();
        if (const auto sn = e.find("short_names"); sn != e.end() && sn->is_array())
            for (const auto& a : *sn)
                if (a.is_string()) aliases.push_back(a.get<std::string>());
        std::string name = json_string(e, "name");
        if (name.empty()) name = json_string(e, "short_name");  // never empty in practice
        classes.push_back(ordered_json{{"id", i},
                                       {"name", name},
                                       {"short_name", json_string(e, "short_name")},
                                       {"aliases", aliases},
                                       {"category", json_string(e, "category")}});
        files.push_back({static_cast<int64_t>(i), image, ""});
        if (const auto sv = e.find("skin_variations"); sv != e.end() && sv->is_object())
            for (const auto& [tone, v] : sv->items()) {  // nlohmann orders keys: deterministic
                const std::string vi = v.is_object() ? json_string(v, "image") : std::string();
                if (vi.empty())
                    throw std::invalid_argument("'" + index.string() + "' entry " +
                                                std::to_string(i) + ", skin tone " + tone +
                                                " has no \"image\"");
                files.push_back({static_cast<int64_t>(i), vi, tone});
            }
    }

    // Samples: class-major, then style, then base image before its skin tones.
    struct Sample {
        int64_t label;
        uint8_t style;
        std::string path, skin_tone;
    };
    std::vector<Sample> samples;
    int64_t missing = 0;
    int64_t per_style[2] = {0, 0};
    size_t next = 0;
    for (int64_t cls = 0; cls < static_cast<int64_t>(classes.size()); ++cls) {
        const size_t begin = next;
        while (next < files.size() && files[next].label == cls) ++next;
        for (uint8_t s = 0; s < 2; ++s)
            for (size_t f = begin; f < next; ++f) {
                const fs::path p = root / kStyles[s] / files[f].image;
                if (!fs::exists(p)) {
                    ++missing;
                    continue;
                }
                samples.push_back({cls, s, p.string(), files[f].skin_tone});
                ++per_style[s];
            }
    }
    if (samples.empty())
        throw std::invalid_argument("no images found under '" + root.string() + "'");

    const auto n = static_cast<int64_t>(samples.size());
    at::Tensor images = at::empty({n, 3, kSize, kSize}, at::kByte);
    at::Tensor labels = at::empty({n}, at::kLong);
    at::Tensor styles = at::empty({n}, at::kByte);
    uint8_t* img = images.data_ptr<uint8_t>();
    int64_t* lab = labels.data_ptr<int64_t>();
    uint8_t* sty = styles.data_ptr<uint8_t>();
    EmojiCaptions captions;
    size_t heldout_phrasings = 0, train_phrasings = 0;
    for (int64_t i = 0; i < n; ++i) {
        const Sample& s = samples[static_cast<size_t>(i)];
        read_emoji_png(s.path, img + i * 3 * kSize * kSize);
        lab[i] = s.label;
        sty[i] = s.style;
        const auto entry = static_cast<size_t>(s.label);
        EmojiPhrasings p = emoji_phrasings(emoji_caption_source(
            emoji[entry], categories, s.skin_tone, static_cast<EmojiStyle>(s.style),
            "'" + index.string() + "' entry " + std::to_string(entry)));
        train_phrasings += p.train.size();
        heldout_phrasings += p.heldout.size();
        captions.train.push_back(std::move(p.train));
        captions.heldout.push_back(std::move(p.heldout));
    }

    const std::map<std::string, std::string> meta = {
        {"dataset", "emoji64"},
        {"classes", std::to_string(classes.size())},
        {"missing", std::to_string(missing)},
        {kEmojiCaptionsMetadataKey, emoji_captions_to_json(captions)}};
    const std::string tmp = o.out + ".tmp";
    save_safetensors({{"images", images}, {"labels", labels}, {"styles", styles}}, tmp, meta);
    fs::rename(tmp, o.out);
    write_class_list(classes, o.classes_out);

    std::cout << "packed " << n << " images of " << classes.size() << " classes (google "
              << per_style[0] << ", twitter " << per_style[1] << "; missing " << missing << ")\n"
              << "  captions: " << train_phrasings << " training and " << heldout_phrasings
              << " held-out phrasings\n"
              << "  " << o.out << " (" << fs::file_size(o.out) << " bytes)\n"
              << "  " << o.classes_out << " (" << fs::file_size(o.classes_out) << " bytes)\n";
    return 0;
}

#endif  // VARSCOPE_HAVE_OPENCV

}  // namespace

Command add_pack_emoji(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "pack-emoji",
        "pack the emoji64 PNGs and their captions into one safetensors file and write the class "
        "list");
    auto o = std::make_shared<PackOptions>();
    cmd->add_option("--dataset", o->dataset, "emoji64 folder (emoji.json, google/, twitter/)")
        ->required();
    cmd->add_option("--out", o->out,
                    "output .safetensors (images, labels, styles; captions in its metadata)")
        ->required();
    cmd->add_option("--classes-out", o->classes_out, "output class list .json")->required();
    cmd->add_flag("--force", o->force, "overwrite existing output files");
    return [o]() -> int {
#ifdef VARSCOPE_HAVE_OPENCV
        return run_pack(*o);
#else
        (void)o;
        std::cerr << "error: pack-emoji needs a build with OpenCV\n";
        return 2;
#endif
    };
}

}  // namespace varscope::cli
