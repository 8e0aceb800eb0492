// Hyperparameter descriptions shared by the accelerators' config parsers, the CLI and the GUI's
// method panel: one table per method (name, paper symbol, range, default, help) drives the
// JSON validation, the error messages and the sliders, so they cannot drift apart.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace varscope {

enum class ParamKind { Bool, Int, Real, IntList, RealList };

// What an integer setting counts, so that front ends can bound its slider and sweep by the
// loaded model (a 10-scale VAR has no 12th scale to skip; 16 MAR steps leave start steps past
// 15 without effect). The JSON keeps the spec's range; each accelerator checks the model's.
enum class ParamCount { None, Scales, Tokens, Steps, DecoderBlocks };

// The loaded model's counts; 0 = not known (the spec's range applies).
struct ModelCounts {
    int64_t scales = 0;          // VAR: scales of the schedule
    int64_t tokens = 0;          // VAR: tokens of all scales
    int64_t steps = 0;           // MAR: decoding steps of the run
    int64_t decoder_blocks = 0;  // MAR: decoder blocks
    int64_t of(ParamCount c) const;
};

struct ParamSpec {
    std::string key;     // JSON key inside the method's object, e.g. "ratios"
    std::string label;   // UI label, e.g. "Pruning ratios (last N scales)"
    std::string symbol;  // the paper's symbol, e.g. "N", "τ", "C_min"; may be empty
    std::string help;    // tooltip: what it does; names the paper default
    ParamKind kind = ParamKind::Real;
    double min = 0.0;  // inclusive range of the value (of every element for lists)
    double max = 1.0;
    nlohmann::json default_value;  // the paper's default
    int64_t min_items = 1;         // list length range (lists only)
    int64_t max_items = 64;
    ParamCount counts = ParamCount::None;  // what the value counts (see counting())
    int64_t count_offset = 0;              // its largest valid value is the count + this
};

// `p` bounded by a model count: its largest valid value is count + offset with the other
// settings at their most permissive (e.g. Scales, -1: "below the model's scales"; SparVAR's
// sink scales, -2: up to the decision scale, which is at most the second to last). Used in the
// methods' spec tables.
ParamSpec counting(ParamSpec p, ParamCount what, int64_t offset);
// p's largest valid value on a model: the spec's max, lowered to the count's bound where the
// count is known (never below p.min).
double model_max(const ParamSpec& p, const ModelCounts& m);
// "scales", "tokens", "steps", "decoder blocks" ("" for None).
const char* param_count_name(ParamCount c);
// " (at most the model's scales - 1)" for a counted setting, "" otherwise.
std::string model_bound_text(const ParamSpec& p);

struct MethodSpec {
    std::string id;                   // JSON key of the method, e.g. "fastvar"
    std::string title;                // e.g. "FastVAR"
    std::string paper;                // e.g. "fastvar.txt §3, App. G"
    std::string summary;              // one sentence for the panel header
    std::vector<ParamSpec> params;    // "enabled" is implicit and always first
    nlohmann::json defaults() const;  // {"enabled": false, key: default...}
};

// Invalid accelerator configuration; the message starts with the field path
// ("fastvar.ratios[2]: must be in [0, 1], got 1.5").
class AccelConfigError : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

// The JSON of an accelerator config file; `kind` qualifies the messages ("" or "MAR ":
// "cannot open MAR accelerator config 'x'", "'x' is not valid JSON: ...").
nlohmann::json accel_file_json(const std::string& path, const std::string& kind);
// The JSON of an --accel argument: a preset name, inline JSON ("{...}") or a file path (then
// *file is set to it, so the caller can put the path in front of its validation errors); a
// preset name in another case ("FastVAR") where no file has that name.
nlohmann::json accel_argument_json(const std::string& arg,
                                   const std::map<std::string, nlohmann::json>& presets,
                                   const std::string& kind, std::string* file);
// parse() with AccelConfigError messages prefixed by "'path': " (nothing when path is empty).
template <class Parse>
auto with_config_path(const std::string& path, Parse&& parse) -> decltype(parse()) {
    if (path.empty()) return parse();
    try {
        return parse();
    } catch (const AccelConfigError& e) {
        throw AccelConfigError("'" + path + "': " + e.what());
    }
}

// Reads one method's JSON object against its spec: types, ranges, list lengths, and no
// unknown keys (a typo must not silently fall back to a default). Missing keys take defaults.
class ParamReader {
  public:
    ParamReader(const nlohmann::json& object, const MethodSpec& spec);
    bool enabled() const;
    bool get_bool(const std::string& key) const;
    int64_t get_int(const std::string& key) const;
    double get_real(const std::string& key) const;
    std::vector<int64_t> get_int_list(const std::string& key) const;
    std::vector<double> get_real_list(const std::string& key) const;
    [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  private:
    const ParamSpec& spec_of(const std::string& key) const;
    const nlohmann::json& value_of(const ParamSpec& p) const;
    const nlohmann::json& list_of(const std::string& key) const;  // array, length checked
    const nlohmann::json& obj_;
    const MethodSpec& spec_;
};

}  // namespace varscope
