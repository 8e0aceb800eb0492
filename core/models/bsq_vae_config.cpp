#include "core/models/bsq_vae_config.h"

#include <stdexcept>
#include <string>

#include "core/io/json_fields.h"

namespace varscope {

namespace {

std::string join(const std::vector<int64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
    return s;
}

const at::Tensor& need(const StateDict& dict, const std::string& name, const std::string& what,
                       const char* purpose) {
    const at::Tensor* t = bsq_find(dict, name);
    if (!t)
        throw CheckpointError(what + ": BSQ VAE checkpoint lacks tensor '" + name + "' (or '" +
                              bsq_flux_name(name) + "'), needed to infer " + purpose);
    if (t->dim() != 4)
        throw CheckpointError(what + ": tensor '" + name + "' should be a 4-d conv weight, has " +
                              std::to_string(t->dim()) + " dimensions");
    return *t;
}

int64_t count_indexed(const StateDict& dict, const std::string& prefix, const std::string& suffix) {
    int64_t n = 0;
    while (bsq_find(dict, prefix + std::to_string(n) + suffix)) ++n;
    return n;
}

}  // namespace

int64_t bsq_norm_groups(int64_t channels) {
    if (channels > 0 && channels % 32 == 0) return 32;
    if (channels > 0 && channels % 24 == 0) return 24;
    throw std::invalid_argument("BSQ VAE: GroupNorm over " + std::to_string(channels) +
                                " channels: the official Normalize needs a multiple of 32 or 24");
}

std::string bsq_flux_name(const std::string& official_name) {
    for (const char* wrapper : {".conv.", ".norm."}) {
        // Only the wrapper level right before the parameter name: "...conv.conv.weight" ->
        // "...conv.weight", "norm1.norm.bias" -> "norm1.bias".
        const size_t dot = official_name.rfind('.');
        if (dot == std::string::npos) return official_name;
        const std::string w(wrapper);
        if (dot + 1 >= w.size() && official_name.compare(dot + 1 - w.size(), w.size(), w) == 0)
            return official_name.substr(0, dot + 1 - w.size()) + official_name.substr(dot);
    }
    return official_name;
}

const at::Tensor* bsq_find(const StateDict& dict, const std::string& official_name) {
    auto it = dict.find(official_name);
    if (it != dict.end()) return &it->second;
    it = dict.find(bsq_flux_name(official_name));
    return it != dict.end() ? &it->second : nullptr;
}

int64_t BsqVaeConfig::log2_patch() const {
    int64_t l = 0;
    while ((int64_t{1} << l) < patch_size) ++l;
    return l;
}

bsq::BsqQuantConfig BsqVaeConfig::quant_config() const {
    bsq::BsqQuantConfig q;
    q.codebook_dim = codebook_dim;
    return q;
}

void BsqVaeConfig::validate() const {
    auto fail = [](const std::string& m) { throw std::invalid_argument("BsqVaeConfig: " + m); };
    if (codebook_dim < 1 || codebook_dim > 64) fail("codebook_dim must be in [1, 64]");
    if (base_ch <= 0) fail("base_ch must be positive");
    if (num_res_blocks <= 0) fail("num_res_blocks must be positive");
    if (patch_size < 1 || (patch_size & (patch_size - 1)) != 0)
        fail("patch_size must be a power of two");
    for (const auto* mult : {&encoder_ch_mult, &decoder_ch_mult}) {
        const char* name = mult == &encoder_ch_mult ? "encoder_ch_mult" : "decoder_ch_mult";
        if (mult->empty()) fail(std::string(name) + " must not be empty");
        // Otherwise the decoder would upsample fewer times than the encoder downsamples.
        if (log2_patch() > static_cast<int64_t>(mult->size()) - 1)
            fail(std::string(name) + " needs at least log2(patch_size) + 1 levels");
        for (int64_t m : *mult) {
            if (m <= 0) fail(std::string(name) + " entries must be positive");
            try {
                bsq_norm_groups(base_ch * m);
            } catch (const std::invalid_argument& e) {
                fail(std::string(name) + ": " + e.what());
            }
        }
    }
}

std::string BsqVaeConfig::describe() const {
    std::string s = "BSQ VAE d" + std::to_string(codebook_dim);
    if (*this == d32reg()) s += " (Infinity-2B infinity_vae_d32reg)";
    if (*this == d56_f8_14_patchify())
        s += " (Infinity-8B infinity_vae_d56_f8_14_patchify: 56 bits per token with patchify)";
    s += ": ch " + std::to_string(base_ch) + ", mult " + join(encoder_ch_mult);
    if (decoder_ch_mult != encoder_ch_mult) s += " / decoder " + join(decoder_ch_mult);
    s += ", " + std::to_string(num_res_blocks) + " res blocks, patch " + std::to_string(patch_size);
    return s;
}

nlohmann::json BsqVaeConfig::to_json() const {
    return {{"codebook_dim", codebook_dim},       {"base_ch", base_ch},
            {"encoder_ch_mult", encoder_ch_mult}, {"decoder_ch_mult", decoder_ch_mult},
            {"num_res_blocks", num_res_blocks},   {"patch_size", patch_size}};
}

BsqVaeConfig BsqVaeConfig::from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw std::invalid_argument("BsqVaeConfig: expected a JSON object");
    BsqVaeConfig c;
    require_known_fields(j, c.to_json(), "BsqVaeConfig");
    auto get = [&](const char* k, auto& v) { read_json_field(j, k, v, "BsqVaeConfig: "); };
    get("codebook_dim", c.codebook_dim);
    get("base_ch", c.base_ch);
    get("encoder_ch_mult", c.encoder_ch_mult);
    get("decoder_ch_mult", c.decoder_ch_mult);
    get("num_res_blocks", c.num_res_blocks);
    get("patch_size", c.patch_size);
    c.validate();
    return c;
}

