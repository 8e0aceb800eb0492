// MAR training (train mar): the diffusion training loss against a direct double-precision
// computation of the IDDPM formulas, the masking statistics, the loss going down, and a trained
// export loading back through MarPipeline::load.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/mar_pipeline.h"
#include "core/models/kl_vae.h"
#include "core/sampling/diffusion_losses.h"
#include "core/training/mar_trainer.h"
#include "tests/cli_run.h"
#include "tests/error_of.h"
#include "tests/smooth_pack.h"
#include "tests/test_util.h"

using namespace varscope;

namespace {

using varscope::testing::error_of;
using varscope::testing::run_cli;
using varscope::testing::smooth_pack;

// 4x4 tokens of 4 channels; width 64 = one head (what loaders infer), tiny everything else.
MarConfig tiny_config() {
    MarConfig c;
    c.img_size = 16;
    c.vae_stride = 4;
    c.encoder_embed_dim = c.decoder_embed_dim = 64;
    c.encoder_depth = c.decoder_depth = 1;
    c.encoder_num_heads = c.decoder_num_heads = 1;
    c.mlp_ratio = 2.0;
    c.vae_embed_dim = 4;
    c.class_num = 4;
    c.buffer_size = 4;
    c.diffloss_d = 1;
    c.diffloss_w = 32;
    c.num_sampling_steps = "10";
    return c;
}

// A random-weight KL VAE with stride 4 (16x16 images -> 4x4x4 latents), saved with its config.
std::string tiny_vae(const varscope::testing::TempDir& dir) {
    KlVaeConfig c;
    c.ch = 32;
    c.ch_mult = {1, 1, 1};
    c.num_res_blocks = 1;
    c.embed_dim = c.z_channels = 4;
    c.resolution = 16;
    c.attn_resolutions = {};
    c.scale_factor = 0.7;
    KlVae vae(c);
    save_safetensors(module_state_dict(*vae), dir.file("vae.safetensors"),
                     {{"varscope.config", c.to_json().dump()}});
    return dir.file("vae.safetensors");
}

// --- the IDDPM formulas in double precision, written out per element -----------------------

struct Process {  // the 1000-step cosine process
    std::vector<double> beta, abar, abar_prev;
};

Process cosine_process() {
    Process p;
    auto f = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * M_PI / 2), 2); };
    double prod = 1;
    for (int i = 0; i < 1000; ++i) {
        const double b = std::min(1 - f((i + 1) / 1000.0) / f(i / 1000.0), 0.999);
        p.beta.push_back(b);
        p.abar_prev.push_back(prod);
        prod *= 1 - b;
        p.abar.push_back(prod);
    }
    return p;
}

