// The real varscope-cli (VARSCOPE_CLI_PATH) run as a user's shell would run it.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace varscope::testing {

struct CliRun {
    int code;         // -1: killed by a signal (a crash), or not started
    std::string out;  // stdout and stderr together
};

// Runs the shell command `cmd` (its stderr joined to stdout).
inline CliRun run_shell(const std::string& cmd) {
    CliRun r{-1, {}};
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf{};
    while (fgets(buf.data(), buf.size(), p)) r.out += buf.data();
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

// Runs varscope-cli `args`, with the environment variables `env` ("NAME=value ...") when given.
// With `timeout_s`, a run that takes longer is killed (code 124): a test of a hang then fails
// instead of hanging itself.
inline CliRun run_cli(const std::string& args, const std::string& env = "", int timeout_s = 0) {
    return run_shell(
        (env.empty() ? "" : "env " + env + " ") +
        (timeout_s > 0 ? "timeout -k 5 " + std::to_string(timeout_s) + " " : std::string()) +
        std::string(VARSCOPE_CLI_PATH) + " " + args + " 2>&1");
}

// Runs varscope-cli `args` in a subshell after the shell commands `setup` (a fault: "ulimit -f
// 2" for a full disk).
inline CliRun run_cli_after(const std::string& setup, const std::string& args) {
    return run_shell("(" + setup + "; exec " + std::string(VARSCOPE_CLI_PATH) + " " + args +
                     ") 2>&1");
}

}  // namespace varscope::testing
