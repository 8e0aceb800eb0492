#include "core/text/class_matcher.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace varscope {
namespace {

std::string to_lower(std::string s) {
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}

std::string trim(const std::string& s) {
    const auto not_space = [](unsigned char c) { return !std::isspace(c); };
    const auto b = std::find_if(s.begin(), s.end(), not_space);
    const auto e = std::find_if(s.rbegin(), s.rend(), not_space).base();
    return b < e ? std::string(b, e) : std::string();
}

// Lowercased runs of ASCII letters and digits.
std::vector<std::string> tokenize(const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (std::isalnum(c) && c < 128) {
            cur.push_back(static_cast<char>(std::tolower(c)));
        } else if (!cur.empty()) {
            out.push_back(std::move(cur));
            cur.clear();
        }
    }
    if (!cur.empty()) out.push_back(std::move(cur));
    return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// 1 for the same word; 0.5 when the prompt word starts a longer word ("cat" -> "caterpillar")
// or is the word in plural ("cats" -> "cat", "boxes" -> "box"); else 0.
double word_match(const std::string& prompt_word, const std::string& word) {
    if (prompt_word == word) return 1.0;
    if (prompt_word.size() >= 2 && starts_with(word, prompt_word)) return 0.5;
    if (word.size() >= 2 && starts_with(prompt_word, word)) {
        const std::string suffix = prompt_word.substr(word.size());
        if (suffix == "s" || suffix == "es") return 0.5;
    }
    return 0.0;
}

constexpr double kNameWeight = 1.0;
constexpr double kAliasWeight = 0.98;
// Level offsets; the part within a level stays below 1.
constexpr double kExact = 3, kAllWords = 2, kSomeWords = 1;

}  // namespace

ClassMatcher::ClassMatcher(std::vector<ClassInfo> classes) : classes_(std::move(classes)) {
    phrases_.resize(classes_.size());
    for (size_t i = 0; i < classes_.size(); ++i) {
        const ClassInfo& c = classes_[i];
        std::vector<std::string> seen;
        auto add = [&](const std::string& text, double weight) {
            Phrase p;
            p.raw = to_lower(trim(text));
            p.tokens = tokenize(text);
            if (p.tokens.empty() || std::find(seen.begin(), seen.end(), p.raw) != seen.end())
                return;
            seen.push_back(p.raw);
            for (const auto& t : p.tokens) p.joined += t;
            p.weight = weight;
            phrases_[i].push_back(std::move(p));
        };
        add(c.name, kNameWeight);
        add(c.short_name, kAliasWeight);
        for (const auto& a : c.aliases) add(a, kAliasWeight);
    }
}

std::vector<Match> ClassMatcher::rank(const std::string& prompt, size_t k) const {
    std::vector<Match> out;
    if (k == 0) return out;
    const std::string raw = to_lower(trim(prompt));

    // A plain integer is a class id when it is one.
    if (!raw.empty() && raw.size() <= 18 &&
        std::all_of(raw.begin(), raw.end(), [](unsigned char c) { return std::isdigit(c); })) {
        const int64_t id = std::stoll(raw);
        if (id < static_cast<int64_t>(classes_.size())) {
            out.push_back({id, std::numeric_limits<double>::infinity(),
                           classes_[static_cast<size_t>(id)].name});
            return out;
        }
    }

    std::vector<std::string> words;
    for (auto& t : tokenize(prompt))
        if (std::find(words.begin(), words.end(), t) == words.end()) words.push_back(std::move(t));
    if (words.empty()) return out;
    std::string joined;
    for (const auto& w : words) joined += w;

    std::vector<Match> all;
    for (size_t i = 0; i < classes_.size(); ++i) {
        double best = 0;
        for (const Phrase& p : phrases_[i]) {
            double score = 0;
            if (p.tokens == words || p.joined == joined) {
                score = kExact + 0.99 * p.weight + (p.raw == raw ? 0.005 : 0.0);
            } else {
                double prompt_sum = 0, min_word = 1;
                for (const auto& w : words) {
                    double m = 0;
                    for (const auto& t : p.tokens) m = std::max(m, word_match(w, t));
                    prompt_sum += m;
                    min_word = std::min(min_word, m);
                }
                if (prompt_sum == 0) continue;
                double phrase_sum = 0;
                for (const auto& t : p.tokens) {
                    double m = 0;
                    for (const auto& w : words) m = std::max(m, word_match(w, t));
                    phrase_sum += m;
                }
                const double level = min_word == 1.0 ? kAllWords : kSomeWords;
                score =
                    level + p.weight * (0.6 * prompt_sum / static_cast<double>(words.size()) +
                                        0.39 * phrase_sum / static_cast<double>(p.tokens.size()));
            }
            best = std::max(best, score);
        }
        if (best > 0) all.push_back({static_cast<int64_t>(i), best, classes_[i].name});
    }
    const size_t n = std::min(k, all.size());
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(),
                      [](const Match& a, const Match& b) {
                          return a.score != b.score ? a.score > b.score : a.class_id < b.class_id;
                      });
    all.resize(n);
    return all;
}

}  // namespace varscope
