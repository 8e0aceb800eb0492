// `varscope-cli train vqvae|var|klvae|mar|bsq-vae|infinity|emoji-features|tokenizer`: train the
// embedded models
// (config file + flag
// overrides, periodic checkpoints, resume from the run folder, a JSONL loss log).
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/io_paths.h"
#include "app/cli/option_checks.h"
#include "core/data/emoji_captions.h"
#include "core/io/atomic_file.h"
#include "core/io/json_fields.h"
#include "core/io/json_read.h"
#include "core/models/sampling_recommendation.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "core/training/bsq_vae_trainer.h"
#include "core/training/emoji_feature_trainer.h"
#include "core/training/infinity_trainer.h"
#include "core/training/kl_vae_trainer.h"
#include "core/training/mar_trainer.h"
#include "core/training/trainers.h"

namespace varscope::cli {
namespace {

struct TrainArgs {
    std::string config, data, out, vae, init, init_t5, tokenizer;
    int64_t steps = 0, batch = 0;
    double lr = 0;
    std::string device;
    int64_t seed = -1;
    double max_seconds = -1;
};

// The config's top level takes `keys` (plus "model", "train" and a free "comment"); another
// key is an error, like inside the sections ("cond_dorp" was ignored and trained the default).
nlohmann::json read_config(const std::string& path, std::initializer_list<const char*> keys) {
    if (path.empty()) return nlohmann::json::object();
    const std::string what = "config '" + path + "'";
    auto j = read_json_file(path, what);
    if (!j.is_object()) throw std::invalid_argument(what + " is not a JSON object");
    nlohmann::json known = {{"model", nullptr}, {"train", nullptr}, {"comment", nullptr}};
    for (const char* k : keys) known[k] = nullptr;
    require_known_fields(j, known, what);
    return j;
}

TrainConfig train_config(const nlohmann::json& j, const TrainArgs& a) {
    nlohmann::json t = j.value("train", nlohmann::json::object());
    if (a.steps > 0) t["steps"] = a.steps;
    if (a.batch > 0) t["batch"] = a.batch;
    if (a.lr > 0) t["lr"] = a.lr;
    if (!a.device.empty()) t["device"] = a.device;
    if (a.seed >= 0) t["seed"] = a.seed;
    if (a.max_seconds >= 0) t["max_seconds"] = a.max_seconds;
    return TrainConfig::from_json(t);
}

void add_common(CLI::App* cmd, TrainArgs& a) {
    cmd->add_option("--config", a.config, "JSON with \"model\" and \"train\" sections")
        ->check(CLI::ExistingFile);
    cmd->add_option("--data", a.data, "packed data set (varscope-cli pack-emoji)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--out,--run-dir", a.out,
                    "run folder: checkpoints, log.jsonl, final weights; an existing run resumes")
        ->required();
    cmd->add_option("--steps", a.steps, "override train.steps")->check(whole_number_at_least(1));
    cmd->add_option("--batch", a.batch, "override train.batch")->check(whole_number_at_least(1));
    cmd->add_option("--lr", a.lr, "override train.lr")->check(CLI::Range(1e-8, 1.0));
    cmd->add_option("--device", a.device, "override train.device (cpu, cuda, cuda:N)");
    cmd->add_option("--seed", a.seed, "override train.seed")->check(whole_number_at_least(0));
    cmd->add_option("--max-seconds", a.max_seconds,
                    "stop after this wall time, then export (0 = no limit)")
        ->check(number_at_least(0));
}

// The files training writes in its run folder may not be inputs of the run (`--init
// run/final.safetensors` would be overwritten by the run it starts).
void check_run_folder(const std::string& out) {
    for (const char* name :
         {"last.safetensors", "ema.safetensors", "final.safetensors", "export-fp16.safetensors",
          "t5-final/model.safetensors", "t5-fp16/model.safetensors", "t5-fp16/spiece.model",
          "export-raw-fp16.safetensors", "optimizer.pt", "state.json", "log.jsonl", "report.json"})
        check_not_an_input((std::filesystem::path(out) / name).string(), "--out");
}

void write_report(const TrainArgs& a, const nlohmann::json& report) {
    write_file_atomic(a.out + "/report.json", report.dump(2) + "\n");
    std::cout << report.dump(2) << "\n";
}

}  // namespace

Command add_train(CLI::App& app) {
    auto* train = app.add_subcommand("train", "train the embedded models on a packed data set");
    train->require_subcommand(1);
    auto va = std::make_shared<TrainArgs>(), ta = std::make_shared<TrainArgs>();
    auto ka = std::make_shared<TrainArgs>();
    auto* vq = train->add_subcommand("vqvae", "train a multi-scale VQVAE");
    add_common(vq, *va);
    auto* vr =
        train->add_subcommand("var", "train a class-conditional VAR transformer on a frozen VQVAE");
    add_common(vr, *ta);
    vr->add_option("--vae", ta->vae, "trained VQVAE weights")->required()->check(CLI::ExistingFile);
    vr->add_option("--init", ta->init,
                   "start from these VAR weights (fine-tuning / continuing a shipped model)")
        ->check(CLI::ExistingFile);
    auto* kl = train->add_subcommand("klvae", "train a KL VAE (MAR's tokenizer)");
    add_common(kl, *ka);
    auto ma = std::make_shared<TrainArgs>();
    auto* mr = train->add_subcommand("mar", "train a class-conditional MAR on a KL VAE's latents");
    add_common(mr, *ma);
    mr->add_option("--vae", ma->vae, "trained KL VAE weights")
        ->required()
        ->check(CLI::ExistingFile);
    mr->add_option("--init", ma->init, "start from these MAR weights")->check(CLI::ExistingFile);
    auto ba = std::make_shared<TrainArgs>();
    auto* bq = train->add_subcommand(
        "bsq-vae", "train an Infinity BSQ VAE (multi-scale bitwise tokenizer, official names)");
    add_common(bq, *ba);
    auto ia = std::make_shared<TrainArgs>();
    auto* inf = train->add_subcommand(
        "infinity", "train a text-to-image Infinity and its T5 encoder on a frozen BSQ VAE");
    add_common(inf, *ia);
    inf->add_option("--vae", ia->vae, "trained BSQ VAE weights (train bsq-vae)")
        ->required()
        ->check(CLI::ExistingFile);
    inf->add_option("--tokenizer", ia->tokenizer,
                    "SentencePiece model of the captions (spiece.model; shipped in the T5 folder)")
        ->required()
        ->check(CLI::ExistingFile);
    inf->add_option("--init", ia->init,
                    "start the transformer from these weights (fine-tuning a shipped model; its "
                    "shape must be the config's)")
        ->check(CLI::ExistingFile);
    inf->add_option("--init-t5", ia->init_t5,
                    "start the T5 encoder from this folder (config.json, model.safetensors)")
        ->check(CLI::ExistingDirectory);
    auto ea = std::make_shared<TrainArgs>();
    auto* ef = train->add_subcommand(
        "emoji-features",
        "train the emoji feature network of the eval metrics (classifier of emoji64's classes)");
    add_common(ef, *ea);
    const TrainSubcommand tokenizer = add_train_tokenizer(*train);
    return [vq, vr, kl, mr, bq, inf, ef, va, ta, ka, ma, ba, ia, ea, tokenizer]() {
        if (tokenizer.app->parsed()) return tokenizer.run();
        if (vq->parsed()) {
            check_run_folder(va->out);
            const auto j = read_config(va->config, {"restart_every"});
            VqvaeTrainJob job;
            job.model = VqvaeConfig::from_json(j.value("model", nlohmann::json::object()));
            job.train = train_config(j, *va);
            job.data_path = va->data;
            job.run_dir = va->out;
            job.restart_every = j.value("restart_every", job.restart_every);
            write_report(*va, train_vqvae(job, std::cerr));
        } else if (vr->parsed()) {
            check_run_folder(ta->out);
            const auto j = read_config(
                ta->config, {"cond_drop", "ema_rate", "bf16_autocast", "export_int8", "grow_depth",
                             "fit_steps_to_time", "recommended_sampling"});
            VarTrainJob job;
            job.model = VarConfig::from_json(j.value("model", nlohmann::json::object()));
            job.train = train_config(j, *ta);
            job.data_path = ta->data;
            job.vae_path = ta->vae;
            job.init_path = ta->init;
            job.run_dir = ta->out;
            job.cond_drop = j.value("cond_drop", job.cond_drop);
            if (!(job.cond_drop >= 0 && job.cond_drop < 1))
                throw std::invalid_argument("cond_drop must be in [0, 1)");
            job.ema_rate = j.value("ema_rate", job.ema_rate);
            if (!(job.ema_rate >= 0 && job.ema_rate < 1))
                throw std::invalid_argument("ema_rate must be in [0, 1)");
            job.bf16_autocast = j.value("bf16_autocast", job.bf16_autocast);
            job.export_int8 = j.value("export_int8", job.export_int8);
            job.grow_depth = j.value("grow_depth", job.grow_depth);
            job.fit_steps_to_time = j.value("fit_steps_to_time", job.fit_steps_to_time);
            if (j.contains("recommended_sampling")) {  // validated now, not after training
                job.recommended_sampling = j["recommended_sampling"].dump();
                parse_sampling_recommendation(job.recommended_sampling);
            }
            write_report(*ta, train_var(job, std::cerr));
        } else if (kl->parsed()) {
            check_run_folder(ka->out);
            const auto j = read_config(ka->config, {"loss", "auto_scale_factor"});
            KlVaeTrainJob job;
            if (j.contains("model")) job.model = KlVaeConfig::from_json(j["model"]);
            job.model.validate();
            job.train = train_config(j, *ka);
            job.loss = KlVaeLoss::from_json(j.value("loss", nlohmann::json::object()));
            job.auto_scale_factor = j.value("auto_scale_factor", job.auto_scale_factor);
            job.data_path = ka->data;
            job.run_dir = ka->out;
            write_report(*ka, train_kl_vae(job, std::cerr));
        } else if (mr->parsed()) {
            check_run_folder(ma->out);
            const auto j = read_config(ma->config, {"recipe", "sampling"});
            MarTrainJob job;
            job.model = MarConfig::from_json(j.value("model", nlohmann::json::object()));
            job.train = train_config(j, *ma);
            job.recipe = MarRecipe::from_json(j.value("recipe", nlohmann::json::object()));
            if (j.contains("sampling")) job.recommended_sampling = j["sampling"];
            job.data_path = ma->data;
            job.vae_path = ma->vae;
            job.init_path = ma->init;
            job.run_dir = ma->out;
            write_report(*ma, train_mar(job, std::cerr));
        } else if (bq->parsed()) {
            check_run_folder(ba->out);
            const auto j = read_config(ba->config, {"loss", "scales", "holdout_every"});
            BsqVaeTrainJob job;
            if (j.contains("model")) job.model = BsqVaeConfig::from_json(j["model"]);
            job.train = train_config(j, *ba);
            job.loss = BsqVaeLoss::from_json(j.value("loss", nlohmann::json::object()));
            try {
                if (j.contains("scales")) j["scales"].get_to(job.scales);
                if (j.contains("holdout_every")) j["holdout_every"].get_to(job.holdout_every);
            } catch (const nlohmann::json::exception&) {
                throw std::invalid_argument(
                    "config: 'scales' must be a list of whole numbers and 'holdout_every' a whole "
                    "number");
            }
            job.data_path = ba->data;
            job.run_dir = ba->out;
            write_report(*ba, train_bsq_vae(job, std::cerr));
        } else if (inf->parsed()) {
            check_run_folder(ia->out);
            const auto& keys = infinity_config_keys();
            nlohmann::json j = nlohmann::json::object();
            if (!ia->config.empty()) {
                const std::string what = "config '" + ia->config + "'";
                j = read_json_file(ia->config, what);
                nlohmann::json known = {{"train", nullptr}, {"comment", nullptr}};
                for (const auto& k : keys) known[k] = nullptr;
                if (!j.is_object()) throw std::invalid_argument(what + " is not a JSON object");
                require_known_fields(j, known, what);
            }
            InfinityTrainJob job;
            {
                const SentencePieceTokenizer tok(ia->tokenizer);
                apply_infinity_config(j, tok.piece_size() + tok.options().extra_ids, job);
            }
            job.train = train_config(j, *ia);
            job.data_path = ia->data;
            job.vae_path = ia->vae;
            job.tokenizer_path = ia->tokenizer;
            job.run_dir = ia->out;
            job.init_path = ia->init;
            job.init_t5_path = ia->init_t5;
            // The training phrasings pack-emoji stored; the held-out ones stay for evaluation.
            job.captions = load_emoji_captions(ia->data).train;
            write_report(*ia, train_infinity(job, std::cerr));
        } else if (ef->parsed()) {
            check_run_folder(ea->out);
            const auto j = read_config(
                ea->config, {"augment", "label_smoothing", "balance_classes", "train_styles"});
            EmojiFeatureTrainJob job;
            apply_emoji_feature_config(j, job);
            job.train = train_config(j, *ea);
            job.data_path = ea->data;
            job.run_dir = ea->out;
            write_report(*ea, train_emoji_features(job, std::cerr));
        }
        return 0;
    };
}

}  // namespace varscope::cli
