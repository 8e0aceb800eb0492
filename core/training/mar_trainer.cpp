#include "core/training/mar_trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/json_fields.h"
#include "core/io/module_binding.h"
#include "core/mar_pipeline.h"
#include "core/models/kl_vae.h"

namespace varscope {
namespace {

using Clock = std::chrono::steady_clock;

// The KL VAE's posterior moments of every image, encoded once (MAR's cached-latent option).
struct CachedLatents {
    at::Tensor mean, std;  // (N, C, h, w) on the training device
    double scale_factor = 1;
};

CachedLatents encode_dataset(const std::string& vae_path, const ImageDataset& data,
                             const at::Device& dev) {
    KlVae vae = load_kl_vae(vae_path, data.images.size(2));
    vae->to(dev);
    vae->eval();
    c10::InferenceMode g;
    std::vector<at::Tensor> means, stds;
    for (int64_t b = 0; b < data.size(); b += 256) {
        auto rows = at::arange(b, std::min(b + 256, data.size()), at::kLong);
        const DiagonalGaussian p = vae->encode(data.batch_images(rows));
        means.push_back(p.mean);
        stds.push_back(p.std());
    }
    return {at::cat(means).clone(), at::cat(stds).clone(), vae->config().scale_factor};
}

at::Tensor batch_tokens(const CachedLatents& lat, const at::Tensor& rows, bool sample,
                        int64_t patch) {
    auto mean = lat.mean.index_select(0, rows);
    auto z = sample ? mean + lat.std.index_select(0, rows) * at::randn_like(mean) : mean;
    return mar_patchify(z * lat.scale_factor, patch);
}

// AdamW groups as the official add_weight_decay: no decay on 1-d tensors, biases and the
// DiffLoss head.
std::vector<torch::optim::OptimizerParamGroup> param_groups(const torch::nn::Module& m,
                                                            const TrainConfig& t) {
    std::vector<at::Tensor> decay, no_decay;
    for (const auto& item : m.named_parameters()) {
        const std::string& name = item.key();
        const bool skip = item.value().dim() == 1 || name.find("diffloss") != std::string::npos ||
                          (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0);
        (skip ? no_decay : decay).push_back(item.value());
    }
    auto opts = [&](double wd) {
        return std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(t.lr).betas({0.9, 0.95}).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(no_decay, opts(0.0));
    groups.emplace_back(decay, opts(t.weight_decay));
    return groups;
}

void update_ema(torch::nn::Module& ema, const torch::nn::Module& model, double rate) {
    at::NoGradGuard g;
    auto dst = ema.parameters(), src = model.parameters();
    for (size_t i = 0; i < dst.size(); ++i) dst[i].mul_(rate).add_(src[i].detach(), 1.0 - rate);
}

void copy_weights(torch::nn::Module& dst, const torch::nn::Module& src) {
    at::NoGradGuard g;
    auto d = dst.parameters(), s = src.parameters();
    for (size_t i = 0; i < d.size(); ++i) d[i].copy_(s[i]);
}

// Mean loss over a fixed evaluation: the first `count` images (posterior means), every
// random draw from `seed` (reset here, so two models see the same masks, timesteps and
// noise), all labels kept.
nlohmann::json evaluate(const MarTransformerImpl& mar, const DiffusionTrainingLoss& diffusion,
                        const CachedLatents& lat, const ImageDataset& data, const MarRecipe& r,
                        int64_t count, int64_t batch, uint64_t seed) {
    c10::InferenceMode g;
    torch::manual_seed(seed);
    auto gen = at::detail::createCPUGenerator(seed);
    const at::Device dev = lat.mean.device();
    const int64_t n = std::min(count, data.size()), L = mar.config().seq_len();
    double loss = 0, mse = 0, vb = 0;
    for (int64_t b = 0; b < n; b += batch) {
        auto rows = at::arange(b, std::min(b + batch, n), at::kLong).to(dev);
        auto tokens = batch_tokens(lat, rows, false, mar.config().patch_size);
        auto masking =
            random_masking(rows.size(0), L, sample_mask_ratio(r.mask_ratio_min, gen), dev);
        MarLoss l = mar_training_loss(mar, diffusion, tokens, data.labels.index_select(0, rows),
                                      masking, r.diffusion_batch_mul);
        const double w = static_cast<double>(rows.size(0));
        loss += l.loss.item<double>() * w;
        mse += l.mse.item<double>() * w;
        vb += l.vb.item<double>() * w;
    }
    const double nd = static_cast<double>(n);
    return {{"loss", loss / nd}, {"mse", mse / nd}, {"vb", vb / nd}, {"images", n}};
}

}  // namespace

at::Tensor clip_gradients(torch::nn::Module& m, double max_norm) {
    at::NoGradGuard g;
    std::vector<at::Tensor> grads;
    for (auto& p : m.parameters())
        if (p.grad().defined()) grads.push_back(p.grad());
    if (grads.empty()) return at::zeros({});
    std::vector<at::Tensor> norms;
    for (const auto& gr : grads) norms.push_back(gr.norm());
    const at::Tensor total = at::stack(norms).norm();
    const at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (auto& gr : grads) gr.mul_(coef);
    return total;
}

nlohmann::json MarRecipe::to_json() const {
    return {{"mask_ratio_min", mask_ratio_min},
            {"label_drop_prob", label_drop_prob},
            {"diffusion_batch_mul", diffusion_batch_mul},
            {"grad_clip", grad_clip},
            {"ema_rate", ema_rate},
            {"latent_sample", latent_sample}};
}

MarRecipe MarRecipe::from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw std::invalid_argument("mar recipe: expected a JSON object");
    MarRecipe r;
    auto get = [&](const char* k, auto& v) { read_json_field(j, k, v, "mar recipe: "); };
    get("mask_ratio_min", r.mask_ratio_min);
    get("label_drop_prob", r.label_drop_prob);
    get("diffusion_batch_mul", r.diffusion_batch_mul);
    get("grad_clip", r.grad_clip);
    get("ema_rate", r.ema_rate);
    get("latent_sample", r.latent_sample);
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!r.to_json().contains(it.key()))
            throw std::invalid_argument("mar recipe: unknown key '" + it.key() + "'");
    auto need = [](bool ok, const char* msg) {
        if (!ok) throw std::invalid_argument(std::string("mar recipe: ") + msg);
    };
    need(r.mask_ratio_min > 0 && r.mask_ratio_min <= 1, "'mask_ratio_min' must be in (0, 1]");
    need(r.label_drop_prob >= 0 && r.label_drop_prob < 1, "'label_drop_prob' must be in [0, 1)");
    need(r.diffusion_batch_mul >= 1 && r.diffusion_batch_mul <= 64,
         "'diffusion_batch_mul' must be in [1, 64]");
    need(r.grad_clip >= 0, "'grad_clip' must be >= 0");
    need(r.ema_rate >= 0 && r.ema_rate < 1, "'ema_rate' must be in [0, 1)");
    return r;
}

