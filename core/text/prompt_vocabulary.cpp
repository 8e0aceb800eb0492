#include "core/text/prompt_vocabulary.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/data/emoji_captions.h"

namespace varscope {
namespace {

constexpr const char* kFormat = "varscope-prompt-vocabulary";
constexpr std::string_view kPunctuation = ",.;:!?\"()[]";

bool is_punctuation(char c) {
    return kPunctuation.find(c) != std::string_view::npos;
}

// One space-separated part: punctuation before, the word, punctuation after.
struct Part {
    std::string_view lead, word, trail;
};

Part split_part(std::string_view p) {
    size_t a = 0, b = p.size();
    while (a < b && is_punctuation(p[a])) ++a;
    while (b > a && is_punctuation(p[b - 1])) --b;
    return {p.substr(0, a), p.substr(a, b - a), p.substr(b)};
}

std::vector<std::string_view> split_spaces(std::string_view s) {
    std::vector<std::string_view> parts;
    size_t i = 0;
    while (i < s.size()) {
        const size_t j = std::min(s.find(' ', i), s.size());
        if (j > i) parts.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return parts;
}

}  // namespace

std::vector<std::string> prompt_words(std::string_view text) {
    const std::string normal = caption_text(std::string(text));
    std::vector<std::string> words;
    for (const auto p : split_spaces(normal))
        if (const Part part = split_part(p); !part.word.empty()) words.emplace_back(part.word);
    return words;
}

PromptVocabulary PromptVocabulary::from_phrasings(const std::vector<std::string>& phrasings) {
    PromptVocabulary v;
    for (const auto& p : phrasings)
        for (auto& w : prompt_words(p)) v.words_.insert(std::move(w));
    return v;
}

PromptVocabulary PromptVocabulary::from_json(const nlohmann::json& j, const std::string& what) {
    auto bad = [&](const std::string& why) {
        return std::invalid_argument(what + ": not a prompt vocabulary (" + why + ")");
    };
    if (!j.is_object() || j.value("format", nlohmann::json()) != kFormat)
        throw bad(std::string("expected \"format\": \"") + kFormat + "\"");
    if (j.value("version", nlohmann::json()) != 1)
        throw bad("unsupported \"version\" (this build reads version 1)");
    const auto words = j.find("words");
    if (words == j.end() || !words->is_array()) throw bad("no \"words\" array");
    PromptVocabulary v;
    for (const auto& w : *words) {
        if (!w.is_string() || w.get<std::string>().empty())
            throw bad("\"words\" holds an empty or non-string entry");
        v.words_.insert(w.get<std::string>());
    }
    return v;
}

PromptVocabulary PromptVocabulary::load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument("prompt vocabulary '" + path + "' cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument("prompt vocabulary '" + path + "' is not JSON: " + e.what());
    }
    return from_json(j, "prompt vocabulary '" + path + "'");
}

nlohmann::json PromptVocabulary::to_json() const {
    std::vector<std::string> sorted(words_.begin(), words_.end());
    std::sort(sorted.begin(), sorted.end());
    return {{"format", kFormat}, {"version", 1}, {"words", sorted}};
}

bool PromptVocabulary::contains(std::string_view word) const {
    return words_.count(std::string(word)) > 0;
}

FilteredPrompt PromptVocabulary::filter(std::string_view prompt) const {
    const std::string normal = caption_text(std::string(prompt));
    FilteredPrompt f;
    std::string out;
    bool known = false;
    for (const auto p : split_spaces(normal)) {
        const Part part = split_part(p);
        if (part.word.empty() || contains(part.word)) {
            if (!out.empty()) out += ' ';
            out += p;
            known = known || !part.word.empty();
            continue;
        }
        f.dropped.emplace_back(part.word);
        // "showing moon," keeps the comma after "moon"; a second one does not pile up.
        if (!part.trail.empty() && !out.empty() && !is_punctuation(out.back())) out += part.trail;
    }
    if (f.dropped.empty() || !known) {
        f.no_known_word = !f.dropped.empty();
        f.dropped.clear();
        f.text = std::string(prompt);
        return f;
    }
    // Punctuation left at either end separates nothing.
    size_t a = 0, b = out.size();
    while (a < b && (is_punctuation(out[a]) || out[a] == ' ')) ++a;
    while (b > a && (is_punctuation(out[b - 1]) || out[b - 1] == ' ')) --b;
    f.text = out.substr(a, b - a);
    return f;
}

}  // namespace varscope
