// Shared by the libFuzzer harnesses (docs/reliability.md): the readers take
// paths, so each input is written to a file first; a reader may only fail with the errors it
// documents, anything else escaping is a finding (abort, so libFuzzer saves the input).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace varscope::fuzz {

// A file holding `data`, one per process (libFuzzer's -jobs run several), rewritten per input.
inline const std::string& input_file(const uint8_t* data, size_t size) {
    static const std::string path = [] {
        const std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        std::string p = dir + "/varscope-fuzz-" + std::to_string(::getpid());
        static std::string for_exit;
        for_exit = p;
        std::atexit([] { std::remove(for_exit.c_str()); });
        return p;
    }();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path;
}

// The input as a string (the readers of byte strings take one).
inline std::string bytes(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// An exception the reader does not document: print it and abort.
[[noreturn]] inline void unexpected(const char* what) {
    std::fprintf(stderr, "unexpected exception escaped the reader: %s\n", what);
    std::abort();
}

// Runs one input's check; an exception escaping it (a broken contract) is printed and aborts.
template <class Check>
int checked(Check&& check) {
    try {
        check();
    } catch (const std::exception& e) {
        unexpected(e.what());
    }
    return 0;
}

}  // namespace varscope::fuzz
