#include "core/data/emoji_captions.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/io/checkpoint.h"

namespace varscope {
namespace {

using json = nlohmann::json;

bool is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

}  // namespace

std::string caption_text(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
            static_cast<unsigned char>(s[i + 2]) == 0x99) {  // U+2019 RIGHT SINGLE QUOTATION MARK
            out += '\'';
            i += 2;
        } else if (c == 0xC3 && i + 1 < s.size()) {
            auto next = static_cast<unsigned char>(s[i + 1]);
            if (next >= 0x80 && next <= 0x9E && next != 0x97) next += 0x20;  // U+00C0..U+00DE
            out += static_cast<char>(c);
            out += static_cast<char>(next);
            ++i;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            if (!out.empty() && out.back() != ' ') out += ' ';
        } else {
            out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : static_cast<char>(c);
        }
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

namespace {

// Identifier-like words ("thumbs_up", "flag-gb", "face-smiling") as words; a hyphen stays where
// it is not between two letters or digits ("-1").
std::string identifier_words(const std::string& s) {
    std::string out = s;
    for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] == '_') out[i] = ' ';
        if (out[i] == '-' && i > 0 && i + 1 < out.size() && is_alnum(out[i - 1]) &&
            is_alnum(out[i + 1]))
            out[i] = ' ';
    }
    return caption_text(out);
}

const char* tone_name(const std::string& code) {
    static const char* const kCodes[] = {"1F3FB", "1F3FC", "1F3FD", "1F3FE", "1F3FF"};
    static const char* const kNames[] = {"light", "medium-light", "medium", "medium-dark", "dark"};
    for (int i = 0; i < 5; ++i)
        if (code == kCodes[i]) return kNames[i];
    throw std::invalid_argument("unknown skin tone '" + code +
                                "' (expected 1F3FB..1F3FF or a pair such as 1F3FB-1F3FF)");
}

void add_unique(std::vector<std::string>& list, const std::string& s) {
    if (!s.empty() && std::find(list.begin(), list.end(), s) == list.end()) list.push_back(s);
}

std::string string_field(const json& e, const char* key, const std::string& where) {
    const auto it = e.find(key);
    if (it == e.end() || it->is_null()) return {};
    if (!it->is_string())
        throw std::invalid_argument(where + ": \"" + std::string(key) + "\" must be a string");
    return it->get<std::string>();
}

// categories.json: {category: {subcategory: [short_name, ...]}}; the first match wins.
bool find_in_categories(const json& categories, const std::vector<std::string>& short_names,
                        std::string& category, std::string& subcategory) {
    if (!categories.is_object()) return false;
    for (const auto& name : short_names)
        for (const auto& [cat, subs] : categories.items()) {
            if (!subs.is_object()) continue;
            for (const auto& [sub, names] : subs.items())
                if (names.is_array() &&
                    std::find(names.begin(), names.end(), name) != names.end()) {
                    category = cat;
                    subcategory = sub;
                    return true;
                }
        }
    return false;
}

[[noreturn]] void malformed(const std::string& what, const std::string& why) {
    throw std::invalid_argument(what + ": malformed captions (" + why + ")");
}

std::vector<std::vector<std::string>> phrasing_lists(const json& j, const char* key, size_t rows,
                                                     const std::string& what) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array()) malformed(what, std::string("no \"") + key + "\" array");
    if (it->size() != rows)
        malformed(what, std::string("\"") + key + "\" has " + std::to_string(it->size()) +
                            " rows, \"rows\" says " + std::to_string(rows));
    std::vector<std::vector<std::string>> out;
    out.reserve(rows);
    for (size_t r = 0; r < rows; ++r) {
        const json& row = (*it)[r];
        if (!row.is_array() || row.empty())
            malformed(what, std::string(key) + " row " + std::to_string(r) +
                                " is not a non-empty list of strings");
        std::vector<std::string> phrasings;
        for (const json& p : row) {
            if (!p.is_string() || p.get_ref<const std::string&>().empty())
                malformed(what, std::string(key) + " row " + std::to_string(r) +
                                    " has an empty or non-string phrasing");
            phrasings.push_back(p.get<std::string>());
        }
        out.push_back(std::move(phrasings));
    }
    return out;
}

}  // namespace

std::string skin_tone_words(const std::string& code) {
    const auto dash = code.find('-');
    if (dash == std::string::npos) return std::string(tone_name(code)) + " skin tone";
    const std::string a = tone_name(code.substr(0, dash)), b = tone_name(code.substr(dash + 1));
    return a == b ? a + " skin tone" : a + " and " + b + " skin tones";
}

EmojiCaptionSource emoji_caption_source(const nlohmann::json& entry,
                                        const nlohmann::json& categories,
                                        const std::string& skin_tone, EmojiStyle style,
                                        const std::string& where) {
    if (!entry.is_object()) throw std::invalid_argument(where + " is not an object");
    EmojiCaptionSource s;
    s.name = string_field(entry, "name", where);
    if (const auto sn = entry.find("short_names"); sn != entry.end() && !sn->is_null()) {
        if (!sn->is_array())
            throw std::invalid_argument(where + ": \"short_names\" must be an array of strings");
        for (const json& n : *sn) {
            if (!n.is_string())
                throw std::invalid_argument(where +
                                            ": \"short_names\" must be an array of strings");
            add_unique(s.short_names, n.get<std::string>());
        }
    }
    add_unique(s.short_names, string_field(entry, "short_name", where));
    if (s.name.empty() && !s.short_names.empty()) s.name = identifier_words(s.short_names[0]);
    if (caption_text(s.name).empty())
        throw std::invalid_argument(where + ": no \"name\" or \"short_name\" to caption it with");
    s.category = string_field(entry, "category", where);
    s.subcategory = string_field(entry, "subcategory", where);
    if (s.category.empty() || s.subcategory.empty()) {
        std::string cat, sub;
        if (find_in_categories(categories, s.short_names, cat, sub)) {
            if (s.category.empty()) s.category = cat;
            if (s.subcategory.empty()) s.subcategory = sub;
        }
    }
    if (!skin_tone.empty()) {
        const auto sv = entry.find("skin_variations");
        if (sv == entry.end() || !sv->is_object() || !sv->contains(skin_tone))
            throw std::invalid_argument(where + " has no skin variation '" + skin_tone + "'");
        try {
            skin_tone_words(skin_tone);
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(where + ": " + e.what());
        }
    }
    s.skin_tone = skin_tone;
    s.style = style;
    return s;
}

