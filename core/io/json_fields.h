// Two rules for the JSON config readers (model and training configs): a key the reader does not
// know is an error, so that a misspelt field never falls back to its default without a word
// ("vocab_sizee": 64 trained the 256 px default and failed later on an unrelated shape); and a
// value is read only when the JSON library's conversion keeps its meaning (read_json_field).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

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

namespace detail {
template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
}  // namespace detail

// Whether `value` converts to T without the JSON library changing it: an integer type takes a
// JSON integer within its range only (the library casts a fractional number - 2.5 became 2 - and
// one out of range is undefined behaviour: 2.7e39 into int64 in a KL-VAE's "ch_mult", found by
// fuzz_config_json), a bool only true/false (not a number), a floating type any number, a string
// a string, a vector an array of such elements. Other types: the library's own checks.
template <class T>
bool json_value_fits(const nlohmann::json& value) {
    if constexpr (std::is_same_v<T, bool>) {
        return value.is_boolean();
    } else if constexpr (std::is_integral_v<T>) {
        if (value.is_number_unsigned())
            return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
        if (!value.is_number_integer()) return false;
        const int64_t v = value.get<int64_t>();
        if constexpr (std::is_signed_v<T>)
            return v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                   v <= static_cast<int64_t>(std::numeric_limits<T>::max());
        else
            return v >= 0 && static_cast<uint64_t>(v) <= std::numeric_limits<T>::max();
    } else if constexpr (std::is_floating_point_v<T>) {
        return value.is_number();
    } else if constexpr (std::is_same_v<T, std::string>) {
        return value.is_string();
    } else if constexpr (detail::is_vector<T>::value) {
        if (!value.is_array()) return false;
        for (const auto& e : value)
            if (!json_value_fits<typename T::value_type>(e)) return false;
        return true;
    } else {
        return true;
    }
}

// `value` as a T where it fits (json_value_fits), else std::invalid_argument("<what>: expected
// <kind>, got <value>") - for values read outside a config's fields (e.g. counts in shard files).
template <class T>
T json_as(const nlohmann::json& value, const std::string& what) {
    if (!json_value_fits<T>(value))
        throw std::invalid_argument(what + ": expected " +
                                    (std::is_integral_v<T> ? "a whole number" : "another type") +
                                    ", got " + value.dump());
    return value.get<T>();
}

// The config readers' field rule: when the object `j` has `key`, reads it into `v`; a value that
// does not fit (json_value_fits) or that the library refuses throws
// std::invalid_argument("<label>'<key>' has the wrong type"), e.g. label "VAR config: field ".
template <class T>
void read_json_field(const nlohmann::json& j, const char* key, T& v, const std::string& label) {
    if (!j.contains(key)) return;
    const auto& value = j.at(key);
    try {
        if (json_value_fits<T>(value)) {
            value.get_to(v);
            return;
        }
    } catch (const nlohmann::json::exception&) {
    }
    throw std::invalid_argument(label + "'" + key + "' has the wrong type");
}

}  // namespace varscope