double sample_mask_ratio(double min_ratio, at::Generator& gen) {
    // Acceptance is Phi(0) - Phi((min - 1) / 0.25): 0.38 for the official 0.7.
    for (;;) {
        const double r = at::empty({1}, at::kDouble).normal_(1.0, 0.25, gen).item<double>();
        if (r >= min_ratio && r <= 1.0) return r;
    }
}

MarMasking random_masking(int64_t batch, int64_t seq_len, double ratio, const at::Device& dev) {
    MarMasking m;
    m.num_masked = std::min<int64_t>(
        seq_len, static_cast<int64_t>(std::ceil(static_cast<double>(seq_len) * ratio)));
    const auto orders =
        at::rand({batch, seq_len}, at::TensorOptions(dev)).argsort(int64_t{1}, false);
    m.mask = at::zeros({batch, seq_len}, at::TensorOptions(dev))
                 .scatter_(1, orders.narrow(1, 0, m.num_masked), 1.0);
    m.known = std::get<0>(orders.narrow(1, m.num_masked, seq_len - m.num_masked).sort(1));
    return m;
}

at::Tensor mar_patchify(const at::Tensor& x, int64_t p) {
    const int64_t B = x.size(0), C = x.size(1), h = x.size(2) / p, w = x.size(3) / p;
    return x.reshape({B, C, h, p, w, p}).permute({0, 2, 4, 1, 3, 5}).reshape({B, h * w, C * p * p});
}

