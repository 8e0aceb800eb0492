// The CLI's seed options (--seed, --init-seed) accept a whole number in [0, 2^64 - 1]: CLI11
// alone wrapped "-1" to 2^64 - 1 and clamped larger numbers, so two different seeds could give
// one image.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace varscope::cli {

inline CLI::Validator seed_validator() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
                return "a seed is a whole number >= 0, got '" + s + "'";
            errno = 0;
            (void)std::strtoull(s.c_str(), nullptr, 10);
            if (errno == ERANGE) return "a seed is at most 18446744073709551615, got " + s;
            return {};
        },
        "SEED");
}

}  // namespace varscope::cli
