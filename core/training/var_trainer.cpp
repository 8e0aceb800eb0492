#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <filesystem>
#include <ostream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/models/sampling_recommendation.h"
#include "core/training/trainers.h"
#include "core/training/var_train_utils.h"

namespace varscope {

nlohmann::json train_var(const VarTrainJob& job, std::ostream& out) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const at::Device dev(job.train.device);
    ImageDataset data = prepare_training(job.train, job.data_path);
    if (data.num_classes > job.model.num_classes)
        throw std::invalid_argument("the data has " + std::to_string(data.num_classes) +
                                    " classes but the VAR config only " +
                                    std::to_string(job.model.num_classes));
    // Tokenise every image once with the frozen VQVAE: targets and teacher-forcing inputs.
    StateDict vae_sd = load_checkpoint(job.vae_path);
    Vqvae vae(VqvaeConfig::infer_from(vae_sd, job.model.patch_nums));
    vae->load(vae_sd, job.vae_path);
    vae->to(dev);
    vae->eval();
    at::Tensor targets, inputs;
    {
        c10::InferenceMode g;
        std::vector<at::Tensor> tgt, inp;
        for (int64_t b = 0; b < data.size(); b += 256) {
            auto rows = at::arange(b, std::min(b + 256, data.size()), at::kLong);
            auto idx = vae->img_to_idx(data.batch_images(rows));
            tgt.push_back(at::cat(idx, 1));
            inp.push_back(vae->idx_to_var_input(idx));
        }
        targets = at::cat(tgt, 0).clone();
        inputs = at::cat(inp, 0).clone();
    }
    out << "tokenised " << data.size() << " images: targets " << targets.sizes() << "\n";