EmojiPhrasings emoji_phrasings(const EmojiCaptionSource& source) {
    const std::string name = caption_text(source.name);
    if (name.empty()) throw std::invalid_argument("emoji caption: empty name");
    std::vector<std::string> shorts;
    for (const auto& s : source.short_names)
        if (const std::string w = identifier_words(s); w != name) add_unique(shorts, w);
    const std::string primary = shorts.empty() ? name : shorts[0];
    const std::string style = source.style == EmojiStyle::kNoto ? "noto" : "twemoji";
    const std::string tone = source.skin_tone.empty() ? "" : skin_tone_words(source.skin_tone);
    const std::string category = caption_text(source.category);
    const std::string subcategory = identifier_words(source.subcategory);
    auto with = [](const std::string& sep, const std::string& part) {
        return part.empty() ? std::string() : sep + part;
    };

    EmojiPhrasings p;
    // Training templates. Changing one changes what the shipped models were trained on.
    add_unique(p.train, name);
    add_unique(p.train, name + with(", ", tone) + ", " + style + " style");
    add_unique(p.train, "a " + style + " emoji of " + name + with(" with ", tone));
    for (const auto& s : shorts) add_unique(p.train, s + " emoji" + with(", ", tone));
    if (!category.empty() || !subcategory.empty())
        add_unique(p.train, name + with(", ", subcategory) + with(", ", category));
    add_unique(p.train, style + " " + primary + with(" ", tone));

    // Held-out templates: wordings ("a picture of", "drawn in", "an icon showing", "from the
    // ... category") that no training template uses, for evaluating free-text prompts.
    std::vector<std::string> heldout;
    add_unique(heldout,
               "a picture of " + name + " drawn in the " + style + " style" + with(", ", tone));
    add_unique(heldout, "an icon showing " + primary + with(" with ", tone) +
                            (category.empty() ? "" : ", from the " + category + " category"));
    for (const auto& h : heldout)
        if (std::find(p.train.begin(), p.train.end(), h) == p.train.end()) p.heldout.push_back(h);
    return p;
}

std::string emoji_captions_to_json(const EmojiCaptions& captions) {
    if (captions.train.size() != captions.heldout.size())
        throw std::invalid_argument("emoji captions: " + std::to_string(captions.train.size()) +
                                    " train rows but " + std::to_string(captions.heldout.size()) +
                                    " held-out rows");
    nlohmann::ordered_json j;
    j["format"] = "varscope-emoji-captions";
    j["version"] = 1;
    j["rows"] = captions.train.size();
    j["train"] = captions.train;
    j["heldout"] = captions.heldout;
    return j.dump();
}

EmojiCaptions emoji_captions_from_json(const std::string& text, const std::string& what) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        malformed(what, std::string("not JSON: ") + e.what());
    }
    if (!j.is_object() || j.value("format", json()) != "varscope-emoji-captions")
        malformed(what, "expected \"format\": \"varscope-emoji-captions\"");
    if (j.value("version", json()) != 1)
        malformed(what, "unsupported \"version\" (this build reads version 1)");
    const auto rows = j.find("rows");
    if (rows == j.end() || !rows->is_number_unsigned())
        malformed(what, "no non-negative integer \"rows\"");
    const auto n = rows->get<size_t>();
    EmojiCaptions c;
    c.train = phrasing_lists(j, "train", n, what);
    c.heldout = phrasing_lists(j, "heldout", n, what);
    return c;
}

EmojiCaptions load_emoji_captions(const std::string& packed_path) {
    const std::string what = "packed data '" + packed_path + "'";
    if (!std::filesystem::is_regular_file(packed_path))
        throw std::invalid_argument(what + " not found");
    std::map<std::string, std::string> meta;
    StateDict labels;
    try {
        meta = read_safetensors_metadata(packed_path);
        labels = load_safetensors_selected(packed_path,
                                           [](const std::string& k) { return k == "labels"; });
    } catch (const CheckpointError& e) {
        throw std::invalid_argument(what + " is not a packed safetensors file: " + e.what());
    }
    const auto it = meta.find(kEmojiCaptionsMetadataKey);
    if (it == meta.end())
        throw std::invalid_argument(what +
                                    " has no captions (packed before captions existed?); pack it "
                                    "again with `varscope-cli pack-emoji`");
    EmojiCaptions c = emoji_captions_from_json(it->second, what);
    const auto lab = labels.find("labels");
    if (lab == labels.end() || lab->second.dim() != 1)
        throw std::invalid_argument(what + " has no 1-D \"labels\" tensor");
    if (lab->second.size(0) != static_cast<int64_t>(c.train.size()))
        malformed(what, std::to_string(c.train.size()) + " caption rows for " +
                            std::to_string(lab->second.size(0)) + " packed rows");
    return c;
}

}  // namespace varscope
