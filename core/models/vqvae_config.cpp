#include "core/models/vqvae_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "core/io/json_fields.h"

namespace varscope {
namespace {

const at::Tensor& need(const StateDict& dict, const std::string& name, const char* purpose) {
    auto it = dict.find(name);
    if (it == dict.end())
        throw CheckpointError("VQVAE checkpoint lacks tensor '" + name + "' (needed to infer " +
                              purpose + ")");
    return it->second;
}

bool has(const StateDict& dict, const std::string& name) {
    return dict.count(name) > 0;
}

// Number of consecutive indices i = 0, 1, ... for which prefix + i + suffix is present.
int64_t count_indexed(const StateDict& dict, const std::string& prefix, const std::string& suffix) {
    int64_t n = 0;
    while (has(dict, prefix + std::to_string(n) + suffix)) ++n;
    return n;
}

}  // namespace

int64_t VqvaeConfig::downsample() const {
    return ch_mult.empty() ? 1 : int64_t{1} << (ch_mult.size() - 1);
}

int64_t VqvaeConfig::phi_count() const {
    if (std::abs(quant_resi) <= 1e-6) return 0;
    if (share_quant_resi == 0)
        return qresi_counts > 0 ? qresi_counts : static_cast<int64_t>(patch_nums.size());
    return share_quant_resi;  // 1 (shared) or K (partially shared)
}

void VqvaeConfig::validate() const {
    auto fail = [](const std::string& what) {
        throw std::invalid_argument("VqvaeConfig: " + what);
    };
    if (vocab_size <= 0) fail("vocab_size must be positive");
    if (z_channels <= 0) fail("z_channels must be positive");
    if (ch <= 0 || ch_mult.empty()) fail("ch and ch_mult must be non-empty/positive");
    // Every GroupNorm of the backbone uses 32 groups.
    for (int64_t m : ch_mult)
        if (m <= 0 || (ch * m) % 32 != 0)
            fail("ch * ch_mult[i] must be a positive multiple of 32 (GroupNorm(32, C))");
    if (num_res_blocks <= 0) fail("num_res_blocks must be positive");
    if (share_quant_resi < 0) fail("share_quant_resi must be >= 0");
    if (qresi_counts < 0) fail("qresi_counts must be >= 0");
    if (patch_nums.empty()) fail("patch_nums must not be empty");
    for (size_t i = 0; i < patch_nums.size(); ++i)
        if (patch_nums[i] <= 0 || (i > 0 && patch_nums[i] < patch_nums[i - 1]))
            fail("patch_nums must be positive and non-decreasing");
    if (quant_conv_ks <= 0 || quant_conv_ks % 2 == 0) fail("quant_conv_ks must be odd");
}

VqvaeConfig VqvaeConfig::infer_from(const StateDict& dict, std::vector<int64_t> patch_nums) {
    VqvaeConfig c;
    c.patch_nums = std::move(patch_nums);

    c.ch = need(dict, "encoder.conv_in.weight", "ch").size(0);
    const at::Tensor emb = need(dict, "quantize.embedding.weight", "vocab_size and z_channels");
    c.vocab_size = emb.size(0);
    c.z_channels = emb.size(1);
    c.quant_conv_ks = need(dict, "quant_conv.weight", "quant_conv_ks").size(-1);

    need(dict, "encoder.down.0.block.0.conv1.weight", "ch_mult");
    const int64_t levels = count_indexed(dict, "encoder.down.", ".block.0.conv1.weight");
    c.num_res_blocks = count_indexed(dict, "encoder.down.0.block.", ".conv1.weight");
    c.ch_mult.clear();
    for (int64_t i = 0; i < levels; ++i) {
        // conv2 always maps to the level's output width, whatever the block's input width.
        const std::string name = "encoder.down." + std::to_string(i) + ".block.0.conv2.weight";
        const int64_t out = need(dict, name, "ch_mult").size(0);
        if (out % c.ch != 0)
            throw CheckpointError("VQVAE checkpoint: '" + name + "' has " + std::to_string(out) +
                                  " output channels, not a multiple of ch=" + std::to_string(c.ch));
        c.ch_mult.push_back(out / c.ch);
    }
    c.using_sa = has(dict, "encoder.down." + std::to_string(levels - 1) + ".attn.0.qkv.weight");
    c.using_mid_sa = has(dict, "encoder.mid.attn_1.qkv.weight");

    // The Phi container's class shows in the names: PhiShared.qresi,
    // PhiPartiallyShared.qresi_ls.<i>, PhiNonShared (a ModuleList itself) <i>.
    const int64_t partial = count_indexed(dict, "quantize.quant_resi.qresi_ls.", ".weight");
    const int64_t nonshared = count_indexed(dict, "quantize.quant_resi.", ".weight");
    if (has(dict, "quantize.quant_resi.qresi.weight")) {
        c.share_quant_resi = 1;
    } else if (partial > 0) {
        if (partial == 1)
            throw CheckpointError(
                "VQVAE checkpoint: a single 'quantize.quant_resi.qresi_ls.0' "
                "Phi is not a layout the official model can produce");
        c.share_quant_resi = partial;
    } else if (nonshared > 0) {
        c.share_quant_resi = 0;
        c.qresi_counts = nonshared == static_cast<int64_t>(c.patch_nums.size()) ? 0 : nonshared;
    } else {
        c.quant_resi = 0.0;  // every Phi is nn.Identity
    }
    return c;
}

nlohmann::json VqvaeConfig::to_json() const {
    return nlohmann::json{{"vocab_size", vocab_size},
                          {"z_channels", z_channels},
                          {"ch", ch},
                          {"ch_mult", ch_mult},
                          {"num_res_blocks", num_res_blocks},
                          {"using_sa", using_sa},
                          {"using_mid_sa", using_mid_sa},
                          {"quant_resi", quant_resi},
                          {"share_quant_resi", share_quant_resi},
                          {"qresi_counts", qresi_counts},
                          {"patch_nums", patch_nums},
                          {"quant_conv_ks", quant_conv_ks},
                          {"beta", beta}};
}

VqvaeConfig VqvaeConfig::from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw std::invalid_argument("VQVAE config: expected a JSON object");
    require_known_fields(j, VqvaeConfig{}.to_json(), "VQVAE config");
    try {
        return from_json_fields(j);
    } catch (const nlohmann::json::exception& e) {  // a wrong type: name the reader, exit 2
        throw std::invalid_argument(std::string("VQVAE config: ") + e.what());
    }
}

