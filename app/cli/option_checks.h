// CLI11 validators with messages a user can act on. CLI11's NonNegativeNumber printed its bound
// as "[0 - 1.79769e+308]" (`--top-k -1`), and an empty value became 0 (`--patch-nums ""` read
// as [0]) or, for --prompt, no prompt at all (a random class).
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

namespace varscope::cli {

// A whole number >= lo.
inline CLI::Validator whole_number_at_least(long long lo) {
    return CLI::Validator(
        [lo](std::string& s) -> std::string {
            const std::string want = "must be a whole number >= " + std::to_string(lo);
            errno = 0;
            char* end = nullptr;
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (s.empty() || *end != '\0' || errno == ERANGE) return want + ", got '" + s + "'";
            if (v < lo) return want + ", got " + s;
            return {};
        },
        "INT>=" + std::to_string(lo));
}

// A finite number >= lo.
inline CLI::Validator number_at_least(double lo) {
    std::ostringstream bound;
    bound << lo;
    return CLI::Validator(
        [lo, b = bound.str()](std::string& s) -> std::string {
            const std::string want = "must be a number >= " + b;
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || *end != '\0' || !std::isfinite(v)) return want + ", got '" + s + "'";
            if (v < lo) return want + ", got " + s;
            return {};
        },
        "NUMBER>=" + bound.str());
}

// Text with something other than spaces in it; `what` says what was expected.
inline CLI::Validator not_blank(const std::string& what) {
    return CLI::Validator(
        [what](std::string& s) -> std::string {
            if (s.find_first_not_of(" \t\n") == std::string::npos)
                return "is empty; expected " + what;
            return {};
        },
        "");
}

}  // namespace varscope::cli
