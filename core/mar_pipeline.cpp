#include "core/mar_pipeline.h"

#include <ATen/ATen.h>

#include <set>
#include <sstream>

#include "core/io/checkpoint.h"
#include "core/models/detect.h"
#include "core/models/kl_vae.h"
#include "core/sampling/chunked_decode.h"

namespace varscope {
namespace {

at::ScalarType to_scalar(Precision p) {
    switch (p) {
        case Precision::Fp16:
            return at::kHalf;
        case Precision::Bf16:
            return at::kBFloat16;
        case Precision::Fp32:
            break;
    }
    return at::kFloat;
}

bool is_mar(const StateDict& d) {
    return detect_family(d) == ModelFamily::MarTransformer;
}

// The distinct first name components, for error messages ("model_ema, optimizer, ...").
std::string top_level_names(const StateDict& all) {
    std::set<std::string> heads;
    for (const auto& [name, _] : all) heads.insert(name.substr(0, name.find('.')));
    std::ostringstream os;
    size_t i = 0;
    for (const auto& h : heads) {
        if (i == 8) {
            os << ", ...";
            break;
        }
        os << (i++ ? ", " : "") << h;
    }
    return os.str();
}

}  // namespace

StateDict select_mar_weights(const StateDict& all, bool prefer_ema, std::string* source,
                             const std::string& what) {
    std::vector<std::string> order = prefer_ema ? std::vector<std::string>{"model_ema", "model"}
                                                : std::vector<std::string>{"model", "model_ema"};
    for (const auto& prefix : order) {
        StateDict sub = select_prefix(all, prefix);
        if (!sub.empty() && is_mar(sub)) {
            if (source) *source = prefix;
            return sub;
        }
    }
    if (is_mar(all)) {
        if (source) *source = "state dict";
        return all;
    }
    throw CheckpointError(what +
                          ": no MAR weights found (looked for 'model_ema.*', 'model.*' and "
                          "a raw MAR state dict with z_proj / encoder_pos_embed_learned); "
                          "the file holds: " +
                          (all.empty() ? std::string("no tensors") : top_level_names(all)));
}

MarPipeline MarPipeline::load(const MarModelFiles& f, const LoadOptions& o) {
    if (f.mar_path.empty()) throw CheckpointError("no MAR checkpoint given");
    return from_checkpoint(load_checkpoint(f.mar_path), f, o);
}

MarPipeline MarPipeline::from_checkpoint(const StateDict& all, const MarModelFiles& f,
                                         const LoadOptions& o) {
    std::string source;
    StateDict sd = select_mar_weights(all, f.prefer_ema, &source, f.mar_path);
    MarConfig cfg = MarConfig::infer_from(sd);
    cfg.num_sampling_steps = f.num_sampling_steps;
    space_timesteps(1000, cfg.num_sampling_steps);  // a bad spec fails before the weights bind
    KlVae vae{nullptr};
    if (!f.vae_path.empty()) {
        // The VAE's stride fixes the image size (checkpoints only know the token grid).
        vae = load_kl_vae(f.vae_path);
        const auto& vc = vae->config();
        if (vc.embed_dim != cfg.vae_embed_dim)
            throw CheckpointError(f.vae_path + ": the KL VAE has " + std::to_string(vc.embed_dim) +
                                  " latent channels, the MAR model " + f.mar_path + " expects " +
                                  std::to_string(cfg.vae_embed_dim));
        const int64_t side = cfg.seq_h();
        cfg.vae_stride = vc.downsample();
        cfg.img_size = side * cfg.patch_size * cfg.vae_stride;
        cfg.validate();
    }
    MarTransformer mar(cfg);
    mar->load(sd, f.mar_path + " (" + source + ")");
    const at::Device device = parse_device(o.device);
    mar->to(device, to_scalar(o.precision));
    mar->eval();
    auto sampler = std::make_shared<MarSampler>(mar);
    sampler->set_exec_policy(o.exec);
    if (!vae) return MarPipeline(sampler, source);
    vae->to(device);  // fp32, like the official evaluation
    vae->eval();
    // The sampler divides by the scale factor before decoding (official: tokens / 0.2325).
    // In chunks of images (chunked_decode.h): the decoder's full-size maps would scale with B.
    LatentDecoder decode = [vae](const at::Tensor& latents) mutable {
        const int64_t side = latents.size(-1) * (int64_t(1) << (vae->config().ch_mult.size() - 1));
        return decode_in_chunks(latents.to(at::kFloat), decode_chunk_images(side),
                                [&](const at::Tensor& part) { return vae->decode(part); });
    };
    const double scale = vae->config().scale_factor;
    sampler = std::make_shared<MarSampler>(mar, decode, scale);
    sampler->set_exec_policy(o.exec);
    return MarPipeline(sampler, source, decode, scale);
}

MarPipeline MarPipeline::random(const MarConfig& cfg, uint64_t seed, const LoadOptions& o,
                                bool nonzero_head) {
    MarTransformer mar(cfg);
    mar->init_weights(seed, nonzero_head);
    mar->to(parse_device(o.device), to_scalar(o.precision));
    mar->eval();
    auto sampler = std::make_shared<MarSampler>(mar);
    sampler->set_exec_policy(o.exec);
    return MarPipeline(sampler, "random");
}

MarSampleResult MarPipeline::generate(const MarSampleOptions& opt, MarSamplingHooks* hooks,
                                      ProbeSink* probe) {
    return sampler_->sample(opt, hooks, probe);
}

at::Tensor MarPipeline::decode_latents(const at::Tensor& latents) const {
    if (!decoder_) throw std::logic_error("this MAR pipeline has no VAE to decode latents with");
    return decoder_(latents / latent_scale_).add(1).mul(0.5);
}

at::Device MarPipeline::device() const {
    return sampler_->transformer()->mask_token.device();
}

std::string MarPipeline::describe() const {
    const auto& c = config();
    std::ostringstream os;
    os << "MAR: encoder " << c.encoder_depth << "x" << c.encoder_embed_dim << " ("
       << c.encoder_num_heads << " heads), decoder " << c.decoder_depth << "x"
       << c.decoder_embed_dim << ", buffer " << c.buffer_size << ", " << c.seq_h() << "x"
       << c.seq_h() << " tokens of " << c.token_embed_dim() << " channels, " << c.class_num
       << " classes, DiffLoss d" << c.diffloss_d << " w" << c.diffloss_w << ", "
       << c.num_sampling_steps << " diffusion steps, "
       << count_parameters(*sampler_->transformer()) / 1e6 << "M params (weights: " << source_
       << ")";
    return os.str();
}

}  // namespace varscope