BsqVaeConfig BsqVaeConfig::d32reg() {
    return BsqVaeConfig{};
}

BsqVaeConfig BsqVaeConfig::d56_f8_14_patchify() {
    BsqVaeConfig c;
    c.codebook_dim = 14;
    c.encoder_ch_mult = c.decoder_ch_mult = {1, 2, 4, 4};
    c.patch_size = 8;
    return c;
}

BsqVaeConfig BsqVaeConfig::infer_from(const StateDict& dict, const std::string& what) {
    BsqVaeConfig c;
    c.base_ch = need(dict, "encoder.conv_in.conv.weight", what, "base_ch").size(0);
    c.codebook_dim = need(dict, "encoder.conv_out.conv.weight", what, "codebook_dim").size(0);
    const int64_t dec_z = need(dict, "decoder.conv_in.conv.weight", what, "codebook_dim").size(1);
    if (dec_z != c.codebook_dim)
        throw CheckpointError(what + ": 'encoder.conv_out' emits " +
                              std::to_string(c.codebook_dim) +
                              " channels but 'decoder.conv_in' takes " + std::to_string(dec_z));

    need(dict, "encoder.down.0.block.0.conv1.conv.weight", what, "encoder_ch_mult");
    const int64_t enc_levels = count_indexed(dict, "encoder.down.", ".block.0.conv1.conv.weight");
    c.num_res_blocks = count_indexed(dict, "encoder.down.0.block.", ".conv1.conv.weight");
    int64_t downs = 0;
    c.encoder_ch_mult.clear();
    for (int64_t i = 0; i < enc_levels; ++i) {
        const std::string level = "encoder.down." + std::to_string(i);
        // conv2 maps to the level's output width whatever the block's input width.
        const std::string name = level + ".block.0.conv2.conv.weight";
        const int64_t out = need(dict, name, what, "encoder_ch_mult").size(0);
        if (out % c.base_ch != 0)
            throw CheckpointError(what + ": '" + name + "' has " + std::to_string(out) +
                                  " output channels, not a multiple of base_ch " +
                                  std::to_string(c.base_ch));
        c.encoder_ch_mult.push_back(out / c.base_ch);
        if (bsq_find(dict, level + ".downsample.conv.conv.weight")) ++downs;
    }
    c.patch_size = int64_t{1} << downs;

    need(dict, "decoder.up.0.block.0.conv1.conv.weight", what, "decoder_ch_mult");
    const int64_t dec_levels = count_indexed(dict, "decoder.up.", ".block.0.conv1.conv.weight");
    const int64_t dec_blocks = count_indexed(dict, "decoder.up.0.block.", ".conv1.conv.weight");
    if (dec_blocks != c.num_res_blocks + 1)
        throw CheckpointError(what + ": decoder levels hold " + std::to_string(dec_blocks) +
                              " res blocks, the encoder's " + std::to_string(c.num_res_blocks) +
                              " (+1 expected)");
    c.decoder_ch_mult.clear();
    for (int64_t i = 0; i < dec_levels; ++i) {
        const std::string name = "decoder.up." + std::to_string(i) + ".block.0.conv2.conv.weight";
        const int64_t out = need(dict, name, what, "decoder_ch_mult").size(0);
        if (out % c.base_ch != 0)
            throw CheckpointError(what + ": '" + name + "' has " + std::to_string(out) +
                                  " output channels, not a multiple of base_ch " +
                                  std::to_string(c.base_ch));
        c.decoder_ch_mult.push_back(out / c.base_ch);
    }
    try {
        c.validate();
    } catch (const std::invalid_argument& e) {
        throw CheckpointError(what + ": inferred architecture is invalid: " + e.what());
    }
    return c;
}

bool BsqVaeConfig::operator==(const BsqVaeConfig& o) const {
    return codebook_dim == o.codebook_dim && base_ch == o.base_ch &&
           encoder_ch_mult == o.encoder_ch_mult && decoder_ch_mult == o.decoder_ch_mult &&
           num_res_blocks == o.num_res_blocks && patch_size == o.patch_size;
}

}  // namespace varscope
