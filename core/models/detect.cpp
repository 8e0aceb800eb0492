#include "core/models/detect.h"

namespace varscope {

ModelFamily detect_family(const StateDict& d) {
    auto has = [&](const char* n) { return d.count(n) > 0; };
    if (has("class_emb.weight") && has("pos_1LC") && has("blocks.0.attn.mat_qkv.weight"))
        return ModelFamily::VarTransformer;
    if (has("quantize.embedding.weight") && has("encoder.conv_in.weight"))
        return ModelFamily::MultiScaleVqvae;
    if (has("z_proj.weight") && (has("diffloss.net.input_proj.weight") || has("encoder_pos_embed_learned")))
        return ModelFamily::MarTransformer;
    if (has("encoder.conv_in.weight") && has("quant_conv.weight") && has("decoder.conv_out.weight"))
        return ModelFamily::KlVae;
    return ModelFamily::Unknown;
}

std::string family_name(ModelFamily f) {
    switch (f) {
        case ModelFamily::VarTransformer: return "VAR transformer";
        case ModelFamily::MultiScaleVqvae: return "VAR multi-scale VQVAE";
        case ModelFamily::MarTransformer: return "MAR transformer";
        case ModelFamily::KlVae: return "KL VAE";
        case ModelFamily::Unknown: break;
    }
    return "unknown";
}

}  // namespace varscope