VqvaeConfig VqvaeConfig::from_json_fields(const nlohmann::json& j) {
    VqvaeConfig c;
    auto get = [&](const char* k, auto& v) { read_json_field(j, k, v, "VQVAE config: field "); };
    get("vocab_size", c.vocab_size);
    get("z_channels", c.z_channels);
    get("ch", c.ch);
    get("ch_mult", c.ch_mult);
    get("num_res_blocks", c.num_res_blocks);
    get("using_sa", c.using_sa);
    get("using_mid_sa", c.using_mid_sa);
    get("quant_resi", c.quant_resi);
    get("share_quant_resi", c.share_quant_resi);
    get("qresi_counts", c.qresi_counts);
    get("patch_nums", c.patch_nums);
    get("quant_conv_ks", c.quant_conv_ks);
    get("beta", c.beta);
    return c;
}

bool VqvaeConfig::operator==(const VqvaeConfig& o) const {
    return vocab_size == o.vocab_size && z_channels == o.z_channels && ch == o.ch &&
           ch_mult == o.ch_mult && num_res_blocks == o.num_res_blocks && using_sa == o.using_sa &&
           using_mid_sa == o.using_mid_sa && quant_resi == o.quant_resi &&
           share_quant_resi == o.share_quant_resi && qresi_counts == o.qresi_counts &&
           patch_nums == o.patch_nums && quant_conv_ks == o.quant_conv_ks && beta == o.beta;
}

}  // namespace varscope
