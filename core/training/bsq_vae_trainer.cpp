#include "core/training/bsq_vae_trainer.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/optim/adam.h>

#include <chrono>
#include <cmath>
#include <ostream>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"

namespace varscope {
namespace {

ImageDataset rows_of(const ImageDataset& data, const at::Tensor& rows) {
    ImageDataset out;
    out.images = data.images.index_select(0, rows.to(data.images.device()));
    out.labels = data.labels.index_select(0, rows.to(data.labels.device()));
    out.num_classes = data.num_classes;
    return out;
}

// Binary entropy in bits of each entry of p (0 log 0 = 0).
at::Tensor binary_entropy_bits(const at::Tensor& p) {
    const at::Tensor q = 1 - p;
    return (p * p.clamp_min(1e-12).log2() + q * q.clamp_min(1e-12).log2()).neg();
}

}  // namespace

nlohmann::json BsqVaeLoss::to_json() const {
    nlohmann::json j = quantizer.to_json();
    j["l1_weight"] = l1_weight;
    j["mse_weight"] = mse_weight;
    return j;
}

BsqVaeLoss BsqVaeLoss::from_json(const nlohmann::json& j) {
    BsqVaeLoss l;
    l.quantizer = BsqLossConfig::from_json(j, {"l1_weight", "mse_weight"});
    for (auto [key, value] :
         {std::pair{"l1_weight", &l.l1_weight}, std::pair{"mse_weight", &l.mse_weight}}) {
        if (!j.contains(key)) continue;
        if (!j.at(key).is_number())
            throw std::invalid_argument(std::string("loss config: '") + key + "' must be a number");
        *value = j.at(key).get<double>();
        if (!(*value >= 0) || !std::isfinite(*value))
            throw std::invalid_argument(std::string("loss config: '") + key + "' must be >= 0");
    }
    if (l.l1_weight + l.mse_weight <= 0)
        throw std::invalid_argument("loss config: 'l1_weight' + 'mse_weight' must be > 0");
    return l;
}

BsqVaeConfig emoji_bsq_vae_config() {
    BsqVaeConfig c;
    c.codebook_dim = 16;
    c.base_ch = 64;
    c.encoder_ch_mult = c.decoder_ch_mult = {1, 2, 2};
    c.num_res_blocks = 2;
    c.patch_size = 4;
    return c;
}

std::vector<bsq::Size3> bsq_square_schedule(const std::vector<int64_t>& scales,
                                            int64_t latent_side) {
    auto fail = [&](const std::string& why) {
        throw std::invalid_argument("scales: " + why + " (latent side " +
                                    std::to_string(latent_side) + ")");
    };
    if (scales.empty()) fail("empty");
    std::vector<bsq::Size3> out;
    for (size_t i = 0; i < scales.size(); ++i) {
        if (scales[i] < 1) fail("every side must be >= 1");
        if (i > 0 && scales[i] <= scales[i - 1]) fail("sides must increase strictly");
        out.push_back({1, scales[i], scales[i]});
    }
    if (scales.back() != latent_side)
        fail("the last side must be the latent side, got " + std::to_string(scales.back()));
    return out;
}

std::pair<ImageDataset, ImageDataset> split_holdout(const ImageDataset& data, int64_t every) {
    if (every < 0) throw std::invalid_argument("holdout_every must be >= 0");
    const at::Tensor idx = at::arange(data.size(), at::kLong);
    if (every == 0) return {data, rows_of(data, idx.narrow(0, 0, 0))};
    const at::Tensor held = idx.remainder(every).eq(0);
    ImageDataset train = rows_of(data, idx.masked_select(held.logical_not()));
    if (train.size() == 0)
        throw std::invalid_argument("holdout_every " + std::to_string(every) +
                                    " leaves no training images out of " +
                                    std::to_string(data.size()));
    return {train, rows_of(data, idx.masked_select(held))};
}

nlohmann::json evaluate_bsq_vae(BsqVae& vae, const ImageDataset& data,
                                const std::vector<bsq::Size3>& schedule, int64_t batch) {
    c10::InferenceMode guard;
    const bool was_training = vae->is_training();
    vae->eval();
    const int64_t d = vae->config().codebook_dim;
    const at::Device dev = data.images.device();
    at::Tensor ones = at::zeros({d}, at::TensorOptions(dev).dtype(at::kDouble));
    std::vector<at::Tensor> codes;  // int64 code per token (bits as a binary number)
    const at::Tensor weights =
        at::pow(2, at::arange(d - 1, -1, -1, at::TensorOptions(dev).dtype(at::kLong)));
    double psnr = 0, tokens = 0;
    for (int64_t b = 0; b < data.size(); b += batch) {
        const at::Tensor rows = at::arange(b, std::min(b + batch, data.size()), at::kLong);
        const at::Tensor img = data.batch_images(rows);
        const BsqEncodeOutput enc = vae->encode(img, schedule);
        psnr += psnr_sum(vae->decode(enc.codes.f_hat), img);
        for (const at::Tensor& bits : enc.codes.bits) {
            const at::Tensor flat = bits.reshape({-1, d});
            ones += flat.sum(0).to(at::kDouble);
            tokens += static_cast<double>(flat.size(0));
            if (d <= 62) codes.push_back(flat.mul(weights).sum(1));
        }
    }
    vae->train(was_training);
    nlohmann::json r = {{"images", data.size()}, {"tokens", tokens}};
    if (data.size() == 0) return r;
    r["psnr_db"] = psnr / static_cast<double>(data.size());
    const at::Tensor p1 = ones / tokens;
    r["bit_one_fraction_min"] = p1.min().item<double>();
    r["bit_one_fraction_max"] = p1.max().item<double>();
    r["bit_entropy_bits"] = binary_entropy_bits(p1).sum().item<double>();
    if (!codes.empty()) {
        const auto [values, inverse, counts] =
            at::_unique2(at::cat(codes), /*sorted=*/false, false, /*return_counts=*/true);
        const at::Tensor p = counts.to(at::kDouble) / tokens;
        r["distinct_codes"] = values.numel();
        r["code_entropy_bits"] = p.mul(p.log2()).sum().neg().item<double>();
    }
    return r;
}

nlohmann::json train_bsq_vae(const BsqVaeTrainJob& job, std::ostream& out) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    job.model.validate();
    job.loss.quantizer.check_against(job.model.codebook_dim);
    if (job.stop_at_step < 0) throw std::invalid_argument("stop_at_step must be >= 0");
    const at::Device dev(job.train.device);
    const ImageDataset all = prepare_training(job.train, job.data_path);
    const int64_t H = all.images.size(2), W = all.images.size(3), p = job.model.patch_size;
    if (H != W || H % p != 0)
        throw std::invalid_argument(
            "train bsq-vae: images must be square with a side that is a multiple of the patch "
            "size " +
            std::to_string(p) + ", got " + std::to_string(H) + "x" + std::to_string(W));
    const std::vector<bsq::Size3> schedule = bsq_square_schedule(job.scales, H / p);
    const auto [data, heldout] = split_holdout(all, job.holdout_every);
    RunDirectory run(job.run_dir);
    torch::manual_seed(job.train.seed);
    BsqVae vae(job.model);
    vae->to(dev);
    vae->train();
    torch::optim::Adam opt(vae->parameters(), torch::optim::AdamOptions(job.train.lr)
                                                  .betas({0.5, 0.9})
                                                  .weight_decay(job.train.weight_decay));
    const nlohmann::json cfg_json = job.model.to_json();
    const std::string scales_json = nlohmann::json(job.scales).dump();
    int64_t step = run.resume(*vae, opt, run.path("last.safetensors"));
    if (step > 0) out << "resumed at step " << step << "\n";
    BatchSampler sampler(data.size(), job.train.batch, job.train.seed);
    for (int64_t s = 0; s < step; ++s) sampler.next();  // same batches as an unbroken run
    const bsq::BsqQuantConfig qcfg = vae->quant_config();
    TimeBudget budget(job.train.max_seconds);
    for (; step < job.train.steps; ++step) {
        if (job.stop_at_step > 0 && step >= job.stop_at_step) break;
        if (step % 10 == 0 && budget.spent(step, out)) break;
        set_learning_rate(opt, job.train.lr_at(step));
        const at::Tensor img = data.batch_images(sampler.next());
        const at::Tensor h = vae->encode_h(img).to(at::kFloat);
        std::vector<BsqScaleLosses> scale_losses;
        const bsq::MultiScaleCodes codes =
            bsq::quantize_multiscale(h, schedule, qcfg, [&](size_t, const bsq::BsqQuantized& q) {
                scale_losses.push_back(bsq_scale_losses(q, job.loss.quantizer));
            });
        const at::Tensor rec = vae->decode_unclamped(codes.f_hat);
        const at::Tensor l1 = (rec - img).abs().mean();
        const at::Tensor mse = (rec - img).pow(2).mean();
        at::Tensor aux = at::zeros({}, h.options()), commit = aux, h_sample = aux, h_code = aux;
        for (const BsqScaleLosses& s : scale_losses) {
            aux = aux + s.aux;
            commit = commit + s.commitment.detach();
            h_sample = h_sample + s.per_sample_entropy.detach();
            h_code = h_code + s.codebook_entropy.detach();
        }
        const double n_scales = static_cast<double>(scale_losses.size());
        aux = aux / n_scales;
        const at::Tensor loss = l1 * job.loss.l1_weight + mse * job.loss.mse_weight + aux;
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
                {"psnr_batch", psnr_of_mse(m)},
                {"quant_loss", aux.item<double>()},
                {"commitment", commit.item<double>() / n_scales},
                {"per_sample_entropy", h_sample.item<double>() / n_scales},
                {"codebook_entropy", h_code.item<double>() / n_scales},
                {"bit_one_fraction", codes.bits.back().to(at::kFloat).mean().item<double>()},
                {"lr", job.train.lr_at(step)},
                {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()}};
            run.log(rec_log);
            out << rec_log.dump() << std::endl;
        }
        if ((step + 1) % job.train.checkpoint_every == 0) run.save(*vae, opt, step + 1, cfg_json);
    }
    run.save(*vae, opt, step, cfg_json);
    const std::map<std::string, std::string> metadata = {{"varscope.config", cfg_json.dump()},
                                                         {"varscope.bsq_scales", scales_json}};
    save_safetensors(module_state_dict(*vae), run.path("final.safetensors"), metadata);
    export_half(*vae, run.path("export-fp16.safetensors"), cfg_json, {},
                {{"varscope.bsq_scales", scales_json}});
    const nlohmann::json held = evaluate_bsq_vae(vae, heldout, schedule);
    const nlohmann::json trained = evaluate_bsq_vae(vae, data, schedule);
    nlohmann::json report = {{"heldout", held}, {"train_images", trained}};
    report["psnr_db"] = heldout.size() > 0 ? held["psnr_db"] : trained["psnr_db"];
    report["psnr_on"] = heldout.size() > 0 ? "heldout" : "train_images";
    report["holdout_every"] = job.holdout_every;
    report["scales"] = job.scales;
    report["steps"] = step;
    report["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    report["train"] = job.train.to_json();
    report["loss"] = job.loss.to_json();
    report["model"] = cfg_json;
    report["parameters"] = [&] {
        int64_t n = 0;
        for (const auto& t : vae->parameters()) n += t.numel();
        return n;
    }();
    run.log({{"final", report}});
    return report;
}

}  // namespace varscope
