#include "core/eval/eval_job.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "core/eval/aggregate.h"
#include "core/eval/emoji_quality.h"
#include "core/eval/quality.h"
#include "core/eval/scoring_queue.h"
#include "core/io/checkpoint.h"
#include "core/metrics/image_metrics.h"
#include "core/models/var.h"
#include "core/models/vqvae_config.h"
#include "core/resources.h"
#include "core/runner/oom_retry.h"
#include "kernels/memory_stats.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;

// Latents mapped to [0, 1] through the baseline's range, so PSNR/SSIM read like image ones
// (a model without a decoder; as `compare` does). On the images' device (image_scores).
std::pair<at::Tensor, at::Tensor> comparable_images(const RunResult& base, const RunResult& acc) {
    if (base.images.defined() && acc.images.defined())
        return {base.images.to(at::kFloat), acc.images.to(at::kFloat)};
    const auto b = base.latents.to(at::kFloat), a = acc.latents.to(at::kFloat);
    const double lo = b.min().item<double>(), hi = b.max().item<double>();
    const double span = std::max(hi - lo, 1e-12);
    return {(b - lo).div(span).clamp(0, 1), (a - lo).div(span).clamp(0, 1)};
}

// Per image PSNR and SSIM (double precision). On CUDA where the images are, in chunks that
// bound SSIM's double temporaries: on the host its depthwise double convolutions took 0.8 s
// per 256x256 image on 2 threads (measured, torch 2.11), i.e. seconds for the 64 images a
// VAR-d30 call samples in 0.67 s on an H200: host scoring could not keep up with the sampler,
// overlapped or not. On the CPU in one piece, as before.
std::pair<std::vector<double>, std::vector<double>> image_scores(const at::Tensor& base,
                                                                 const at::Tensor& acc) {
    if (!base.is_cuda()) return {psnr(base, acc), ssim(base, acc)};
    const int64_t image_bytes = std::max<int64_t>(1, base[0].numel() * 8);
    const int64_t chunk = std::max<int64_t>(1, (int64_t{64} << 20) / image_bytes);
    std::vector<double> p, q;
    for (int64_t i = 0; i < base.size(0); i += chunk) {
        const int64_t n = std::min(chunk, base.size(0) - i);
        const auto b = base.narrow(0, i, n), a = acc.narrow(0, i, n);
        const auto pc = psnr(b, a), qc = ssim(b, a);
        p.insert(p.end(), pc.begin(), pc.end());
        q.insert(q.end(), qc.begin(), qc.end());
    }
    return {p, q};
}

RunResult image_row(const RunResult& r, int64_t i) {
    RunResult one;
    for (const auto& t : r.step_tokens) one.step_tokens.push_back(t.narrow(0, i, 1));
    one.step_millis = r.step_millis;
    one.step_info = r.step_info;
    return one;
}

// Identical tokens of image `i` over all steps, from the family's per-step comparison
// (weighted by the step's tokens); null where the family reports none (MAR).
nlohmann::json token_agreement_of(const Runner& runner, const RunResult& base, const RunResult& acc,
                                  int64_t i) {
    if (base.step_tokens.empty() || base.step_tokens.size() != acc.step_tokens.size())
        return nullptr;
    const auto steps = runner.compare_steps(image_row(base, i), image_row(acc, i));
    double identical = 0, total = 0;
    for (size_t s = 0; s < steps.size() && s < base.step_tokens.size(); ++s) {
        if (!steps[s].contains("identical_tokens")) return nullptr;
        const double n = static_cast<double>(base.step_tokens[s].size(1));
        identical += steps[s]["identical_tokens"].get<double>() * n;
        total += n;
    }
    return total > 0 ? nlohmann::json(identical / total) : nlohmann::json();
}

SampleSettings unit_settings(const EvalManifest& m, const SampleSettings& settings,
                             const EvalUnit& unit) {
    SampleSettings s = settings;
    s.class_ids.clear();
    s.prompts.clear();
    for (int64_t c : unit.conditions) {
        if (m.prompts.empty())
            s.class_ids.push_back(m.classes[c]);
        else
            s.prompts.push_back(m.prompts[c]);
    }
    s.batch = static_cast<int64_t>(unit.conditions.size());
    s.seed = unit.seed;
    return s;
}

