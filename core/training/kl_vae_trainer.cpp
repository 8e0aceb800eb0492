#include "core/training/kl_vae_trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <torch/optim/adam.h>

#include <chrono>
#include <cmath>
#include <ostream>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"

namespace varscope {

nlohmann::json KlVaeLoss::to_json() const {
    return {{"l1_weight", l1_weight}, {"mse_weight", mse_weight}, {"kl_weight", kl_weight}};
}

KlVaeLoss KlVaeLoss::from_json(const nlohmann::json& j) {
    KlVaeLoss l;
    if (!j.is_object()) throw std::invalid_argument("loss config: expected a JSON object");
    for (auto [key, value] :
         {std::pair{"l1_weight", &l.l1_weight}, std::pair{"mse_weight", &l.mse_weight},
          std::pair{"kl_weight", &l.kl_weight}}) {
        if (!j.contains(key)) continue;
        if (!j.at(key).is_number())
            throw std::invalid_argument(std::string("loss config: '") + key + "' must be a number");
        *value = j.at(key).get<double>();
        if (!(*value >= 0) || !std::isfinite(*value))
            throw std::invalid_argument(std::string("loss config: '") + key + "' must be >= 0");
    }
    for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "l1_weight" && it.key() != "mse_weight" && it.key() != "kl_weight")
            throw std::invalid_argument("loss config: unknown key '" + it.key() + "'");
    if (l.l1_weight + l.mse_weight <= 0)
        throw std::invalid_argument("loss config: 'l1_weight' + 'mse_weight' must be > 0");
    return l;
}

nlohmann::json evaluate_kl_vae(KlVae& vae, const ImageDataset& data, int64_t batch, uint64_t seed) {
    c10::InferenceMode guard;
    const bool was_training = vae->is_training();
    vae->eval();
    auto gen = at::detail::createCPUGenerator(seed);
    double psnr_mode = 0, psnr_sample = 0, kl = 0;
    double sum = 0, sum_sq = 0, mean_sum = 0, mean_sum_sq = 0, post_std = 0;
    double count = 0;
    for (int64_t b = 0; b < data.size(); b += batch) {
        auto rows = at::arange(b, std::min(b + batch, data.size()), at::kLong);
        const at::Tensor img = data.batch_images(rows);
        const DiagonalGaussian posterior = vae->encode(img);
        const at::Tensor z = posterior.sample(gen);
        psnr_mode += psnr_sum(vae->decode(posterior.mean), img);
        psnr_sample += psnr_sum(vae->decode(z), img);
        kl += posterior.kl().sum().item<double>();
        const at::Tensor zd = z.to(at::kDouble), md = posterior.mean.to(at::kDouble);
        sum += zd.sum().item<double>();
        sum_sq += zd.pow(2).sum().item<double>();
        mean_sum += md.sum().item<double>();
        mean_sum_sq += md.pow(2).sum().item<double>();
        post_std += posterior.std().to(at::kDouble).sum().item<double>();
        count += static_cast<double>(z.numel());
    }
    vae->train(was_training);
    const double n = static_cast<double>(data.size());
    const double mean = sum / count, mean_of_means = mean_sum / count;
    const double std = std::sqrt(std::max(0.0, sum_sq / count - mean * mean));
    const double std_of_means =
        std::sqrt(std::max(0.0, mean_sum_sq / count - mean_of_means * mean_of_means));
    return {{"psnr_db", psnr_mode / n},
            {"psnr_sample_db", psnr_sample / n},
            {"latent_mean", mean},
            {"latent_std", std},
            {"latent_std_of_means", std_of_means},
            {"posterior_std_mean", post_std / count},
            {"kl_per_image", kl / n},
            {"images", data.size()}};
}

nlohmann::json train_kl_vae(const KlVaeTrainJob& job, std::ostream& out) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const at::Device dev(job.train.device);
    ImageDataset data = prepare_training(job.train, job.data_path);
    if (data.images.size(2) % job.model.downsample() != 0 ||
        data.images.size(3) % job.model.downsample() != 0)
        throw std::invalid_argument(
            "train klvae: image size " + std::to_string(data.images.size(2)) +
            " is not a multiple of the model's stride " + std::to_string(job.model.downsample()));
    RunDirectory run(job.run_dir);
    torch::manual_seed(job.train.seed);
    KlVae vae(job.model);
    vae->to(dev);
    vae->train();
    torch::optim::Adam opt(vae->parameters(), torch::optim::AdamOptions(job.train.lr)
                                                  .betas({0.5, 0.9})
                                                  .weight_decay(job.train.weight_decay));
    nlohmann::json cfg_json = job.model.to_json();
    int64_t step = run.resume(*vae, opt, run.path("last.safetensors"));
    if (step > 0) out << "resumed at step " << step << "\n";
    BatchSampler sampler(data.size(), job.train.batch, job.train.seed);
    for (int64_t s = 0; s < step; ++s) sampler.next();  // same batches as an unbroken run
    const double pixels = static_cast<double>(3 * data.images.size(2) * data.images.size(3));
    TimeBudget budget(job.train.max_seconds);
    for (; step < job.train.steps; ++step) {
        if (step % 10 == 0 && budget.spent(step, out)) break;
        set_learning_rate(opt, job.train.lr_at(step));
        const at::Tensor img = data.batch_images(sampler.next());
        const DiagonalGaussian posterior = vae->encode(img);
        const at::Tensor rec = vae->decode_unclamped(posterior.sample());
        const at::Tensor l1 = (rec - img).abs().mean();
        const at::Tensor mse = (rec - img).pow(2).mean();
        const at::Tensor kl = posterior.kl().mean();
        const at::Tensor loss = l1 * job.loss.l1_weight + mse * job.loss.mse_weight +
                                kl * (job.loss.kl_weight / pixels);
        opt.zero_grad();
        loss.backward();
        opt.step();
        if (step % job.train.log_every == 0 || step + 1 == job.train.steps) {
            const double m = mse.item<double>();
            nlohmann::json rec_log = {
                {"step", step},
                {"loss", loss.item<double>()},
                {"l1", l1.item<double>()},
                {"mse", m},
                {"kl", kl.item<double>()},
                {"psnr_batch", psnr_of_mse(m)},
                {"latent_std_batch", posterior.mean.std().item<double>()},
                {"lr", job.train.lr_at(step)},
                {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()}};
            run.log(rec_log);
            out << rec_log.dump() << std::endl;
        }
        if ((step + 1) % job.train.checkpoint_every == 0) run.save(*vae, opt, step + 1, cfg_json);
    }
    run.save(*vae, opt, step, cfg_json);
    nlohmann::json report = evaluate_kl_vae(vae, data, 256, job.train.seed);
    KlVaeConfig shipped = job.model;
    if (job.auto_scale_factor) {
        const double std = report["latent_std"].get<double>();
        if (std > 0 && std::isfinite(std)) shipped.scale_factor = 1.0 / std;
    }
    cfg_json = shipped.to_json();
    save_safetensors(module_state_dict(*vae), run.path("final.safetensors"),
                     {{"varscope.config", cfg_json.dump()}});
    export_half(*vae, run.path("export-fp16.safetensors"), cfg_json);
    report["scale_factor"] = shipped.scale_factor;
    report["steps"] = step;
    report["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    report["train"] = job.train.to_json();
    report["loss"] = job.loss.to_json();
    report["model"] = cfg_json;
    run.log({{"final", report}});
    return report;
}

}  // namespace varscope
