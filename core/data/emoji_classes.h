// Class-name lists shipped with class-conditional models (resources/models/emoji-classes.json,
// resources/imagenet-classes.json), so that a prompt or a UI can name classes instead of ids.
#pragma once

#include <string>
#include <vector>

namespace varscope {

struct ClassInfo {
    std::string name;                  // display name as the source spells it ("CAT FACE")
    std::string short_name;            // may be empty
    std::vector<std::string> aliases;  // other names ("cat", "tabby cat"); may be empty
    std::string category;              // may be empty
};

// Reads our class-list format:
//   {"source": "...", "classes": [{"id": 0, "name": "HASH KEY", "short_name": "hash",
//                                   "aliases": ["hash"], "category": "Symbols"}, ...]}
// "id" and "name" are required; ids must be 0, 1, 2, ... in order (the index a model uses).
// "short_name", "aliases" and "category" are optional. Throws std::invalid_argument naming the
// file and, where it applies, the entry.
std::vector<ClassInfo> load_class_list(const std::string& json_path);

}  // namespace varscope