std::string config_error(const std::string& name, const std::string& what) {
    return "manifest: configs." + name + ": " + what;
}

}  // namespace

std::unique_ptr<Runner> open_eval_runner(const EvalManifest& m, const LoadOptions& options) {
    if (m.random_depth <= 0) return open_runner(m.model, options);
    VarConfig var = VarConfig::for_depth(static_cast<int>(m.random_depth), {});
    VqvaeConfig vae;  // the official vae_ch160v4096z32 architecture
    vae.patch_nums = var.patch_nums;
    return random_var_runner(var, vae, m.init_seed, options);
}

EvalPlans eval_plans(const EvalManifest& m, const Runner& runner) {
    EvalPlans p;
    p.names.push_back(kBaselineConfig);
    p.plans.push_back(nullptr);
    for (const auto& c : m.configs) {
        try {
            p.plans.push_back(c.accel.is_string()
                                  ? runner.accel_from_argument(c.accel.get<std::string>())
                                  : runner.parse_accel(c.accel));
        } catch (const std::invalid_argument& e) {  // AccelConfigError, JSON errors
            throw ManifestError(config_error(c.name, e.what()));
        }
        p.names.push_back(c.name);
    }
    return p;
}

SampleSettings eval_settings(const EvalManifest& m, const Runner& runner) {
    SampleSettings s = runner.defaults();
    std::set<std::string> given;
    for (const auto& item : m.sampling.items()) given.insert(item.key());
    try {
        runner.apply_recommendation(s, given);
    } catch (const CheckpointError&) {  // a malformed recommendation: the defaults stand
    }
    const auto& j = m.sampling;
    if (j.contains("cfg")) s.cfg = j["cfg"].get<double>();
    if (j.contains("top_k")) s.top_k = j["top_k"].get<int64_t>();
    if (j.contains("top_p")) s.top_p = j["top_p"].get<double>();
    if (j.contains("more_smooth")) s.more_smooth = j["more_smooth"].get<bool>();
    if (j.contains("num_iter")) s.num_iter = j["num_iter"].get<int64_t>();
    if (j.contains("temperature")) s.temperature = j["temperature"].get<double>();
    if (j.contains("tau")) s.tau = j["tau"].get<double>();
    s.time_steps = false;  // no per-step device syncs: the job times whole calls
    s.count_flops = false;
    return s;
}

void prepare_eval_output(const EvalManifest& m) {
    const std::string where = "output_dir '" + m.output_dir + "'";
    std::error_code ec;
    fs::create_directories(fs::path(m.output_dir) / "shards", ec);
    if (ec) throw std::invalid_argument(where + ": cannot create it: " + ec.message());
    try {
        const std::string probe = (fs::path(m.output_dir) / "shards" / ".write-test").string();
        write_file_atomic(probe, "ok\n");
        fs::remove(probe, ec);
    } catch (const std::exception& e) {
        throw std::invalid_argument(where + ": not writable: " + e.what());
    }
}

namespace {

// The emoji network for a job, checked against the model before any sampling.
std::optional<EmojiFeatureNetwork> emoji_scorer(const EvalManifest& m, const Runner& runner,
                                                std::vector<int64_t>& targets) {
    if (!m.metrics.emoji_enabled()) return std::nullopt;
    std::optional<EmojiFeatureNetwork> net(load_emoji_network(m.metrics));
    const int64_t classes = net->config().num_classes;
    const int64_t model_classes = runner.shape().num_classes;
    if (m.prompts.empty() && model_classes > 0 && model_classes != classes)
        throw ManifestError("manifest: metrics.emoji: the emoji network knows " +
                            std::to_string(classes) + " classes, the model " +
                            std::to_string(model_classes) +
                            " (its scores need a model of emoji64's classes)");
    std::vector<ClassInfo> names;
    if (!m.prompts.empty()) {  // the class a prompt names, from the list the network was made on
        const auto list = std::filesystem::path(resource_dir()) / "models" / "emoji-classes.json";
        try {
            names = load_class_list(list.string());
        } catch (const std::exception& e) {
            throw ManifestError("manifest: metrics.emoji: the prompts' classes need " +
                                list.string() + ": " + e.what());
        }
    }
    targets = emoji_targets(m, names);
    for (int64_t& t : targets)
        if (t >= classes) t = -1;
    net->to(runner.device());
    return net;
}

}  // namespace

