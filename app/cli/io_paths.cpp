#include "app/cli/io_paths.h"

#include <sys/stat.h>

#include <filesystem>
#include <set>
#include <stdexcept>
#include <vector>

namespace varscope::cli {
namespace {

namespace fs = std::filesystem;

struct Input {
    std::string flag;
    fs::path canonical;
    dev_t dev;
    ino_t ino;
};

std::vector<Input>& inputs() {
    static std::vector<Input> all;
    return all;
}

}  // namespace

bool is_output_option(const CLI::Option& opt) {
    static const std::set<std::string> outputs = {"out",         "output",       "json",
                                                  "tokens-out",  "timings-json", "forward-out",
                                                  "classes-out", "trace"};
    for (const auto& name : opt.get_lnames())
        if (outputs.count(name)) return true;
    return false;
}

void record_input(const std::string& path, const std::string& flag) {
    struct stat st {};
    if (path.empty() || ::stat(path.c_str(), &st) != 0) return;
    std::error_code ec;
    const fs::path canonical = fs::canonical(path, ec);
    if (ec) return;
    inputs().push_back({flag, canonical, st.st_dev, st.st_ino});
}

void record_inputs(const CLI::App& cmd) {
    for (const CLI::Option* opt : cmd.get_options()) {
        if (opt->get_expected_min() == 0 || is_output_option(*opt)) continue;  // flags, outputs
        for (const auto& value : opt->results())
            if (!value.empty() && value.front() != '{') record_input(value, opt->get_name());
    }
    for (const CLI::App* sub : cmd.get_subcommands()) record_inputs(*sub);
}

void check_not_an_input(const std::string& path, const std::string& flag) {
    if (path.empty() || inputs().empty()) return;
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
    if (ec) p = fs::absolute(path).lexically_normal();
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    for (const Input& in : inputs())
        if (in.canonical == p || (exists && in.dev == st.st_dev && in.ino == st.st_ino))
            throw std::invalid_argument(flag + ": '" + path + "' is also an input of this run (" +
                                        in.flag + "); choose another file");
}

void clear_inputs() {
    inputs().clear();
}

}  // namespace varscope::cli
