// The message of an error a test expects.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace varscope::testing {

// What `f` throws as an E (or a type derived from it; anything else propagates and fails the
// test), as its message; `none` when it throws nothing.
template <class E = std::exception>
std::string error_of(const std::function<void()>& f, const std::string& none = "") {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return none;
}

}  // namespace varscope::testing