double cdf(double x) {
    return 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// vb of one row: x0, x_t, eps prediction, v (C each), timestep.
double direct_vb(const Process& p, const std::vector<double>& x0, const std::vector<double>& xt,
                 const std::vector<double>& eps, const std::vector<double>& v, int t) {
    const double b = p.beta[t], ab = p.abar[t], abp = p.abar_prev[t];
    const double post_var = b * (1 - abp) / (1 - ab);
    // Clipped: the posterior variance at t = 0 is 0, so log uses the one at t = 1.
    const double post_log =
        std::log(t == 0 ? p.beta[1] * (1 - p.abar[0]) / (1 - p.abar[1]) : post_var);
    const double c1 = b * std::sqrt(abp) / (1 - ab), c2 = (1 - abp) * std::sqrt(1 - b) / (1 - ab);
    double sum = 0;
    for (size_t i = 0; i < x0.size(); ++i) {
        const double frac = (v[i] + 1) / 2;
        const double logvar = frac * std::log(b) + (1 - frac) * post_log;
        const double px0 = std::sqrt(1 / ab) * xt[i] - std::sqrt(1 / ab - 1) * eps[i];
        const double mean = c1 * px0 + c2 * xt[i], true_mean = c1 * x0[i] + c2 * xt[i];
        if (t > 0) {
            sum += 0.5 * (-1 + logvar - post_log + std::exp(post_log - logvar) +
                          std::pow(true_mean - mean, 2) * std::exp(-logvar));
        } else {
            const double inv = std::exp(-0.5 * logvar), c = x0[i] - mean;
            const double plus = cdf(inv * (c + 1 / 255.0)), minus = cdf(inv * (c - 1 / 255.0));
            double lp = std::log(std::max(plus - minus, 1e-12));
            if (x0[i] < -0.999) lp = std::log(std::max(plus, 1e-12));
            if (x0[i] > 0.999) lp = std::log(std::max(1 - minus, 1e-12));
            sum -= lp;
        }
    }
    return sum / static_cast<double>(x0.size()) / std::log(2.0);
}

std::vector<double> row(const at::Tensor& t, int64_t i) {
    const at::Tensor r = t[i].to(at::kDouble).contiguous();
    return std::vector<double>(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
}

std::vector<double> losses_in(const std::string& log_path) {
    std::ifstream log(log_path);
    std::vector<double> losses;
    for (std::string line; std::getline(log, line);) {
        auto j = nlohmann::json::parse(line);
        if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    }
    return losses;
}

}  // namespace

TEST(MarTraining, NormalKlAndDiscretisedLikelihoodKnownValues) {
    const auto z = at::zeros({1}, at::kDouble), one = at::ones({1}, at::kDouble);
    EXPECT_NEAR(normal_kl(z, z, z, z).item<double>(), 0.0, 1e-12);
    EXPECT_NEAR(normal_kl(one, z, z, z).item<double>(), 0.5, 1e-12);  // (1 - 0)^2 / 2
    // KL(N(0, e) || N(0, 1)) = (-1 - 1 + e) / 2.
    EXPECT_NEAR(normal_kl(z, one, z, z).item<double>(), 0.5 * (M_E - 2), 1e-12);
    // A narrow Gaussian on a bin centre holds (almost) all of it; the edge bins are open.
    const auto narrow = at::full({1}, std::log(1e-4), at::kDouble);
    EXPECT_NEAR(discretized_gaussian_log_likelihood(z, z, narrow).item<double>(), 0.0, 1e-6);
    EXPECT_NEAR(discretized_gaussian_log_likelihood(one, one * 0.5, z).item<double>(),
                std::log(1 - cdf(0.5 - 1 / 255.0)), 1e-9);
}

TEST(MarTraining, DiffusionLossMatchesTheDirectComputation) {
    const DiffusionTrainingLoss loss(at::Device(at::kCPU));
    ASSERT_EQ(loss.num_steps(), 1000);
    const Process p = cosine_process();
    auto gen = at::detail::createCPUGenerator(3);
    const int64_t N = 8, C = 5;
    const at::Tensor x0 = at::rand({N, C}, gen) * 2.4 - 1.2;  // some beyond the edge bins
    const at::Tensor noise = at::randn({N, C}, gen);
    const at::Tensor t = at::tensor(std::vector<int64_t>{0, 0, 1, 2, 17, 500, 998, 999});
    const at::Tensor out = at::randn({N, 2 * C}, gen).mul(0.5);
    const at::Tensor xt = loss.q_sample(x0, t, noise);
    const DiffusionLossTerms terms = loss.terms(x0, xt, t, noise, out);
    for (int64_t i = 0; i < N; ++i) {
        const int ti = static_cast<int>(t[i].item<int64_t>());
        const auto x0r = row(x0, i), nr = row(noise, i), xtr = row(xt, i), o = row(out, i);
        for (int64_t c = 0; c < C; ++c)
            EXPECT_NEAR(xtr[c], std::sqrt(p.abar[ti]) * x0r[c] + std::sqrt(1 - p.abar[ti]) * nr[c],
                        1e-5);
        const std::vector<double> eps(o.begin(), o.begin() + C), v(o.begin() + C, o.end());
        double mse = 0;
        for (int64_t c = 0; c < C; ++c) mse += std::pow(nr[c] - eps[c], 2) / C;
        const double vb = direct_vb(p, x0r, xtr, eps, v, ti);
        EXPECT_NEAR(terms.mse[i].item<double>(), mse, 1e-5 * (1 + mse)) << "t " << ti;
        EXPECT_NEAR(terms.vb[i].item<double>(), vb, 2e-3 * (1 + std::abs(vb))) << "t " << ti;
        EXPECT_NEAR(terms.loss[i].item<double>(), mse + vb, 2e-3 * (1 + std::abs(mse + vb)));
    }
    // The variance term trains only the variance half: its gradient misses eps.
    const at::Tensor leaf = out.clone().requires_grad_(true);
    loss.terms(x0, xt, t, noise, leaf).vb.sum().backward();
    EXPECT_EQ(leaf.grad().narrow(1, 0, C).abs().max().item<double>(), 0.0);
    EXPECT_GT(leaf.grad().narrow(1, C, C).abs().max().item<double>(), 0.0);
}

TEST(MarTraining, MaskRatioFollowsTheTruncatedNormal) {
    auto gen = at::detail::createCPUGenerator(11);
    const int n = 20000;
    double sum = 0, lo = 2, hi = -1;
    for (int i = 0; i < n; ++i) {
        const double r = sample_mask_ratio(0.7, gen);
        sum += r;
        lo = std::min(lo, r);
        hi = std::max(hi, r);
    }
    // Mean of N(1, 0.25) truncated to [0.7, 1]: 1 + 0.25 (phi(a) - phi(0)) / (Phi(0) - Phi(a)).
    const double a = -1.2;
    auto phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
    auto Phi = [](double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))); };
    const double expected = 1 + 0.25 * (phi(a) - phi(0)) / (Phi(0) - Phi(a));  // 0.867
    EXPECT_NEAR(sum / n, expected, 0.003);
    EXPECT_GE(lo, 0.7);
    EXPECT_LT(lo, 0.71);
    EXPECT_LE(hi, 1.0);
    EXPECT_GT(hi, 0.99);

    torch::manual_seed(5);
    const MarMasking m = random_masking(6, 16, 0.8, at::Device(at::kCPU));
    EXPECT_EQ(m.num_masked, 13);  // ceil(16 * 0.8)
    EXPECT_TRUE(m.mask.sum(1).eq(13).all().item<bool>());
    ASSERT_EQ(m.known.sizes(), (at::IntArrayRef{6, 3}));
    for (int64_t r = 0; r < 6; ++r) {
        const auto k = m.known[r];
        EXPECT_TRUE(k.slice(0, 1).gt(k.slice(0, 0, -1)).all().item<bool>());  // ascending
        EXPECT_TRUE(m.mask[r].index_select(0, k).eq(0).all().item<bool>());   // known = unmasked
    }
    EXPECT_FALSE(m.mask[0].equal(m.mask[1]));  // own order per row
    EXPECT_EQ(random_masking(2, 16, 1.0, at::Device(at::kCPU)).known.size(1), 0);
}

