#include "core/models/detect.h"

#include "core/io/checkpoint.h"
#include "core/models/bsq_vae_config.h"
#include "core/models/infinity.h"
#include "core/models/kl_vae.h"
#include "core/models/mar.h"
#include "core/models/var.h"
#include "core/models/vqvae.h"

namespace varscope {

namespace {

ModelFamily detect_flat(const StateDict& d) {
    auto has = [&](const char* n) { return d.count(n) > 0; };
    if (has("class_emb.weight") && has("pos_1LC") && has("blocks.0.attn.mat_qkv.weight"))
        return ModelFamily::VarTransformer;
    if (has("quantize.embedding.weight") && has("encoder.conv_in.weight"))
        return ModelFamily::MultiScaleVqvae;
    if (has("z_proj.weight") &&
        (has("diffloss.net.input_proj.weight") || has("encoder_pos_embed_learned")))
        return ModelFamily::MarTransformer;
    if (has("encoder.conv_in.weight") && has("quant_conv.weight") && has("decoder.conv_out.weight"))
        return ModelFamily::KlVae;
    // Either block layout ("blocks.<i>." or the released "block_chunks.<c>.module.<j>.").
    if (has("cfg_uncond") && has("text_proj_for_sos.ca.mat_q") && has("word_embed.weight"))
        return ModelFamily::InfinityTransformer;
    // After the KL VAE: the flux-style names share "encoder.conv_in.weight" with it.
    if (bsq_find(d, "encoder.conv_in.conv.weight") && bsq_find(d, "decoder.conv_out.conv.weight"))
        return ModelFamily::BsqVae;
    return ModelFamily::Unknown;
}

}  // namespace

DetectedFamily detect_family_nested(const StateDict& d) {
    const ModelFamily f = detect_flat(d);
    if (f != ModelFamily::Unknown) return {f, ""};
    // Training checkpoints nest the weights: {"model_ema": ...} (MAR), {"model": ...} (LDM's
    // kl16.ckpt), {"state_dict": ...} (Lightning), {"vae": ...} (Infinity's BSQ VAE files);
    // flattened as "<wrapper>.<name>".
    for (const char* wrapper : {"model_ema", "model", "state_dict", "vae"}) {
        const StateDict inner = select_prefix(d, wrapper);
        if (inner.empty()) continue;
        const ModelFamily g = detect_flat(inner);
        if (g != ModelFamily::Unknown) return {g, wrapper};
    }
    return {ModelFamily::Unknown, ""};
}

ModelFamily detect_family(const StateDict& d) {
    return detect_flat(d);
}

std::string family_name(ModelFamily f) {
    switch (f) {
        case ModelFamily::VarTransformer:
            return "VAR transformer";
        case ModelFamily::MultiScaleVqvae:
            return "VAR multi-scale VQVAE";
        case ModelFamily::MarTransformer:
            return "MAR transformer";
        case ModelFamily::KlVae:
            return "KL VAE";
        case ModelFamily::InfinityTransformer:
            return "Infinity transformer";
        case ModelFamily::BsqVae:
            return "Infinity BSQ VAE";
        case ModelFamily::Unknown:
            break;
    }
    return "unknown";
}

nlohmann::json inferred_config(ModelFamily f, const StateDict& dict) {
    switch (f) {
        case ModelFamily::VarTransformer:
            return VarConfig::infer_from(dict).to_json();
        case ModelFamily::MarTransformer:
            return MarConfig::infer_from(dict).to_json();
        case ModelFamily::MultiScaleVqvae:
            return VqvaeConfig::infer_from(dict, patch_nums_256()).to_json();
        case ModelFamily::KlVae:
            return KlVaeConfig::infer_from(dict).to_json();
        case ModelFamily::InfinityTransformer:
            return InfinityConfig::infer_from(dict).to_json();
        case ModelFamily::BsqVae:
            return BsqVaeConfig::infer_from(dict).to_json();
        case ModelFamily::Unknown:
            break;
    }
    return nullptr;
}

}  // namespace varscope
