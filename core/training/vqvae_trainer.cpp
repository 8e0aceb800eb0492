#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/optim/adam.h>

#include <chrono>
#include <ostream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/training/trainers.h"

namespace varscope {
namespace {

at::Tensor named(const torch::nn::Module& m, const std::string& name, bool buffer) {
    if (buffer) {
        for (const auto& b : m.named_buffers())
            if (b.key() == name) return b.value();
    } else {
        for (const auto& p : m.named_parameters())
            if (p.key() == name) return p.value();
    }
    throw std::logic_error("no tensor " + name);
}

// Rows of the encoder output, channels last: candidates for (re)seeding codebook entries.
at::Tensor feature_rows(Vqvae& vae, const at::Tensor& img) {
    auto f = vae->encode(img).detach();
    return f.permute({0, 2, 3, 1}).reshape({-1, f.size(1)});
}

// Replaces codebook entries that no scale has used recently with encoder features, shrunk at
// random because later scales quantise ever smaller residuals. Returns how many were replaced.
int64_t restart_dead_codes(Vqvae& vae, const at::Tensor& img, at::Generator& gen) {
    at::NoGradGuard g;
    auto hits = named(*vae, "quantize.ema_vocab_hit_SV", true);
    auto code = named(*vae, "quantize.embedding.weight", false);
    auto total = hits.sum(0);
    auto dead = total.lt(total.mean() * 0.01).nonzero().view({-1});
    const int64_t n = dead.numel();
    if (n == 0) return 0;
    auto rows = feature_rows(vae, img);
    auto pick =
        at::randint(rows.size(0), {n}, gen, at::TensorOptions().dtype(at::kLong)).to(rows.device());
    auto shrink = at::rand({n, 1}, gen, at::TensorOptions().dtype(at::kFloat))
                      .mul(0.95)
                      .add(0.05)
                      .to(rows.device());
    code.index_copy_(0, dead.to(code.device()), rows.index_select(0, pick).mul(shrink));
    // Give the new entries an average hit count so they are not replaced again at once.
    hits.index_fill_(1, dead.to(hits.device()), total.mean().item<double>() / hits.size(0));
    return n;
}

}  // namespace

nlohmann::json evaluate_vqvae(Vqvae& vae, const ImageDataset& data, int64_t batch) {
    c10::InferenceMode g;
    const bool was_training = vae->is_training();
    vae->eval();
    double se = 0;
    const int64_t V = vae->config().vocab_size;
    auto used = at::zeros({V}, at::TensorOptions(data.images.device()).dtype(at::kBool));
    for (int64_t b = 0; b < data.size(); b += batch) {
        auto rows = at::arange(b, std::min(b + batch, data.size()), at::kLong);
        auto img = data.batch_images(rows);
        auto idx = vae->img_to_idx(img);
        for (auto& t : idx) used.index_fill_(0, t.reshape({-1}), true);
        auto rec = vae->idx_to_img(idx);
        se += psnr_sum(rec, img);
    }
    vae->train(was_training);
    return {{"psnr_db", se / data.size()},
            {"codebook_usage", used.sum().item<double>() / V},
            {"images", data.size()}};
}

nlohmann::json train_vqvae(const VqvaeTrainJob& job, std::ostream& out) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const at::Device dev(job.train.device);
    ImageDataset data = prepare_training(job.train, job.data_path);
    RunDirectory run(job.run_dir);
    torch::manual_seed(job.train.seed);
    Vqvae vae(job.model);
    vae->to(dev);
    vae->train();
    torch::optim::Adam opt(vae->parameters(),
                           torch::optim::AdamOptions(job.train.lr).betas({0.5, 0.9}));
    const nlohmann::json cfg_json = job.model.to_json();
    int64_t step = run.resume(*vae, opt, run.path("last.safetensors"));
    auto gen = at::detail::createCPUGenerator(job.train.seed + 17);
    BatchSampler sampler(data.size(), job.train.batch, job.train.seed);
    if (step == 0) {
        // Seed the codebook from the data so every entry starts near real features.
        at::NoGradGuard g;
        auto rows = feature_rows(vae, data.batch_images(sampler.next()));
        auto code = named(*vae, "quantize.embedding.weight", false);
        auto pick =
            at::randint(rows.size(0), {code.size(0)}, gen, at::TensorOptions().dtype(at::kLong))
                .to(dev);
        code.copy_(rows.index_select(0, pick).mul(
            at::rand({code.size(0), 1}, gen).to(dev).mul(0.95).add(0.05)));
    } else {
        out << "resumed at step " << step << "\n";
    }
    TimeBudget budget(job.train.max_seconds);
    for (; step < job.train.steps; ++step) {
        if (step % 10 == 0 && budget.spent(step, out)) break;
        set_learning_rate(opt, job.train.lr_at(step));
        auto img = data.batch_images(sampler.next());
        auto r = vae->forward_train(img, step % job.train.log_every == 0);
        auto mse = (r.reconstruction - img).pow(2).mean();
        auto l1 = (r.reconstruction - img).abs().mean();
        auto loss = mse + l1 + r.vq_loss;
        opt.zero_grad();
        loss.backward();
        opt.step();
        int64_t restarted = 0;
        if (job.restart_every > 0 && step > 0 && step % job.restart_every == 0 &&
            step < job.train.steps * 8 / 10)
            restarted = restart_dead_codes(vae, img, gen);
        if (step % job.train.log_every == 0 || step + 1 == job.train.steps) {
            const double m = mse.item<double>();
            nlohmann::json rec = {{"step", step},
                                  {"loss", loss.item<double>()},
                                  {"mse", m},
                                  {"psnr_batch", psnr_of_mse(m)},
                                  {"vq_loss", r.vq_loss.item<double>()},
                                  {"lr", job.train.lr_at(step)},
                                  {"restarted_codes", restarted},
                                  {"usage_pct", r.usages}};
            run.log(rec);
            out << rec.dump() << std::endl;
        }
        if ((step + 1) % job.train.checkpoint_every == 0) run.save(*vae, opt, step + 1, cfg_json);
    }
    run.save(*vae, opt, step, cfg_json);
    save_safetensors(module_state_dict(*vae), run.path("final.safetensors"),
                     {{"varscope.config", cfg_json.dump()}});
    export_half(*vae, run.path("export-fp16.safetensors"), cfg_json);
    auto report = evaluate_vqvae(vae, data);
    report["steps"] = step;
    report["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    report["train"] = job.train.to_json();
    report["model"] = cfg_json;
    run.log({{"final", report}});
    return report;
}

}  // namespace varscope
