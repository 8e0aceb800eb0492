#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <ostream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/models/sampling_recommendation.h"
#include "core/training/trainers.h"

namespace varscope {

nlohmann::json train_var(const VarTrainJob& job, std::ostream& out) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const at::Device dev(job.train.device);
    ImageDataset data = prepare_training(job.train, job.data_path);
    if (data.num_classes > job.model.num_classes)
        throw std::invalid_argument("the data has " + std::to_string(data.num_classes) +
                                    " classes but the VAR config only " + std::to_string(job.model.num_classes));
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
    VarTransformer var(job.model);
    var->init_weights(job.train.seed);
    var->to(dev);
    var->train();
    torch::optim::AdamW opt(var->parameters(), torch::optim::AdamWOptions(job.train.lr)
                                                   .betas({0.9, 0.95})
                                                   .weight_decay(job.train.weight_decay));
    const nlohmann::json cfg_json = job.model.to_json();
    int64_t step = run.resume(*var, opt, run.path("last.safetensors"));
    if (step) {
        out << "resumed at step " << step << "\n";
    } else if (!job.init_path.empty()) {
        BindOptions o;
        o.what = job.init_path;
        o.optional_buffers = {"attn_bias_for_masking", "lvl_1L"};
        for (int64_t i = 0; i < job.model.depth; ++i)
            o.optional_buffers.push_back("blocks." + std::to_string(i) + ".attn.zero_k_bias");
        bind_state_dict(*var, load_checkpoint(job.init_path), o);
        out << "initialised from " << job.init_path << "\n";
    }
    BatchSampler sampler(data.size(), job.train.batch, job.train.seed);
    auto gen = at::detail::createCPUGenerator(job.train.seed + 29);
    const int64_t V = job.model.vocab_size;
    TimeBudget budget(job.train.max_seconds);
    for (; step < job.train.steps; ++step) {
        if (step % 10 == 0 && budget.spent(step, out)) break;
        set_learning_rate(opt, job.train.lr_at(step));
        auto rows = sampler.next().to(dev);
        auto labels = data.labels.index_select(0, rows);
        auto drop = at::rand({labels.size(0)}, gen).lt(job.cond_drop).to(dev);
        labels = at::where(drop, at::full_like(labels, -1), labels);
        auto logits = var->forward_teacher(labels, inputs.index_select(0, rows));
        auto tgt = targets.index_select(0, rows);
        auto loss = at::cross_entropy_loss(logits.reshape({-1, V}), tgt.reshape({-1}));
        opt.zero_grad();
        loss.backward();
        opt.step();
        if (step % job.train.log_every == 0 || step + 1 == job.train.steps) {
            at::NoGradGuard g;
            const double acc = logits.argmax(-1).eq(tgt).to(at::kFloat).mean().item<double>();
            nlohmann::json rec = {{"step", step}, {"loss", loss.item<double>()}, {"token_acc", acc},
                                  {"lr", job.train.lr_at(step)}, {"epoch", sampler.epoch()}};
            run.log(rec);
            out << rec.dump() << std::endl;
        }
        if ((step + 1) % job.train.checkpoint_every == 0) run.save(*var, opt, step + 1, cfg_json);
    }
    run.save(*var, opt, step, cfg_json);
    save_safetensors(module_state_dict(*var), run.path("final.safetensors"), {{"varscope.config", cfg_json.dump()}});
    std::vector<std::string> derived{"attn_bias_for_masking"};
    for (int64_t i = 0; i < job.model.depth; ++i) derived.push_back("blocks." + std::to_string(i) + ".attn.zero_k_bias");
    std::map<std::string, std::string> extra;
    if (!job.recommended_sampling.empty()) extra[kSamplingMetadataKey] = job.recommended_sampling;
    export_half(*var, run.path("export-fp16.safetensors"), cfg_json, derived, extra);

    // Teacher-forced token accuracy over the whole data set (conditional).
    double correct = 0, loss_sum = 0;
    {
        c10::InferenceMode g;
        var->eval();
        for (int64_t b = 0; b < data.size(); b += 256) {
            auto rows = at::arange(b, std::min(b + 256, data.size()), at::kLong).to(dev);
            auto logits = var->forward_teacher(data.labels.index_select(0, rows), inputs.index_select(0, rows));
            auto tgt = targets.index_select(0, rows);
            correct += logits.argmax(-1).eq(tgt).sum().item<double>();
            loss_sum += at::cross_entropy_loss(logits.reshape({-1, V}), tgt.reshape({-1})).item<double>() * rows.size(0);
        }
    }
    nlohmann::json report = {{"token_acc", correct / targets.numel()}, {"loss", loss_sum / data.size()},
                             {"steps", step},
                             {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
                             {"train", job.train.to_json()}, {"model", cfg_json}};
    run.log({{"final", report}});
    return report;
}

}  // namespace varscope
