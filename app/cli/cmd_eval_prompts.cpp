// `varscope-cli eval-prompts`: prompt following of an emoji model on held-out caption phrasings
// (core/analysis/prompt_following.h, issue #33). A text-to-image model reads each phrasing as
// its text; a class-conditional model (the reference: today's class matching) gets the class
// the phrasing's words match best. Writes prompt_following.json, samples.csv and a sheet of the
// first prompts (intended image | one column per seed | the first seed's nearest image).
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "app/cli/commands.h"
#include "app/cli/image_io.h"
#include "app/cli/mar_cli_common.h"
#include "app/cli/run_args.h"
#include "app/cli/run_report.h"
#include "core/analysis/prompt_following.h"
#include "core/metrics/emoji_features.h"
#include "core/training/train_common.h"

namespace varscope::cli {
namespace {

namespace fs = std::filesystem;

struct EvalPromptsArgs {
    ModelArgs model;
    SampleArgs sampling;
    std::string data, out_dir, accel, phrasings = "heldout";
    std::string emoji_features =
        "auto";  // the feature judge: auto (shipped file if any), none, FILE
    int64_t count = 128, chunk = 16, sheet_rows = 16;
    std::vector<uint64_t> seeds{0, 1, 2, 3};
    bool force = false;
};

// Row r of the sheet: the intended image, the samples of each seed, the first seed's neighbour;
// 2-pixel white gaps.
at::Tensor sheet_image(const analysis::PromptFollowing& r,
                       const std::map<std::pair<int64_t, uint64_t>, at::Tensor>& images,
                       const at::Tensor& dataset, const std::vector<uint64_t>& seeds,
                       int64_t rows) {
    const int64_t h = dataset.size(2), w = dataset.size(3), g = 2;
    const int64_t cols = static_cast<int64_t>(seeds.size()) + 2;
    rows = std::min<int64_t>(rows, static_cast<int64_t>(r.prompts.size()));
    at::Tensor sheet = at::ones({3, rows * (h + g) + g, cols * (w + g) + g});
    auto put = [&](int64_t row, int64_t col, const at::Tensor& img) {
        sheet.narrow(1, g + row * (h + g), h).narrow(2, g + col * (w + g), w).copy_(img);
    };
    auto pack_image = [&](int64_t i) { return dataset[i].to(at::kFloat).div(255.0); };
    for (int64_t p = 0; p < rows; ++p) {
        put(p, 0, pack_image(r.prompts[static_cast<size_t>(p)].row));
        for (size_t k = 0; k < seeds.size(); ++k) put(p, 1 + k, images.at({p, seeds[k]}));
        for (const auto& s : r.samples)
            if (s.prompt == p && s.seed == seeds.front()) {
                put(p, cols - 1, pack_image(s.nearest_row));
                break;
            }
    }
    return sheet;
}

int run(EvalPromptsArgs& a) {
    if (a.data.empty())
        throw std::invalid_argument("--data is required: the packed emoji64 file (pack-emoji)");
    if (a.out_dir.empty()) throw std::invalid_argument("--out DIR is required");
    if (a.seeds.empty()) throw std::invalid_argument("--seeds: at least one seed");
    if (!a.sampling.prompt.empty() || !a.sampling.classes.empty())
        throw std::invalid_argument(
            "eval-prompts takes its prompts from --data's held-out phrasings; drop --prompt / "
            "--class");
    prepare_output_dir(a.out_dir, "--out");
    const auto path = [&](const std::string& name) {
        return (fs::path(a.out_dir) / name).string();
    };
    const std::string json_path = path("prompt_following.json"), csv_path = path("samples.csv"),
                      sheet_path = path("sheet" + default_image_extension());
    for (const auto& f : {json_path, csv_path, sheet_path}) check_output_file(f, a.force, "--out");

    // The data first: a wrong file fails before a model loads.
    const EmojiCaptions captions = load_emoji_captions(a.data);
    const ImageDataset ds = load_image_dataset(a.data, at::Device(at::kCPU));
    analysis::PromptFollowing result;
    result.prompts = analysis::pick_prompts(
        a.phrasings == "train" ? captions.train : captions.heldout, ds.labels, a.count);

    // The feature judge: the emoji feature network, loaded before the model (a wrong file fails
    // first) and run once over the pack.
    std::optional<EmojiFeatureNetwork> judge_net;
    at::Tensor dataset_features;
    {
        std::string file = a.emoji_features;
        if (file == "auto") {
            const std::string shipped = shipped_emoji_features_path();
            file = fs::exists(shipped) ? shipped : "none";
        }
        if (file != "none") {
            judge_net.emplace(EmojiFeatureNetwork::load(file));
            std::vector<at::Tensor> chunks;  // 512 images at a time: bounded activations
            for (int64_t s = 0; s < ds.images.size(0); s += 512)
                chunks.push_back(
                    judge_net->features(ds.images.slice(0, s, s + 512)).features.cpu());
            dataset_features = at::cat(chunks);
            std::cerr << "feature judge: " << file << "\n";
        }
    }

    const auto runner = a.model.build();
    const bool text = runner->family() == Family::Infinity;
    std::vector<int64_t> class_of;  // class-conditional: the class each prompt's words match
    if (!text) {
        // The list beside the model, checked against its class count (as generate's --prompt).
        const ClassMatcher matcher =
            class_matcher_for(runner->model_path(), runner->shape().num_classes);
        for (const auto& p : result.prompts) {
            const auto m = matcher.rank(p.text, 1);
            class_of.push_back(m.empty() ? -1 : m.front().class_id);  // -1: unconditional
        }
    }
    // A text model's settings are checked with a text: the first phrasing stands in.
    SampleArgs sampling = a.sampling;
    if (text) sampling.prompt = result.prompts.front().text;
    SampleSettings base = sampling.resolve(*runner);
    const auto accel = a.sampling.accel(*runner, a.accel);
    std::cerr << runner->describe() << "\nmethod: " << accel->describe() << "\n"
              << result.prompts.size() << " " << a.phrasings << " phrasings x " << a.seeds.size()
              << " seeds, " << a.chunk << " prompts per batch\n";

    std::map<std::pair<int64_t, uint64_t>, at::Tensor> sheet_images;
    const auto n = static_cast<int64_t>(result.prompts.size());
    for (const uint64_t seed : a.seeds)
        for (int64_t s = 0; s < n; s += a.chunk) {
            const int64_t e = std::min(n, s + a.chunk);
            SampleSettings st = base;
            st.seed = seed;
            std::vector<int64_t> index;
            st.prompts.clear();
            st.class_ids.clear();
            for (int64_t i = s; i < e; ++i) {
                index.push_back(i);
                if (text)
                    st.prompts.push_back(result.prompts[static_cast<size_t>(i)].text);
                else
                    st.class_ids.push_back(class_of[static_cast<size_t>(i)]);
            }
            st.batch = e - s;
            a.sampling.check_memory(*runner, st, accel.get());
            const RunResult res = report_out_of_memory(
                *runner, st, accel.get(), [&] { return runner->generate(st, accel.get()); });
            if (!res.images.defined())
                throw std::invalid_argument("the model has no decoder: nothing to compare");
            const at::Tensor images = res.images.to(at::kCPU).to(at::kFloat);
            if (judge_net) {
                const EmojiFeatures f = judge_net->features(images);
                const analysis::FeatureJudgeBatch judge{f.features.cpu(), f.logits.argmax(1).cpu(),
                                                        dataset_features};
                analysis::score_batch(result, images, index, seed, ds.images, ds.labels, &judge);
            } else {
                analysis::score_batch(result, images, index, seed, ds.images, ds.labels);
            }
            for (int64_t i = s; i < std::min(e, a.sheet_rows); ++i)
                sheet_images[{i, seed}] = images[i - s];
            std::cerr << "\rseed " << seed << ": " << e << " / " << n << std::flush;
        }
    std::cerr << "\n";

    nlohmann::json j = environment_json(runner->device().str());
    j.update(analysis::to_json(result));
    j["model"] = runner->describe();
    j["family"] = text ? "text-to-image" : "class-conditional (prompt -> best-matching class)";
    j["method"] = accel->to_json();
    j["phrasings"] = a.phrasings;
    j["seeds"] = a.seeds;
    j["prompts_per_batch"] = a.chunk;
    j["settings"] = runner->settings_json(base);
    j["data"] = fs::path(a.data).filename().string();
    if (!text) j["class_of_prompt"] = class_of;
    write_json(j, json_path, a.force);
    write_text(analysis::to_csv(result), csv_path);
    if (a.sheet_rows > 0)
        write_image(sheet_image(result, sheet_images, ds.images, a.seeds, a.sheet_rows), sheet_path,
                    a.force);
    std::cout << "prompt following: " << 100.0 * result.follow_rate() << " % of "
              << result.samples.size() << " samples (" << result.prompts.size() << " phrasings x "
              << a.seeds.size() << " seeds) have the described emoji as "
              << "nearest image; class match " << 100.0 * result.class_rate()
              << " %; by phrasing template";
    for (int64_t t = 0; t < result.template_count(); ++t)  // the templates the prompts use
        if (std::any_of(result.prompts.begin(), result.prompts.end(),
                        [&](const auto& p) { return p.template_index == t; }))
            std::cout << " " << t << ": " << 100.0 * result.follow_rate_of_template(t) << " %";
    std::cout << "; mean nearest PSNR " << result.mean_psnr() << " dB; every seed "
              << result.prompts_always() << ", no seed " << result.prompts_never()
              << " phrasings\n";
    if (result.judged_by_features) {
        std::cout << "feature judge: nearest image by emoji features described "
                  << 100.0 * result.feature_follow_rate() << " %, its class "
                  << 100.0 * result.feature_class_rate() << " %; classifier names the class "
                  << 100.0 * result.classifier_rate() << " %; by phrasing template";
        for (int64_t t = 0; t < result.template_count(); ++t)
            if (std::any_of(result.prompts.begin(), result.prompts.end(),
                            [&](const auto& p) { return p.template_index == t; }))
                std::cout << " " << t << ": " << 100.0 * result.classifier_rate_of_template(t)
                          << " %";
        std::cout << "\n";
    }
    std::cout << "wrote " << json_path << ", " << csv_path
              << (a.sheet_rows > 0 ? ", " + sheet_path : "") << "\n";
    return 0;
}

}  // namespace

Command add_eval_prompts(CLI::App& app) {
    auto a = std::make_shared<EvalPromptsArgs>();
    auto* cmd = app.add_subcommand(
        "eval-prompts",
        "prompt following of an emoji model: images from held-out caption phrasings, scored by "
        "whether their nearest emoji64 image is the one described (docs/training/emoji-t2i.md)");
    a->model.add_to(*cmd, Family::Var);
    a->sampling.add_to(*cmd);
    cmd->add_option("--data", a->data, "the packed emoji64 file with captions (pack-emoji)");
    cmd->add_option("-o,--out", a->out_dir, "folder for prompt_following.json, samples.csv, sheet");
    cmd->add_flag("--force", a->force, "overwrite existing files in --out");
    cmd->add_option("--phrasings", a->phrasings,
                    "heldout: wordings training never saw (the measure); train: the training "
                    "wordings (what the model learnt)")
        ->check(CLI::IsMember({"heldout", "train"}));
    cmd->add_option("--count", a->count, "phrasings to evaluate")
        ->check(CLI::Range(int64_t{1}, int64_t{100000}));
    cmd->add_option("--seeds", a->seeds, "seeds, comma-separated (default 0,1,2,3)")
        ->delimiter(',');
    cmd->add_option("--prompts-per-batch", a->chunk, "phrasings generated together")
        ->check(CLI::Range(int64_t{1}, int64_t{4096}));
    cmd->add_option("--sheet-rows", a->sheet_rows,
                    "prompts shown in the sheet image (0 = no sheet)")
        ->check(CLI::Range(int64_t{0}, int64_t{1024}));
    cmd->add_option("--emoji-features", a->emoji_features,
                    "the second judge: the emoji feature network (auto: "
                    "resources/models/emoji-features.safetensors when shipped; none; or a file)");
    cmd->add_option(
        "--accel", a->accel,
        "accelerator (a JSON config file, inline JSON or a preset); default: the baseline");
    return [a] { return run(*a); };
}

}  // namespace varscope::cli