    RunDirectory run(job.run_dir);
    VarTransformer var(job.model), ema(job.model);
    var->init_weights(job.train.seed);
    var->to(dev);
    var->train();
    torch::optim::AdamW opt(var->parameters(), torch::optim::AdamWOptions(job.train.lr)
                                                   .betas({0.9, 0.95})
                                                   .weight_decay(job.train.weight_decay));
    const nlohmann::json cfg_json = job.model.to_json();
    const at::Tensor fg = foreground_token_mask(data.images, job.model.patch_nums);
    const int64_t last_tokens = job.model.patch_nums.back() * job.model.patch_nums.back();
    auto evaluate = [&](const VarTransformerImpl& m) {
        return evaluate_var_teacher(m, data.labels, inputs, targets, fg, last_tokens);
    };
    nlohmann::json init_eval;
    int64_t step = run.resume(*var, opt, run.path("last.safetensors"));
    if (step) {
        out << "resumed at step " << step << "\n";
    } else if (!job.init_path.empty()) {
        StateDict init = load_checkpoint(job.init_path);
        int64_t init_depth = 0;
        while (init.count("blocks." + std::to_string(init_depth) + ".attn.mat_qkv.weight"))
            ++init_depth;
        if (job.grow_depth && init_depth < job.model.depth) {
            grow_var_from(*var, init, job.init_path);
            out << "initialised from " << job.init_path << ", grown from " << init_depth << " to "
                << job.model.depth << " blocks\n";
        } else {
            BindOptions o;
            o.what = job.init_path;
            o.optional_buffers = {"attn_bias_for_masking", "lvl_1L"};
            for (int64_t i = 0; i < job.model.depth; ++i)
                o.optional_buffers.push_back("blocks." + std::to_string(i) + ".attn.zero_k_bias");
            bind_state_dict(*var, init, o);
            out << "initialised from " << job.init_path << "\n";
        }
        var->eval();
        init_eval = evaluate(*var);
        var->train();
        run.log({{"init_eval", init_eval}});
        out << "init eval " << init_eval.dump() << std::endl;
    }
    ema->to(dev);
    for (auto& p : ema->parameters()) p.set_requires_grad(false);
    {
        at::NoGradGuard g;
        auto d = ema->parameters(), s = var->parameters();
        for (size_t i = 0; i < d.size(); ++i) d[i].copy_(s[i]);
        if (step && job.ema_rate > 0 && std::filesystem::exists(run.path("ema.safetensors")))
            ema->load(load_checkpoint(run.path("ema.safetensors")), run.path("ema.safetensors"));
    }
    const std::vector<at::Tensor> ema_params = ema->parameters(), params = var->parameters();
    TrainConfig tc = job.train;  // fit_steps_to_time may resize the schedule
    BatchSampler sampler(data.size(), tc.batch, tc.seed);
    auto gen = at::detail::createCPUGenerator(tc.seed + 29);
    const int64_t V = job.model.vocab_size;
    TimeBudget budget(tc.max_seconds);
    // Class dropout per image and epoch, drawn on the host once per epoch (one copy, not one a
    // step).
    at::Tensor drop_epoch;
    int64_t drop_for_epoch = -1;
    const int64_t fit_from = step + 20, fit_to = step + 80;
    double fit_t0 = 0;
    for (; step < tc.steps; ++step) {
        if (step % 10 == 0 && budget.spent(step, out)) break;
        set_learning_rate(opt, tc.lr_at(step));
        auto rows = sampler.next_on(dev);
        if (sampler.epoch() != drop_for_epoch) {
            drop_epoch = at::rand({data.size()}, gen).lt(job.cond_drop).to(dev);
            drop_for_epoch = sampler.epoch();
        }
        auto labels = data.labels.index_select(0, rows);
        labels = at::where(drop_epoch.index_select(0, rows), at::full_like(labels, -1), labels);
        auto tgt = targets.index_select(0, rows);
        at::Tensor logits, loss;
        {
            AutocastBf16 ac(dev, job.bf16_autocast);
            logits = var->forward_teacher(labels, inputs.index_select(0, rows));
            loss =
                at::cross_entropy_loss(logits.reshape({-1, V}).to(at::kFloat), tgt.reshape({-1}));
        }
        opt.zero_grad();
        loss.backward();
        opt.step();
        if (job.ema_rate > 0) ema_update(ema_params, params, job.ema_rate);
        if (job.fit_steps_to_time && tc.max_seconds > 0 && (step == fit_from || step == fit_to)) {
            loss.item<double>();  // waits for the GPU, so the host clock measures finished steps
            if (step == fit_from) {
                fit_t0 = budget.elapsed();
            } else {
                const double per_step =
                    (budget.elapsed() - fit_t0) / static_cast<double>(fit_to - fit_from);
                const double left = tc.max_seconds - budget.elapsed();
                tc.steps = std::max(step + 1, step + static_cast<int64_t>(0.97 * left / per_step));
                tc.warmup = std::min(tc.warmup, tc.steps / 2);
                nlohmann::json rec = {{"fit_steps_to_time", tc.steps},
                                      {"seconds_per_step", per_step}};
                run.log(rec);
                out << rec.dump() << std::endl;
            }
        }
        if (step % tc.log_every == 0 || step + 1 == tc.steps) {
            at::NoGradGuard g;
            auto hit = logits.argmax(-1).eq(tgt);
            auto m = fg.index_select(0, rows);
            const double acc = hit.to(at::kFloat).mean().item<double>();
            const double fg_acc =
                (hit.logical_and(m).sum().to(at::kDouble) / m.sum().clamp_min(1)).item<double>();
            nlohmann::json rec = {{"step", step},
                                  {"loss", loss.item<double>()},
                                  {"token_acc", acc},
                                  {"fg_token_acc", fg_acc},
                                  {"lr", tc.lr_at(step)},
                                  {"epoch", sampler.epoch()},
                                  {"seconds", budget.elapsed()}};
            run.log(rec);
            out << rec.dump() << std::endl;
        }
        if ((step + 1) % tc.checkpoint_every == 0) {
            run.save(*var, opt, step + 1, cfg_json);
            if (job.ema_rate > 0)
                save_safetensors(module_state_dict(*ema), run.path("ema.safetensors"),
                                 {{"varscope.config", cfg_json.dump()}});
        }
    }
    const double train_seconds = budget.elapsed();
    run.save(*var, opt, step, cfg_json);
    if (job.ema_rate > 0)
        save_safetensors(module_state_dict(*ema), run.path("ema.safetensors"),
                         {{"varscope.config", cfg_json.dump()}});
    save_safetensors(module_state_dict(*var), run.path("final.safetensors"),
                     {{"varscope.config", cfg_json.dump()}});
    std::vector<std::string> derived{"attn_bias_for_masking"};
    for (int64_t i = 0; i < job.model.depth; ++i)
        derived.push_back("blocks." + std::to_string(i) + ".attn.zero_k_bias");
    std::map<std::string, std::string> extra;
    if (!job.recommended_sampling.empty()) extra[kSamplingMetadataKey] = job.recommended_sampling;
    const VarTransformerImpl& shipped = job.ema_rate > 0 ? *ema : *var;
    export_half(shipped, run.path("export-fp16.safetensors"), cfg_json, derived, extra,
                job.export_int8);
    if (job.ema_rate > 0)  // the raw weights too, for comparison and for continuing
        export_half(*var, run.path("export-raw-fp16.safetensors"), cfg_json, derived, extra,
                    job.export_int8);

    // Teacher-forced metrics over the whole data set (conditional): the trained weights, the EMA,
    // and the exported file as the app loads it (fp16 / int8 dequantised, then fp32 here).
    var->eval();
    nlohmann::json report = evaluate(*var);
    if (job.ema_rate > 0) report["ema"] = evaluate(*ema);
    {
        StateDict sd = load_checkpoint(run.path("export-fp16.safetensors"));
        VarTransformer reloaded(job.model);
        reloaded->load(sd, run.path("export-fp16.safetensors"));
        reloaded->to(dev);
        reloaded->eval();
        report["export"] = evaluate(*reloaded);
        report["export"]["bytes"] = std::filesystem::file_size(run.path("export-fp16.safetensors"));
    }
    if (!init_eval.is_null()) report["init"] = init_eval;
    report["steps"] = step;
    report["train_seconds"] = train_seconds;
    report["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    report["train"] = tc.to_json();
    report["model"] = cfg_json;
    report["ema_rate"] = job.ema_rate;
    report["bf16_autocast"] = job.bf16_autocast;
    report["export_int8"] = job.export_int8;
    run.log({{"final", report}});
    return report;
}

}  // namespace varscope
