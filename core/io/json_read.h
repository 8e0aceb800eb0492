// Every JSON the project reads goes through here (configs, accelerator settings, safetensors
// headers and metadata, the app's settings): one place bounds what a stranger's file can do.
//  - Nesting is bounded: nlohmann's parser is iterative, but its serializer (dump(), used in
//    error messages) recurses, and a 100k-deep `--accel` overflowed the stack.
//  - A key twice in one object is refused: nlohmann keeps the last one silently, so
//    {"steps": 10, ..., "steps": 1e6} would run what the reader of the file did not see first.
//  - Files must be regular: opening a FIFO for reading blocks until a writer comes (forever).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace varscope {

// Deepest nesting accepted (objects and arrays); the project's files use at most 5 levels.
inline constexpr int kMaxJsonDepth = 64;
// Largest JSON file read whole (configs are a few KB; the emoji class index ~100 KB).
inline constexpr uint64_t kMaxJsonFileBytes = 64ull << 20;

// A JSON input refused: syntax, depth, a duplicate key, or a file that is not a regular file.
// An invalid_argument: the CLI reports it as bad input (exit 2).
class JsonReadError : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

// Parses `text`. Throws JsonReadError("<what>: ...") for invalid JSON (also numbers out of
// range), nesting deeper than `max_depth`, or a key that appears twice in one object.
nlohmann::json parse_json(std::string_view text, const std::string& what,
                          int max_depth = kMaxJsonDepth);

// The bytes of the file at `path` (symlinks followed). A folder, FIFO, device or socket is
// refused without blocking, as is a file over `max_bytes`. Throws JsonReadError("<what>: ...").
std::string read_regular_file(const std::string& path, const std::string& what,
                              uint64_t max_bytes = kMaxJsonFileBytes);

// read_regular_file + parse_json. `what` names the file for messages, e.g. "config 'a.json'".
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace varscope
