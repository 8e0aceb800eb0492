// Prompt -> class id for class-conditional models: ranks the classes of a shipped class list
// (core/data/emoji_classes.h) against a short free-text prompt such as "cat" or "red heart".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/emoji_classes.h"

namespace varscope {

struct Match {
    int64_t class_id = -1;
    double score = 0;   // higher is better; only the order is meaningful
    std::string label;  // the class's display name
};

// Matching is case-insensitive on words (runs of ASCII letters and digits). Each class is
// matched through its name, short name and aliases; the best of these counts. Order of results:
//   1. exact match of the whole prompt with a name/short name/alias (also "thumbs up" =
//   "thumbsup"),
//      the name before the aliases;
//   2. every prompt word present as a whole word;
//   3. some prompt words present, or present as a prefix ("cat" -> "caterpillar") or in plural
//      ("cats" -> "cat"); a whole word counts twice as much as a prefix.
// Within a level, more of the prompt matched ranks higher, then more of the name covered
// ("cat" -> "CAT" before "BLACK CAT"); remaining ties go to the lower class id.
// A prompt that is a plain non-negative integer below the class count returns that class only.
// An empty prompt (no words) gives no results; classes with nothing in common are left out.
class ClassMatcher {
  public:
    explicit ClassMatcher(std::vector<ClassInfo> classes);

    std::vector<Match> rank(const std::string& prompt, size_t k) const;

    size_t size() const { return classes_.size(); }
    const ClassInfo& info(int64_t class_id) const {
        return classes_.at(static_cast<size_t>(class_id));
    }

  private:
    struct Phrase {
        std::string raw;     // lowercased, trimmed
        std::string joined;  // tokens concatenated
        std::vector<std::string> tokens;
        double weight;  // the name counts a little more than aliases
    };
    std::vector<ClassInfo> classes_;
    std::vector<std::vector<Phrase>> phrases_;  // per class
};

}  // namespace varscope