MarLoss mar_training_loss(const MarTransformerImpl& mar, const DiffusionTrainingLoss& diffusion,
                          const at::Tensor& tokens, const at::Tensor& labels,
                          const MarMasking& masking, int64_t mul) {
    auto x = mar.encoder_input(tokens, masking.known, mar.class_embedding(labels));
    for (int64_t i = 0; i < mar.config().encoder_depth; ++i) x = mar.encoder_block(i).forward(x);
    x = apply_layer_norm(mar.encoder_norm, x);
    x = mar.decoder_input(x, masking.known);
    for (int64_t i = 0; i < mar.config().decoder_depth; ++i) x = mar.decoder_block(i).forward(x);
    const at::Tensor z = mar.decoder_output(x);  // (B, L, Cd)

    const int64_t rows = tokens.size(0) * tokens.size(1);
    const auto target = tokens.reshape({rows, -1}).to(z.scalar_type()).repeat({mul, 1});
    const auto cond = z.reshape({rows, -1}).repeat({mul, 1});
    const auto mask = masking.mask.reshape({rows}).repeat({mul});
    const auto t = at::randint(diffusion.num_steps(), {rows * mul},
                               at::TensorOptions(z.device()).dtype(at::kLong));
    const auto noise = at::randn_like(target);
    const DiffusionLossTerms terms = diffusion(*mar.diffloss->net, target, t, cond, noise);
    const auto denom = mask.sum();
    return {(terms.loss * mask).sum() / denom, (terms.mse * mask).sum() / denom,
            (terms.vb * mask).sum() / denom};
}

