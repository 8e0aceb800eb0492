// Text captions of the packed emoji64 rows (issue #33): several deterministic phrasings per image
// from emoji.json (name, short names, category, subcategory, skin tone) and the artwork style
// (google/ = Noto, twitter/ = Twemoji). Some TEMPLATES are held out for evaluation: every image
// has training phrasings, and held-out phrasings worded in ways training never sees.
// `varscope-cli pack-emoji` stores them in the packed file's safetensors "__metadata__" under
// kEmojiCaptionsMetadataKey; trainers read them back with load_emoji_captions.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace varscope {

// Row i of the packed file has train[i] and heldout[i] (both non-empty).
struct EmojiCaptions {
    std::vector<std::vector<std::string>> train, heldout;
};

// The packed "styles" value of a row.
enum class EmojiStyle : uint8_t { kNoto = 0, kTwemoji = 1 };

// What one packed row shows, as its captions need it.
struct EmojiCaptionSource {
    std::string name;                      // "THUMBS UP SIGN" (emoji.json "name")
    std::vector<std::string> short_names;  // "+1", "thumbsup"
    std::string category, subcategory;     // "People & Body", "hand-fingers-closed"
    std::string skin_tone;                 // "" (base image), "1F3FF" or "1F3FB-1F3FF" (two people)
    EmojiStyle style = EmojiStyle::kNoto;
};

struct EmojiPhrasings {
    std::vector<std::string> train, heldout;  // lower case, no duplicates, disjoint
};

// A row's description from its emoji.json entry. `categories` is categories.json
// ({category: {subcategory: [short_name, ...]}}) or null; it fills a category or subcategory the
// entry lacks. `skin_tone` is a key of the entry's "skin_variations" ("" for the base image).
// Throws std::invalid_argument naming `where` (e.g. "emoji.json entry 12") for a malformed entry
// or an unknown skin tone.
EmojiCaptionSource emoji_caption_source(const nlohmann::json& entry,
                                        const nlohmann::json& categories,
                                        const std::string& skin_tone, EmojiStyle style,
                                        const std::string& where);

// The phrasings of one row: a pure function of `source` (same input, same strings, same order).
// Throws std::invalid_argument for an empty name or an unknown skin tone.
EmojiPhrasings emoji_phrasings(const EmojiCaptionSource& source);

// The captions' text normal form: lower case (ASCII and the Latin-1 capitals of the flag names:
// "Åland", "São Tomé"), the typographic apostrophe as typed on a keyboard, single spaces, no
// space at either end. The tokenizer folds case too; lower-case captions keep encode -> decode an
// identity. Prompts are matched against the captions' words in this form.
std::string caption_text(const std::string& s);

// "light skin tone", "light and dark skin tones", ...; throws std::invalid_argument for a code
// that is not a Fitzpatrick modifier (1F3FB..1F3FF) or a pair of them.
std::string skin_tone_words(const std::string& code);

// The packed metadata entry: {"format": "varscope-emoji-captions", "version": 1, "rows": N,
// "train": [[...], ...], "heldout": [[...], ...]} as compact JSON (deterministic bytes).
inline constexpr const char* kEmojiCaptionsMetadataKey = "captions";
std::string emoji_captions_to_json(const EmojiCaptions& captions);
// The reverse; throws std::invalid_argument naming `what` when the text is not that format.
EmojiCaptions emoji_captions_from_json(const std::string& text, const std::string& what);

// The captions of a packed file (index = packed row, as its "labels" and "images"). Throws
// std::invalid_argument naming the file when it is missing, is not safetensors, has no
// captions (packed before captions existed: pack it again), or its captions are malformed or do
// not match its row count.
EmojiCaptions load_emoji_captions(const std::string& packed_path);

}  // namespace varscope
