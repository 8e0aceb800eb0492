// One rule for the JSON config readers (model and training configs): a key the reader does not
// know is an error, so that a misspelt field never falls back to its default without a word
// ("vocab_sizee": 64 trained the 256 px default and failed later on an unrelated shape).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace varscope {

// Throws std::invalid_argument("<what>: unknown field 'k' (allowed: a, b, ...)") for the first
// key of the object `j` that `known` (an object, e.g. a default config's to_json()) lacks and
// that is not in `also`.
inline void require_known_fields(const nlohmann::json& j, const nlohmann::json& known,
                                 const std::string& what,
                                 std::initializer_list<const char*> also = {}) {
    if (!j.is_object()) return;  // the reader says "expected a JSON object"
    for (const auto& item : j.items()) {
        const std::string& key = item.key();
        bool ok = known.contains(key);
        for (const char* a : also) ok = ok || key == a;
        if (ok) continue;
        std::string allowed;
        for (const auto& k : known.items()) allowed += (allowed.empty() ? "" : ", ") + k.key();
        for (const char* a : also) allowed += (allowed.empty() ? "" : ", ") + std::string(a);
        throw std::invalid_argument(what + ": unknown field '" + key + "' (allowed: " + allowed +
                                    ")");
    }
}

}  // namespace varscope
