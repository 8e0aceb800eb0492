#include "core/models/bsq_vae.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/module_binding.h"
#include "core/sampling/chunked_decode.h"

namespace varscope {

namespace {

bool starts_with(const std::string& s, const char* prefix) {
    return s.rfind(prefix, 0) == 0;
}

bool looks_like_bsq_vae(const StateDict& d) {
    return bsq_find(d, "encoder.conv_in.conv.weight") &&
           bsq_find(d, "decoder.conv_out.conv.weight");
}

}  // namespace

BsqVaeImpl::BsqVaeImpl(BsqVaeConfig cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    encoder_ = register_module("encoder", bsq_vae::Encoder(cfg_));
    decoder_ = register_module("decoder", bsq_vae::Decoder(cfg_));
}

std::shared_ptr<BsqVaeImpl> BsqVaeImpl::random(const BsqVaeConfig& cfg, uint64_t seed) {
    auto m = std::make_shared<BsqVaeImpl>(cfg);
    at::NoGradGuard no_grad;
    auto gen = at::detail::createCPUGenerator(seed);
    for (auto& p : m->named_parameters()) {
        at::Tensor t = p.value();
        // Unit-variance activations through the stack, norms near identity.
        const bool matrix = t.dim() >= 2;
        const double stddev = matrix ? 1.0 / std::sqrt(double(t[0].numel())) : 0.05;
        at::Tensor r = at::empty(t.sizes(), at::kFloat).normal_(0.0, stddev, gen);
        if (!matrix && p.key().find("norm") != std::string::npos && p.key().size() > 7 &&
            p.key().compare(p.key().size() - 7, 7, ".weight") == 0)
            r.add_(1.0);
        t.copy_(r);
    }
    return m;
}

void BsqVaeImpl::load(const StateDict& dict, const std::string& what) {
    const StateDict targets = module_state_dict(*this);
    StateDict renamed;
    std::set<std::string> used;
    for (const auto& kv : targets) {
        const std::string& name = kv.first;
        auto it = dict.find(name);
        if (it == dict.end()) it = dict.find(bsq_flux_name(name));
        if (it == dict.end()) continue;  // reported as missing by bind_state_dict
        renamed[name] = it->second;
        used.insert(it->first);
    }
    for (const auto& kv : dict) {
        const std::string& name = kv.first;
        if (used.count(name)) continue;
        const bool ours = starts_with(name, "encoder.") || starts_with(name, "decoder.");
        // The official inference model is built without the mid attention (cnn_attention
        // 'no'), so load_cnn skips such tensors; so do we.
        const bool unused_attn = name.find(".mid.attn_1.") != std::string::npos;
        if (ours && !unused_attn) renamed[name] = kv.second;  // -> "unexpected tensor"
    }
    BindOptions options;
    options.what = what;
    bind_state_dict(*this, renamed, options);
}

BsqEncodeOutput BsqVaeImpl::encode(const at::Tensor& img, const std::vector<bsq::Size3>& schedule) {
    BsqEncodeOutput out;
    out.h = encoder_(img).to(at::kFloat);
    out.codes = bsq::quantize_multiscale(out.h, schedule, quant_config());
    return out;
}

at::Tensor BsqVaeImpl::decode_chunked(const at::Tensor& f_hat, bool clamp) {
    at::Tensor z = f_hat;
    if (z.dim() == 5) {
        if (z.size(2) != 1)
            throw std::invalid_argument("BsqVae::decode: expects one frame, got T=" +
                                        std::to_string(z.size(2)));
        z = z.squeeze(2);
    }
    if (z.dim() != 4 || z.size(1) != cfg_.codebook_dim)
        throw std::invalid_argument("BsqVae::decode: expects [B," +
                                    std::to_string(cfg_.codebook_dim) + ",h,w]");
    // The sampler's summed codes are float32 whatever the decoder's dtype (a bf16 decoder is
    // what the official autocast inference amounts to for the convolutions).
    const at::Tensor w = parameters().front();
    z = z.to(w.device(), w.scalar_type());
    return decode_in_chunks(z, decode_chunk_images(z.size(-1) * cfg_.patch_size),
                            [&](const at::Tensor& part) {
                                at::Tensor x = decoder_(part);
                                return clamp ? x.clamp_(-1, 1) : x;
                            });
}

at::Tensor BsqVaeImpl::decode(const at::Tensor& f_hat) {
    return decode_chunked(f_hat, true);
}

at::Tensor BsqVaeImpl::decode_unclamped(const at::Tensor& f_hat) {
    return decode_chunked(f_hat, false);
}

at::Tensor BsqVaeImpl::summed_codes(const std::vector<at::Tensor>& bits,
                                    const std::vector<bsq::Size3>& schedule) const {
    if (bits.empty() || bits.size() > schedule.size())
        throw std::invalid_argument("BsqVae::summed_codes: need 1.." +
                                    std::to_string(schedule.size()) + " scales of bits, got " +
                                    std::to_string(bits.size()));
    const bsq::BsqQuantConfig q = quant_config();
    at::Tensor summed;
    for (const at::Tensor& b : bits) {
        at::Tensor codes = bsq::bits_to_codes(b, q);
        const bsq::Size3 size{codes.size(2), codes.size(3), codes.size(4)};
        // Official decode_from_indices interpolates every scale (a no-op size for the last);
        // the sampler adds the last as is. Both give the same values at equal size.
        if (size != schedule.back()) codes = bsq::interpolate_up(codes, schedule.back(), q);
        summed = summed.defined() ? summed + codes : codes;
    }
    return summed;
}

at::Tensor BsqVaeImpl::decode_bits(const std::vector<at::Tensor>& bits,
                                   const std::vector<bsq::Size3>& schedule) {
    return decode(summed_codes(bits, schedule));
}

StateDict bsq_vae_state_dict(const StateDict& contents, const std::string& what) {
    if (looks_like_bsq_vae(contents)) return contents;
    for (const char* prefix : {"vae", "ema"}) {
        StateDict inner = select_prefix(contents, prefix);
        if (!inner.empty() && looks_like_bsq_vae(inner)) return inner;
    }
    const std::string found =
        contents.empty() ? "no tensors" : "e.g. '" + contents.begin()->first + "'";
    throw CheckpointError(what +
                          ": not a BSQ VAE checkpoint: expected 'encoder.conv_in.conv.weight' "
                          "(or 'encoder.conv_in.weight') and 'decoder.conv_out.conv.weight' at "
                          "the top level or under 'vae.' / 'ema.'; found " +
                          found);
}

BsqVae load_bsq_vae(const std::string& path) {
    const StateDict dict = bsq_vae_state_dict(load_checkpoint(path), path);
    BsqVae vae(BsqVaeConfig::infer_from(dict, path));
    vae->load(dict, path);
    return vae;
}

}  // namespace varscope
