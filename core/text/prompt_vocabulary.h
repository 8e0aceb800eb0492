// The words a small text-to-image model was trained on (issue #33), and the prompt filter that
// leaves out the others. A T5 trained here on a few thousand emoji captions knows only their
// words; any other word reaches it as a run of single-letter pieces it never saw, which pulls its
// features off the training distribution (the held-out wordings' failure, measured in the model
// card). The model's folder states its words in prompt_vocabulary.json, written from the
// training phrasings only; the text encoder then drops prompt words outside it before tokenizing
// and says which ones (T5TextEncoder, the front ends' notices). Models without the file (flan-t5)
// are untouched.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace varscope {

// The words of `text` as the vocabulary counts them: caption_text's normal form (lower case,
// single spaces) split at spaces, each word stripped of the punctuation at its ends
// (",.;:!?\"()[]"); empty words are skipped. "Thumbs up, (dark skin tone)!" -> thumbs, up, dark,
// skin, tone.
std::vector<std::string> prompt_words(std::string_view text);

struct FilteredPrompt {
    std::string text;                  // what the tokenizer gets
    std::vector<std::string> dropped;  // the words left out, in prompt order (repeats kept)
    bool no_known_word = false;        // the prompt has words, none of them known: kept as given
    bool changed() const { return !dropped.empty(); }
};

class PromptVocabulary {
  public:
    // The words of the given phrasings (prompt_words of each).
    static PromptVocabulary from_phrasings(const std::vector<std::string>& phrasings);
    // {"format": "varscope-prompt-vocabulary", "version": 1, "words": [sorted]}; throws
    // std::invalid_argument naming `what` for another format, version or a non-string word.
    static PromptVocabulary from_json(const nlohmann::json& j, const std::string& what);
    // Reads and parses `path`; throws std::invalid_argument naming the file when it is missing,
    // unreadable, not JSON or not that format.
    static PromptVocabulary load(const std::string& path);
    nlohmann::json to_json() const;  // words sorted: the same vocabulary, the same bytes

    bool contains(std::string_view word) const;
    int64_t size() const { return static_cast<int64_t>(words_.size()); }

    // `prompt` without its unknown words. Each space-separated part is kept whole when its word
    // is known or it is punctuation alone (",", "!"); an unknown one is dropped, except for the
    // punctuation at its end where that still separates what is kept ("an icon showing moon, from
    // the travel & places category" -> "moon, the travel & places"); the result is in
    // caption_text's form. Nothing to drop: the prompt exactly as given (the tokens do not change).
    // No known word at all: the prompt as given too, no_known_word set (the model sees what was
    // typed rather than nothing; the caller says so).
    FilteredPrompt filter(std::string_view prompt) const;

  private:
    std::unordered_set<std::string> words_;
};

}  // namespace varscope