TEST(MarTraining, PatchifyInvertsUnpatchify) {
    MarConfig c = tiny_config();
    const at::Tensor lat = at::randn({2, 4, 4, 4});
    EXPECT_TRUE(mar_unpatchify(mar_patchify(lat, 1), c).equal(lat));
    c.patch_size = 2;  // 16 / 4 / 2 = 2x2 tokens of 4 * 2 * 2 channels
    const at::Tensor lat2 = at::randn({2, 4, 4, 4});
    const at::Tensor tok = mar_patchify(lat2, 2);
    EXPECT_EQ(tok.sizes(), (at::IntArrayRef{2, 4, 16}));
    EXPECT_TRUE(mar_unpatchify(tok, c).equal(lat2));
}

TEST(MarTraining, GradientClippingMatchesTorch) {
    auto make = [] {
        torch::manual_seed(4);
        MarTransformer m(tiny_config());
        m->init_weights(0, /*nonzero_head=*/true);
        for (auto& p : m->parameters()) p.mutable_grad() = at::randn_like(p);
        return m;
    };
    MarTransformer a = make(), b = make();
    const double ref = torch::nn::utils::clip_grad_norm_(a->parameters(), 3.0);
    const at::Tensor norm = clip_gradients(*b, 3.0);
    EXPECT_NEAR(norm.item<double>(), ref, 1e-4 * ref);
    ASSERT_GT(ref, 3.0);  // so that clipping happened
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i)
        EXPECT_TRUE(at::allclose(pa[i].grad(), pb[i].grad(), 1e-5, 1e-7)) << i;
}