nlohmann::json train_mar(const MarTrainJob& job, std::ostream& out) {
    const auto t0 = Clock::now();
    const at::Device dev(job.train.device);
    job.model.validate();
    ImageDataset data = prepare_training(job.train, job.data_path);
    if (data.num_classes > job.model.class_num)
        throw std::invalid_argument("train mar: the data has " + std::to_string(data.num_classes) +
                                    " classes but the MAR config only " +
                                    std::to_string(job.model.class_num));
    const CachedLatents lat = encode_dataset(job.vae_path, data, dev);
    const int64_t side = job.model.seq_h() * job.model.patch_size;
    if (lat.mean.size(1) != job.model.vae_embed_dim || lat.mean.size(2) != side ||
        lat.mean.size(3) != side)
        throw std::invalid_argument(
            "train mar: the VAE gives latents of " + std::to_string(lat.mean.size(1)) + "x" +
            std::to_string(lat.mean.size(2)) + "x" + std::to_string(lat.mean.size(3)) +
            " but the MAR config expects " + std::to_string(job.model.vae_embed_dim) + "x" +
            std::to_string(side) + "x" + std::to_string(side) +
            " (vae_embed_dim, img_size / vae_stride)");
    {
        c10::InferenceMode g;
        out << "encoded " << data.size() << " images: latents " << lat.mean.sizes()
            << ", scale factor " << lat.scale_factor << ", scaled mean std "
            << (lat.mean * lat.scale_factor).std().item<double>() << "\n";
    }

    RunDirectory run(job.run_dir);
    torch::manual_seed(job.train.seed);
    MarTransformer mar(job.model), ema(job.model);
    {  // Checkpoints carry no head counts: loaders infer width / 64 (MarConfig::infer_from).
        const MarConfig inferred = MarConfig::infer_from(module_state_dict(*mar));
        if (inferred.encoder_num_heads != job.model.encoder_num_heads ||
            inferred.decoder_num_heads != job.model.decoder_num_heads)
            throw std::invalid_argument(
                "train mar: encoder/decoder_num_heads must be " +
                std::to_string(inferred.encoder_num_heads) + "/" +
                std::to_string(inferred.decoder_num_heads) +
                " (64 channels per head), or the trained weights load back with other heads");
    }
    mar->init_weights(job.train.seed);
    mar->to(dev);
    ema->to(dev);
    mar->train();
    for (auto& p : ema->parameters()) p.set_requires_grad(false);
    torch::optim::AdamW opt(param_groups(*mar, job.train),
                            torch::optim::AdamWOptions(job.train.lr).betas({0.9, 0.95}));
    const nlohmann::json cfg_json = job.model.to_json();
    int64_t step = run.resume(*mar, opt, run.path("last.safetensors"));
    copy_weights(*ema, *mar);
    if (step) {
        out << "resumed at step " << step << "\n";
        if (std::filesystem::exists(run.path("ema.safetensors"))) {
            BindOptions o;
            o.what = run.path("ema.safetensors");
            bind_state_dict(*ema, load_checkpoint(run.path("ema.safetensors")), o);
        }
    } else if (!job.init_path.empty()) {
        std::string source;
        StateDict sd =
            select_mar_weights(load_checkpoint(job.init_path), true, &source, job.init_path);
        mar->load(sd, job.init_path + " (" + source + ")");
        copy_weights(*ema, *mar);
        out << "initialised from " << job.init_path << " (" << source << ")\n";
    }
    auto save = [&](int64_t s) {
        run.save(*mar, opt, s, cfg_json);
        save_safetensors(module_state_dict(*ema), run.path("ema.safetensors"),
                         {{"varscope.config", cfg_json.dump()}});
    };

    DiffusionTrainingLoss diffusion(dev);
    BatchSampler sampler(data.size(), job.train.batch, job.train.seed);
    for (int64_t s = 0; s < step; ++s) sampler.next();  // same batches as an unbroken run
    auto gen = at::detail::createCPUGenerator(job.train.seed + 31);
    const int64_t L = job.model.seq_len();
    const MarRecipe& r = job.recipe;
    TimeBudget budget(job.train.max_seconds);
    for (; step < job.train.steps; ++step) {
        if (step % 10 == 0 && budget.spent(step, out)) break;
        set_learning_rate(opt, job.train.lr_at(step));
        const auto rows = sampler.next().to(dev);
        const auto tokens = batch_tokens(lat, rows, r.latent_sample, job.model.patch_size);
        auto labels = data.labels.index_select(0, rows);
        const auto drop = at::rand({labels.size(0)}, gen).lt(r.label_drop_prob).to(dev);
        labels = at::where(drop, at::full_like(labels, -1), labels);
        const double ratio = sample_mask_ratio(r.mask_ratio_min, gen);
        const MarMasking masking = random_masking(rows.size(0), L, ratio, dev);
        const MarLoss loss =
            mar_training_loss(*mar, diffusion, tokens, labels, masking, r.diffusion_batch_mul);
        opt.zero_grad();
        loss.loss.backward();
        const at::Tensor grad_norm =
            r.grad_clip > 0 ? clip_gradients(*mar, r.grad_clip) : at::Tensor();
        opt.step();
        if (r.ema_rate > 0) update_ema(*ema, *mar, r.ema_rate);
        if (step % job.train.log_every == 0 || step + 1 == job.train.steps) {
            nlohmann::json rec = {
                {"step", step},
                {"loss", loss.loss.item<double>()},
                {"mse", loss.mse.item<double>()},
                {"vb", loss.vb.item<double>()},
                {"mask_ratio", ratio},
                {"lr", job.train.lr_at(step)},
                {"epoch", sampler.epoch()},
                {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()}};
            if (grad_norm.defined()) rec["grad_norm"] = grad_norm.item<double>();
            run.log(rec);
            out << rec.dump() << std::endl;
        }
        if ((step + 1) % job.train.checkpoint_every == 0) save(step + 1);
    }
    save(step);
    if (r.ema_rate == 0) copy_weights(*ema, *mar);

    // An official-style checkpoint (model + model_ema) and the shipped fp16 EMA weights.
    StateDict both;
    for (auto& [name, t] : module_state_dict(*mar)) both["model." + name] = t.detach().cpu();
    for (auto& [name, t] : module_state_dict(*ema)) both["model_ema." + name] = t.detach().cpu();
    save_safetensors(both, run.path("final.safetensors"), {{"varscope.config", cfg_json.dump()}});
    std::map<std::string, std::string> extra;
    if (!job.recommended_sampling.is_null())
        extra["varscope.mar_sampling"] = job.recommended_sampling.dump();
    export_half(*ema, run.path("export-fp16.safetensors"), cfg_json, {}, extra);

    mar->eval();
    const int64_t eval_images = 1024, eval_batch = 128;
    const uint64_t eval_seed = job.train.seed + 1000;
    nlohmann::json report = {
        {"eval_ema", evaluate(*ema, diffusion, lat, data, r, eval_images, eval_batch, eval_seed)},
        {"eval_model", evaluate(*mar, diffusion, lat, data, r, eval_images, eval_batch, eval_seed)},
        {"steps", step},
        {"parameters", count_parameters(*mar)},
        {"scale_factor", lat.scale_factor},
        {"export_bytes", std::filesystem::file_size(run.path("export-fp16.safetensors"))},
        {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
        {"train", job.train.to_json()},
        {"recipe", r.to_json()},
        {"model", cfg_json}};
    run.log({{"final", report}});
    return report;
}

}  // namespace varscope
