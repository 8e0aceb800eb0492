#include "core/eval/eval_throughput.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "core/eval/eval_job.h"
#include "core/eval/shards.h"
#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/metrics/emoji_features.h"
#include "core/metrics/fid_inception.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;

constexpr std::array<ShardScoring, 3> kModes = {ShardScoring::Off, ShardScoring::Inline,
                                                ShardScoring::Overlapped};
constexpr std::array<const char*, 3> kModeNames = {"generation", "serial", "overlapped"};

}  // namespace

std::vector<std::string> use_stand_in_metrics(EvalManifest& m, const Runner& runner,
                                              const std::string& dir) {
    fs::create_directories(dir);
    const std::string inception = (fs::path(dir) / "synthetic-inception.safetensors").string();
    save_safetensors(synthetic_inception_weights(), inception);
    EmojiFeatureConfig c;  // the shipped architecture
    if (runner.shape().num_classes > 0) c.num_classes = runner.shape().num_classes;
    // Fixed weights without moving the global generator the sampling may draw from.
    auto gen = at::detail::getDefaultCPUGenerator();
    const auto state = gen.get_state();
    torch::manual_seed(0);
    EmojiFeatureNet net(c);
    gen.set_state(state);
    const std::string emoji = (fs::path(dir) / "random-emoji-features.safetensors").string();
    save_safetensors(
        module_state_dict(*net), emoji,
        {{"varscope.kind", kEmojiFeaturesKind}, {"varscope.config", c.to_json().dump()}});
    m.metrics.inception = inception;
    m.metrics.reference.clear();
    m.metrics.emoji = emoji;
    return {inception, emoji};
}

nlohmann::json measure_eval_throughput(EvalManifest m, Runner& runner,
                                       const EvalThroughputOptions& options) {
    using Clock = std::chrono::steady_clock;
    if (options.scratch_dir.empty())
        throw std::invalid_argument("bench eval: a scratch folder is needed");
    m.output_dir = options.scratch_dir;  // never the user's
    prepare_eval_output(m);
    const EvalPlans plans = eval_plans(m, runner);
    const SampleSettings settings = eval_settings(m, runner);
    const EvalScorers scorers = load_eval_scorers(m, runner);
    const std::string fingerprint = manifest_fingerprint(m);
    auto shards = plan_shards(m);
    if (options.max_shards > 0 && static_cast<int64_t>(shards.size()) > options.max_shards)
        shards.resize(static_cast<size_t>(options.max_shards));
    const auto log = [&](const std::string& line) {
        if (options.log) options.log(line);
    };

    // Untimed: graph capture and allocator growth, the scorers' first calls, the worker's pool.
    warm_up_shard(m, runner, plans, settings, shards.front());
    for (ShardScoring mode : {ShardScoring::Inline, ShardScoring::Overlapped})
        run_shard(m, runner, plans, settings, shards.front(), fingerprint, scorers, mode);
    log("warm-up done");

    std::array<double, 3> seconds{};
    bool identical = true;
    int64_t images = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
        const EvalShard& shard = shards[i];
        images += shard.images() * static_cast<int64_t>(plans.names.size());
        std::array<nlohmann::json, 3> results;
        std::ostringstream line;
        line << "shard " << i + 1 << "/" << shards.size() << ":";
        for (size_t j = 0; j < kModes.size(); ++j) {
            const size_t mode = (i + j) % kModes.size();
            const auto start = Clock::now();
            results[mode] =
                run_shard(m, runner, plans, settings, shard, fingerprint, scorers, kModes[mode]);
            if (kModes[mode] != ShardScoring::Off)  // as `eval` does: the shard file is written
                write_file_atomic(shard_path(m.output_dir, shard.index),
                                  results[mode].dump() + "\n");
            const double s = std::chrono::duration<double>(Clock::now() - start).count();
            seconds[mode] += s;
            line << " " << kModeNames[mode] << " " << s << " s";
        }
        identical = identical && shard_outcome(results[1]) == shard_outcome(results[2]);
        log(line.str());
    }

    nlohmann::json modes = nlohmann::json::object();
    for (size_t k = 0; k < kModes.size(); ++k)
        modes[kModeNames[k]] = {{"seconds", seconds[k]},
                                {"images_per_s", seconds[k] > 0 ? images / seconds[k] : 0.0}};
    const auto ratio = [&](size_t k) { return seconds[k] > 0 ? seconds[0] / seconds[k] : 0.0; };
    nlohmann::json metrics = nlohmann::json::array({"psnr", "ssim", "token_agreement"});
    if (scorers.inception) metrics.push_back("inception");
    if (scorers.emoji) metrics.push_back("emoji");
    return {{"shards", shards.size()},
            {"configs", plans.names},
            {"images_per_mode", images},
            {"metrics", metrics},
            {"modes", modes},
            {"ratios",
             {{"serial_over_generation", ratio(1)}, {"overlapped_over_generation", ratio(2)}}},
            {"overlapped_identical", identical}};
}

}  // namespace varscope