TEST(MarTraining, LossDecreasesOnTinyData) {
    torch::manual_seed(0);
    MarTransformer mar(tiny_config());
    mar->init_weights(0);
    const DiffusionTrainingLoss diffusion(at::Device(at::kCPU));
    auto gen = at::detail::createCPUGenerator(1);
    const at::Tensor tokens = at::randn({8, 16, 4}, gen).mul(0.3) + at::randn({1, 16, 4}, gen);
    const at::Tensor labels = at::arange(8, at::kLong).remainder(4);
    auto fixed_loss = [&] {  // same masks, timesteps and noise every time
        at::NoGradGuard g;
        torch::manual_seed(99);
        double sum = 0;
        for (int i = 0; i < 4; ++i)
            sum += mar_training_loss(*mar, diffusion, tokens, labels,
                                     random_masking(8, 16, 0.85, at::Device(at::kCPU)), 4)
                       .loss.item<double>();
        return sum / 4;
    };
    const double before = fixed_loss();
    torch::optim::Adam opt(mar->parameters(), torch::optim::AdamOptions(2e-3));
    torch::manual_seed(1);
    for (int step = 0; step < 60; ++step) {
        const MarMasking m =
            random_masking(8, 16, sample_mask_ratio(0.7, gen), at::Device(at::kCPU));
        const MarLoss l = mar_training_loss(*mar, diffusion, tokens, labels, m, 4);
        ASSERT_TRUE(std::isfinite(l.loss.item<double>()));
        opt.zero_grad();
        l.loss.backward();
        opt.step();
    }
    const double after = fixed_loss();
    EXPECT_LT(after, 0.8 * before) << before << " -> " << after;
}

TEST(MarTraining, TrainsResumesAndTheExportLoadsBack) {
    varscope::testing::TempDir dir;
    MarTrainJob job;
    job.model = tiny_config();
    job.train.steps = 6;
    job.train.batch = 8;
    job.train.lr = 1e-3;
    job.train.warmup = 1;
    job.train.log_every = 1;
    job.train.checkpoint_every = 1000;
    job.train.device = "cpu";
    job.recipe.ema_rate = 0.5;
    job.data_path = smooth_pack(dir);
    job.vae_path = tiny_vae(dir);
    job.run_dir = dir.file("run");
    job.recommended_sampling = {{"num_iter", 4}};
    std::ostringstream out;
    const nlohmann::json report = train_mar(job, out);
    EXPECT_EQ(report["steps"], 6);
    EXPECT_TRUE(std::isfinite(report["eval_ema"]["loss"].get<double>())) << report.dump();
    EXPECT_EQ(losses_in(dir.file("run/log.jsonl")).size(), 6u);
    {
        std::ifstream log(dir.file("run/log.jsonl"));
        std::string first;
        std::getline(log, first);
        EXPECT_GT(nlohmann::json::parse(first)["grad_norm"].get<double>(), 0.0) << first;
    }
    EXPECT_NE(out.str().find("scale factor 0.7"), std::string::npos) << out.str();

    // The fp16 export is the EMA weights and loads as a MAR of the same architecture.
    const StateDict final_sd = load_checkpoint(dir.file("run/final.safetensors"));
    MarModelFiles files;
    files.mar_path = dir.file("run/export-fp16.safetensors");
    files.num_sampling_steps = "10";
    MarPipeline pipe = MarPipeline::load(files, {});
    const MarConfig& c = pipe.config();
    EXPECT_EQ(c.encoder_embed_dim, 64);
    EXPECT_EQ(c.encoder_num_heads, 1);
    EXPECT_EQ(c.encoder_depth, 1);
    EXPECT_EQ(c.buffer_size, 4);
    EXPECT_EQ(c.seq_len(), 16);
    EXPECT_EQ(c.class_num, 4);
    EXPECT_EQ(c.diffloss_w, 32);
    const StateDict exported = module_state_dict(*pipe.sampler().transformer());
    for (const auto& [name, t] : exported) {
        const at::Tensor ema = final_sd.at("model_ema." + name);
        EXPECT_TRUE(at::allclose(t, ema.to(at::kHalf).to(at::kFloat))) << name;
    }
    EXPECT_FALSE(final_sd.at("model.mask_token").equal(final_sd.at("model_ema.mask_token")));
    MarSampleOptions o;
    o.class_ids = {1, 2};
    o.num_iter = 4;
    o.time_steps = false;
    const MarSampleResult r = pipe.generate(o);
    EXPECT_EQ(r.tokens.sizes(), (at::IntArrayRef{2, 16, 4}));
    EXPECT_TRUE(at::isfinite(r.tokens).all().item<bool>());
    // The official-style checkpoint loads too (EMA preferred).
    files.mar_path = dir.file("run/final.safetensors");
    EXPECT_EQ(MarPipeline::load(files, {}).weights_source(), "model_ema");

    job.train.steps = 8;
    std::ostringstream out2;
    EXPECT_EQ(train_mar(job, out2)["steps"], 8);
    EXPECT_NE(out2.str().find("resumed at step 6"), std::string::npos) << out2.str();

    MarTrainJob bad = job;
    bad.run_dir = dir.file("bad");
    bad.model.encoder_num_heads = 2;
    EXPECT_NE(error_of([&] { train_mar(bad, out); }).find("num_heads must be 1/1"),
              std::string::npos);
    bad.model = tiny_config();
    bad.model.vae_embed_dim = 8;
    EXPECT_NE(error_of([&] { train_mar(bad, out); }).find("latents of 4x4x4"), std::string::npos);
}