EvalScorers load_eval_scorers(const EvalManifest& m, const Runner& runner) {
    EvalScorers s;
    s.emoji = emoji_scorer(m, runner, s.emoji_targets);
    if (m.metrics.inception_enabled()) {  // bad metric inputs fail before any sampling
        check_reference_stats(m.metrics);
        s.inception.emplace(FidInception::load(m.metrics.inception));
        s.inception->to(runner.device());
    }
    return s;
}

void warm_up_shard(const EvalManifest& m, Runner& runner, const EvalPlans& plans,
                   const SampleSettings& settings, const EvalShard& shard) {
    const SampleSettings s = unit_settings(m, settings, shard.units.front());
    runner.validate(s);
    for (const auto& plan : plans.plans) generate_releasing_graphs(runner, s, plan.get());
    wait_for_current_stream(runner.device());
}

namespace {

// What the scoring of a shard accumulates. With overlap, only the scoring worker touches it
// until ScoringQueue::finish returns.
struct ShardScores {
    ShardFeatures features;
    ShardEmojiScores emoji;
    nlohmann::json images = nlohmann::json::array();
    std::map<std::string, std::vector<at::Tensor>> saved;
};

// Scores config k's images of `unit` (k = 0: the baseline, `base` is `r` itself).
void score_call(const EvalManifest& m, const Runner& runner, const EvalScorers& scorers,
                const std::string& config, size_t k, const EvalUnit& unit, const RunResult& r,
                const RunResult& base, ShardScores& out) {
    if ((scorers.inception || scorers.emoji) && !r.images.defined())
        throw std::invalid_argument(
            "manifest: metrics: the model gives no decoded images to score");
    if (scorers.inception) out.features.add(config, scorers.inception->features(r.images));
    if (scorers.emoji) {
        std::vector<int64_t> targets;
        for (int64_t c : unit.conditions)
            targets.push_back(scorers.emoji_targets.at(static_cast<size_t>(c)));
        out.emoji.add(config, scorers.emoji->features(r.images), targets);
    }
    if (m.save_images && r.images.defined())
        out.saved[config].push_back(
            r.images.to(at::kFloat).mul(255).round().clamp(0, 255).to(at::kByte).cpu());
    if (k == 0) return;
    const auto [ib, ia] = comparable_images(base, r);
    const auto [p, q] = image_scores(ib, ia);
    for (size_t i = 0; i < unit.conditions.size(); ++i) {
        out.images.push_back(
            {{"config", config},
             {"seed", unit.seed},
             {"condition", unit.conditions[i]},
             {"psnr_db", std::isfinite(p[i]) ? nlohmann::json(p[i]) : nlohmann::json()},
             {"ssim", q[i]},
             {"token_agreement", token_agreement_of(runner, base, r, static_cast<int64_t>(i))}});
    }
}

}  // namespace

