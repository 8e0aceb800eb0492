// `varscope-cli bench eval MANIFEST`: the eval job's throughput with and without its scoring
// (issue #34: generation + scoring should keep >= 90 % of generation alone), measured side by
// side in one process on the manifest's shards (core/eval/eval_throughput.h). A bench
// subcommand rather than an `eval` flag: it writes no result of the manifest, only timings, and
// never into the manifest's output folder (a scratch folder, removed afterwards unless named).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/mar_cli_common.h"  // check_output_file
#include "app/cli/run_report.h"      // environment_json, exec_policy, write_json
#include "core/eval/eval_job.h"
#include "core/eval/eval_throughput.h"

namespace varscope::cli {
namespace {

namespace fs = std::filesystem;

struct BenchEvalArgs {
    std::string manifest;
    std::string device;
    std::string scratch;
    int64_t shards = 0;
    bool stand_in_metrics = false;
    std::string json;
    bool force = false;
};

// A fresh folder under the system's temporary directory.
std::string make_scratch_dir() {
    std::string tmpl = (fs::temp_directory_path() / "varscope-bench-eval-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
        throw std::invalid_argument("bench eval: cannot create a scratch folder under " +
                                    fs::temp_directory_path().string());
    return tmpl;
}

bool same_folder(const std::string& a, const std::string& b) {
    std::error_code ec;
    return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

int run(const BenchEvalArgs& a) {
    check_output_file(a.json, a.force, "--json");  // a bad path fails now, not after the runs
    EvalManifest m = read_manifest(a.manifest);
    if (!a.device.empty()) m.device = a.device;
    if (!a.scratch.empty() && same_folder(a.scratch, m.output_dir))
        throw std::invalid_argument("--scratch '" + a.scratch +
                                    "' is the manifest's output_dir: name another folder");
    LoadOptions lo = load_options(m.device, m.precision);
    lo.exec = exec_policy();
    auto runner = open_eval_runner(m, lo);
    std::cerr << runner->describe() << "\n";

    const bool temporary = a.scratch.empty();
    EvalThroughputOptions o;
    o.scratch_dir = temporary ? make_scratch_dir() : a.scratch;
    o.max_shards = a.shards;
    o.log = [](const std::string& line) { std::cerr << "[bench eval] " << line << "\n"; };
    nlohmann::json j;
    try {
        if (a.stand_in_metrics)
            use_stand_in_metrics(m, *runner, (fs::path(o.scratch_dir) / "stand-ins").string());
        j = measure_eval_throughput(m, *runner, o);
    } catch (...) {
        if (temporary) fs::remove_all(o.scratch_dir);
        throw;
    }
    if (temporary) fs::remove_all(o.scratch_dir);

    const auto& modes = j["modes"];
    std::cout << std::fixed << std::setprecision(2);
    std::cout << j["images_per_mode"] << " images per mode (" << j["shards"] << " shards x "
              << j["configs"].size() << " configs), metrics " << j["metrics"].dump() << "\n";
    for (const char* mode : {"generation", "serial", "overlapped"})
        std::cout << "  " << std::left << std::setw(11) << mode << std::right << std::setw(10)
                  << modes[mode]["images_per_s"].get<double>() << " images/s  ("
                  << modes[mode]["seconds"].get<double>() << " s)\n";
    std::cout << std::setprecision(3) << "serial / generation     "
              << j["ratios"]["serial_over_generation"].get<double>() << "\n"
              << "overlapped / generation "
              << j["ratios"]["overlapped_over_generation"].get<double>()
              << "\noverlapped shard JSON identical to serial: "
              << (j["overlapped_identical"].get<bool>() ? "yes" : "NO") << "\n";
    if (!a.json.empty()) {
        nlohmann::json out = environment_json(runner->device().str());
        out.update({{"model", runner->describe()},
                    {"manifest", a.manifest},
                    {"precision", m.precision},
                    {"batch", m.batch},
                    {"stand_in_metrics", a.stand_in_metrics},
                    {"throughput", j}});
        write_json(out, a.json, a.force);
    }
    return j["overlapped_identical"].get<bool>() ? 0 : 1;
}

}  // namespace

Command add_bench_eval(CLI::App& bench) {
    auto a = std::make_shared<BenchEvalArgs>();
    auto* cmd = bench.add_subcommand(
        "eval",
        "eval job throughput: generation alone vs generation + the manifest's scoring, inline "
        "and overlapped (images/s and ratios, measured side by side on the manifest's shards)");
    cmd->add_option("manifest", a->manifest, "an eval manifest (docs/cli.md)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--device", a->device, "device (instead of the manifest's device)");
    cmd->add_option("--scratch", a->scratch,
                    "folder for the shard files it writes (default: a temporary folder, removed "
                    "afterwards; never the manifest's output_dir)");
    cmd->add_option("--shards", a->shards, "only the first N shards (default: all)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--stand-in-metrics", a->stand_in_metrics,
                  "time every metric without its files: the FID Inception with synthetic "
                  "weights and a random emoji feature network of the model's classes (numbers "
                  "meaningless, cost real); replaces the manifest's metrics");
    cmd->add_option("--json", a->json, "also write the measurement as JSON");
    cmd->add_flag("--force", a->force, "overwrite --json");
    return [a] { return run(*a); };
}

}  // namespace varscope::cli
