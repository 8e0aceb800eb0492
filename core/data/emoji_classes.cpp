#include "core/data/emoji_classes.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/io/json_read.h"

namespace varscope {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::invalid_argument("class list '" + path + "': " + what);
}

std::string optional_string(const json& entry, const char* key, const std::string& path,
                            const std::string& where) {
    const auto it = entry.find(key);
    if (it == entry.end() || it->is_null()) return {};
    if (!it->is_string()) fail(path, where + ": \"" + key + "\" must be a string");
    return it->get<std::string>();
}

}  // namespace

std::vector<ClassInfo> load_class_list(const std::string& json_path) {
    json doc;
    try {
        doc = read_json_file(json_path, "the class list");
    } catch (const JsonReadError& e) {
        fail(json_path, e.what());
    }
    if (!doc.is_object()) fail(json_path, "expected a JSON object with a \"classes\" array");
    const auto classes = doc.find("classes");
    if (classes == doc.end() || !classes->is_array())
        fail(json_path, "expected a \"classes\" array at the top level");
    if (classes->empty()) fail(json_path, "\"classes\" is empty");

    std::vector<ClassInfo> out;
    out.reserve(classes->size());
    for (size_t i = 0; i < classes->size(); ++i) {
        const json& e = (*classes)[i];
        const std::string where = "entry " + std::to_string(i);
        if (!e.is_object()) fail(json_path, where + " is not an object");
        const auto id = e.find("id");
        if (id == e.end() || !id->is_number_integer())
            fail(json_path, where + ": missing integer \"id\"");
        if (id->get<int64_t>() != static_cast<int64_t>(i))
            fail(json_path, where + " has id " + std::to_string(id->get<int64_t>()) +
                                "; ids must be 0, 1, 2, ... in order");
        ClassInfo c;
        c.name = optional_string(e, "name", json_path, where);
        if (c.name.empty()) fail(json_path, where + ": missing or empty \"name\"");
        c.short_name = optional_string(e, "short_name", json_path, where);
        c.category = optional_string(e, "category", json_path, where);
        if (const auto al = e.find("aliases"); al != e.end() && !al->is_null()) {
            if (!al->is_array())
                fail(json_path, where + ": \"aliases\" must be an array of strings");
            for (const json& a : *al) {
                if (!a.is_string())
                    fail(json_path, where + ": \"aliases\" must be an array of strings");
                c.aliases.push_back(a.get<std::string>());
            }
        }
        out.push_back(std::move(c));
    }
    return out;
}

}  // namespace varscope