nlohmann::json run_shard(const EvalManifest& m, Runner& runner, const EvalPlans& plans,
                         const SampleSettings& settings, const EvalShard& shard,
                         const std::string& fingerprint, const EvalScorers& scorers,
                         ShardScoring scoring) {
    const at::Device device = runner.device();
    nlohmann::json timing = nlohmann::json::object();
    for (const auto& name : plans.names)
        timing[name] = {{"calls", nlohmann::json::array()}, {"peak_memory_bytes", nullptr}};
    ShardScores scores;
    int64_t graph_releases = 0, graph_captures = 0;
    {
        // Declared after `scores`: destroyed (its worker stopped) before them on an error.
        ScoringQueue queue(scoring == ShardScoring::Overlapped, device);
        for (const auto& unit : shard.units) {
            const SampleSettings s = unit_settings(m, settings, unit);
            runner.validate(s);
            std::shared_ptr<const RunResult> base;
            for (size_t k = 0; k < plans.names.size(); ++k) {
                const std::string& name = plans.names[k];
                if (device.is_cuda()) kernels::reset_cuda_peak_memory(device.index());
                // A smaller last shard needs new graph sets: the cached ones give way if the
                // device cannot hold both (oom_retry.h).
                bool retried = false;
                RunResult generated =
                    generate_releasing_graphs(runner, s, plans.plans[k].get(), &retried);
                graph_releases += retried ? 1 : 0;
                graph_captures += generated.graph_capture_millis > 0 ? 1 : 0;
                // The sampler does not wait for the device when steps are not timed: the call's
                // time is its host time plus what its stream still had to do (only this stream:
                // with overlap, not the scorer's).
                const auto returned = std::chrono::steady_clock::now();
                wait_for_current_stream(device);
                const double tail_ms = std::chrono::duration<double, std::milli>(
                                           std::chrono::steady_clock::now() - returned)
                                           .count();
                auto& t = timing[name];
                t["calls"].push_back(
                    {{"images", s.batch},
                     {"millis", generated.model_millis() + (device.is_cuda() ? tail_ms : 0.0)}});
                if (device.is_cuda())
                    t["peak_memory_bytes"] = std::max(
                        t["peak_memory_bytes"].is_null() ? int64_t{0}
                                                         : t["peak_memory_bytes"].get<int64_t>(),
                        kernels::cuda_memory(device.index()).peak_allocated);
                auto r = std::make_shared<const RunResult>(std::move(generated));
                if (k == 0) base = r;
                if (scoring == ShardScoring::Off) continue;
                // After the timed call: scoring stays out of the latencies.
                queue.push([&m, &runner, &scorers, &scores, &name, k, &unit, r, base] {
                    score_call(m, runner, scorers, name, k, unit, *r, *base, scores);
                });
            }
        }
        queue.finish();
    }
    if (m.save_images && !scores.saved.empty()) {
        StateDict tensors;
        for (auto& [name, list] : scores.saved) tensors[name] = at::cat(list, 0);
        fs::create_directories(fs::path(m.output_dir) / "images");
        char file[40];
        std::snprintf(file, sizeof file, "shard-%05lld.safetensors",
                      static_cast<long long>(shard.index));
        save_safetensors(tensors, (fs::path(m.output_dir) / "images" / file).string(),
                         {{"fingerprint", fingerprint}});
    }
    nlohmann::json out = {{"fingerprint", fingerprint},
                          {"shard", shard.index},
                          {"images", scores.images},
                          {"timing", timing}};
    // Run conditions, not metrics: why a shard was slow.
    if (graph_releases > 0) out["graph_releases"] = graph_releases;
    if (graph_captures > 0) out["graph_captures"] = graph_captures;
    if (scorers.inception) out["features"] = scores.features.to_json();
    if (scorers.emoji) out["emoji_features"] = scores.emoji.to_json();
    return out;
}