TEST(MarTraining, RecipeErrorsNameTheKey) {
    EXPECT_EQ(MarRecipe::from_json({{"ema_rate", 0.99}}).ema_rate, 0.99);
    EXPECT_NE(error_of([] {
                  MarRecipe::from_json({{"ema", 0.99}});
              }).find("unknown key 'ema'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  MarRecipe::from_json({{"mask_ratio_min", 1.5}});
              }).find("'mask_ratio_min'"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  MarRecipe::from_json({{"diffusion_batch_mul", "4"}});
              }).find("wrong type"),
              std::string::npos);
}

TEST(MarTraining, CliTrainsFromAConfigFile) {
    varscope::testing::TempDir dir;
    nlohmann::json cfg = {{"model", tiny_config().to_json()},
                          {"recipe", {{"diffusion_batch_mul", 2}}},
                          {"sampling", {{"num_iter", 4}}},
                          {"train", {{"steps", 2}, {"batch", 4}, {"log_every", 1}}}};
    std::ofstream(dir.file("good.json")) << cfg.dump();
    const std::string common =
        " --data " + smooth_pack(dir) + " --vae " + tiny_vae(dir) + " --device cpu --out ";
    auto run = run_cli("train mar --config " + dir.file("good.json") + common + dir.file("a"));
    ASSERT_EQ(run.code, 0) << run.out;
    std::ifstream report_file(dir.file("a/report.json"));
    const nlohmann::json report = nlohmann::json::parse(report_file);
    EXPECT_EQ(report["steps"], 2);
    EXPECT_EQ(report["recipe"]["diffusion_batch_mul"], 2);
    const auto meta = read_safetensors_metadata(dir.file("a/export-fp16.safetensors"));
    EXPECT_EQ(nlohmann::json::parse(meta.at("varscope.mar_sampling"))["num_iter"], 4);

    cfg["recipe"] = {{"drop", 0.1}};
    std::ofstream(dir.file("bad.json")) << cfg.dump();
    run = run_cli("train mar --config " + dir.file("bad.json") + common + dir.file("b"));
    EXPECT_NE(run.code, 0);
    EXPECT_NE(run.out.find("unknown key 'drop'"), std::string::npos) << run.out;
}