EvalJobResult run_eval_job(const EvalManifest& m, Runner& runner, const EvalJobOptions& options) {
    using Clock = std::chrono::steady_clock;
    std::unique_ptr<ProcessGroup> single;
    ProcessGroup* group = options.group;
    if (!group) {
        single = single_process_group();
        group = single.get();
    }
    const int rank = group->rank(), world = group->world_size();
    const std::string fingerprint = manifest_fingerprint(m);
    const auto shards = plan_shards(m);
    const std::string tag = "shards-" + fingerprint;
    EvalJobResult out;
    out.root = rank == 0;
    nlohmann::json mine = nlohmann::json::object();
    nlohmann::json computed_here = nlohmann::json::array();  // shard indices run, not resumed
    auto start = Clock::now();
    SampleSettings settings;
    try {
        prepare_eval_output(m);
        const EvalPlans plans = eval_plans(m, runner);
        settings = eval_settings(m, runner);
        const EvalScorers scorers = load_eval_scorers(m, runner);
        const ShardScoring scoring =
            m.overlap_scoring ? ShardScoring::Overlapped : ShardScoring::Inline;
        const auto todo = in_shape_order(
            shards_of_rank(static_cast<int64_t>(shards.size()), rank, world), shards);
        start = Clock::now();
        EvalProgress progress;
        progress.rank = rank;
        progress.total = static_cast<int64_t>(todo.size());
        for (int64_t index : todo) {
            const std::string path = shard_path(m.output_dir, index);
            auto done = read_shard_result(path, index, fingerprint);
            if (done) {
                ++out.resumed;
                ++progress.resumed;
            } else {
                if (m.warmup && out.computed == 0)
                    warm_up_shard(m, runner, plans, settings, shards[index]);
                done = run_shard(m, runner, plans, settings, shards[index], fingerprint, scorers,
                                 scoring);
                write_file_atomic(path, done->dump() + "\n");
                ++out.computed;
                computed_here.push_back(index);
            }
            progress.graph_releases += done->value("graph_releases", int64_t{0});
            progress.graph_captures += done->value("graph_captures", int64_t{0});
            progress.shard = index;
            mine[std::to_string(index)] = std::move(*done);
            ++progress.done;
            progress.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
            if (out.computed > 0)
                progress.eta_s =
                    progress.elapsed_s / out.computed * (progress.total - progress.done);
            if (options.progress) options.progress(progress);
        }
    } catch (const std::exception& e) {
        group->fail(tag, e.what());
        throw;
    }

    const nlohmann::json payload = {{"shards", std::move(mine)}, {"computed", computed_here}};
    const auto gathered = group->gather_to_root(tag, payload.dump());
    if (rank != 0) return out;
    const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    // Every shard from the rank that ran it, checked; written here too where rank 0 does not
    // share the other ranks' disk.
    std::vector<nlohmann::json> results(shards.size());
    std::vector<bool> have(shards.size(), false);
    std::vector<int64_t> computed;
    for (size_t r = 0; r < gathered.size(); ++r) {
        const auto part = nlohmann::json::parse(gathered[r]);
        for (const auto& index : part.at("computed")) computed.push_back(index.get<int64_t>());
        for (const auto& [key, shard] : part.at("shards").items()) {
            const int64_t index = std::stoll(key);
            const std::string source = "shard " + key + " from rank " + std::to_string(r);
            if (index < 0 || index >= static_cast<int64_t>(shards.size()) ||
                index % world != static_cast<int64_t>(r) || have[index])
                throw RankError(source + ": not a shard of that rank");
            check_shard_result(shard, index, fingerprint, source);
            const std::string path = shard_path(m.output_dir, index);
            if (!fs::exists(path)) write_file_atomic(path, shard.dump() + "\n");
            results[index] = shard;
            have[index] = true;
        }
    }
    for (size_t i = 0; i < shards.size(); ++i)
        if (!have[i]) throw RankError("shard " + std::to_string(i) + " came from no rank");

    nlohmann::json result = aggregate_shards(m, results);
    result["fingerprint"] = fingerprint;
    result["work"] = m.work_json();
    result["world_size"] = world;
    result["device"] = runner.device().str();
    result["family"] = family_id(runner.family());
    result["model"] = runner.describe();
    result["settings"] = runner.settings_json(settings);
    result["job"] = job_throughput(results, computed, world, wall_s);
    const fs::path dir = m.output_dir;
    write_file_atomic((dir / "result.json").string(), result.dump(2) + "\n");
    write_file_atomic((dir / "summary.csv").string(), summary_csv(result));
    write_file_atomic((dir / "images.csv").string(), images_csv(results));
    out.result = std::move(result);
    out.result_path = (dir / "result.json").string();
    return out;
}

}  // namespace varscope
