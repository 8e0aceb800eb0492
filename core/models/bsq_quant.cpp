#include "core/models/bsq_quant.h"

#include <ATen/ops/pixel_shuffle.h>
#include <ATen/ops/pixel_unshuffle.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace varscope::bsq {

namespace {

std::string shape_of(const at::Tensor& t) {
    std::string s = "(";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
    return s + ")";
}

}  // namespace

double BsqQuantConfig::codebook_scale() const {
    // numpy's 1/np.sqrt(d) in double, as the official BSQ(codebook_scale=...) receives it.
    return 1.0 / std::sqrt(static_cast<double>(codebook_dim));
}

void BsqQuantConfig::validate() const {
    if (codebook_dim < 1 || codebook_dim > 64)
        throw std::invalid_argument("BsqQuantConfig.codebook_dim must be in [1, 64], got " +
                                    std::to_string(codebook_dim));
}

at::Tensor bits_to_codes(const at::Tensor& bits, const BsqQuantConfig& cfg) {
    cfg.validate();
    if (bits.dim() != 4 && bits.dim() != 5)
        throw std::invalid_argument(
            "bsq::bits_to_codes: bits must be (B,1,h,w,d) or (B,h,w,d), got " + shape_of(bits));
    if (bits.size(-1) != cfg.codebook_dim)
        throw std::invalid_argument("bsq::bits_to_codes: last dimension must be codebook_dim " +
                                    std::to_string(cfg.codebook_dim) + ", got " + shape_of(bits));
    const at::Tensor b5 = bits.dim() == 4 ? bits.unsqueeze(1) : bits;  // (B,t,h,w,d)
    // Official: (int64 bits) * np.float64 scale promotes to float32 and computes in float32;
    // converting first gives the same values. Then bits*s*2 - s, l2-normalised over d
    // (F.normalize: x / max(||x||, 1e-12)).
    const double s = cfg.codebook_scale();
    at::Tensor x = b5.to(at::kFloat).mul(s).mul(2).sub(s);
    const at::Tensor denom = at::linalg_vector_norm(x, 2, {-1}, /*keepdim=*/true).clamp_min(1e-12);
    x = x.div(denom.expand_as(x));
    return x.permute({0, 4, 1, 2, 3});  // b ... d -> b d ... (a view, like rearrange)
}

at::Tensor interpolate(const at::Tensor& x, const Size3& size, Interp mode) {
    if (x.dim() != 5)
        throw std::invalid_argument("bsq::interpolate: expected (B,C,T,H,W), got " + shape_of(x));
    if (size[0] < 1 || size[1] < 1 || size[2] < 1)
        throw std::invalid_argument("bsq::interpolate: sizes must be positive");
    if (mode == Interp::Area) return at::adaptive_avg_pool3d(x, {size[0], size[1], size[2]});
    return at::upsample_trilinear3d(x, {size[0], size[1], size[2]}, /*align_corners=*/false,
                                    c10::nullopt, c10::nullopt, c10::nullopt);
}

at::Tensor unpatchify_bits(const at::Tensor& bits) {
    if (bits.dim() != 4 || bits.size(-1) % 4 != 0)
        throw std::invalid_argument("bsq::unpatchify_bits: expected (B,h,w,4d), got " +
                                    shape_of(bits));
    return at::pixel_shuffle(bits.permute({0, 3, 1, 2}), 2).permute({0, 2, 3, 1});
}

at::Tensor patchify_codes(const at::Tensor& x) {
    if (x.dim() != 4 || x.size(2) % 2 != 0 || x.size(3) % 2 != 0)
        throw std::invalid_argument("bsq::patchify_codes: expected (B,d,2h,2w), got " +
                                    shape_of(x));
    return at::pixel_unshuffle(x, 2);
}

Size3 vae_scale(const Size3& token_scale, const BsqQuantConfig& cfg) {
    if (!cfg.spatial_patchify) return token_scale;
    return {token_scale[0], 2 * token_scale[1], 2 * token_scale[2]};
}

}  // namespace varscope::bsq

namespace varscope::bsq {

BsqQuantized bsq_quantize(const at::Tensor& x, const BsqQuantConfig& cfg) {
    cfg.validate();
    if (x.dim() != 5 || x.size(1) != cfg.codebook_dim)
        throw std::invalid_argument("bsq::bsq_quantize: expected (B," +
                                    std::to_string(cfg.codebook_dim) + ",t,h,w), got " +
                                    shape_of(x));
    // Official: channels last and contiguous, F.normalize over d, then the straight-through
    // z + (zhat - z) in float32 (force_quantization_f32), bits = quantized > 0.
    const at::Tensor xl = x.permute({0, 2, 3, 4, 1}).contiguous().to(at::kFloat);
    const at::Tensor denom = at::linalg_vector_norm(xl, 2, {-1}, /*keepdim=*/true).clamp_min(1e-12);
    const at::Tensor z = xl.div(denom.expand_as(xl));
    const double q = 1.0 / std::sqrt(static_cast<double>(cfg.codebook_dim));
    const at::Tensor zhat =
        at::where(z.gt(0), at::ones({}, z.options()), at::full({}, -1.0, z.options())).mul(q);
    // The detach changes no value; without it the gradient through z cancelled to zero.
    const at::Tensor quantized = z + (zhat - z).detach();
    return {quantized.permute({0, 4, 1, 2, 3}), quantized.gt(0).to(at::kLong), z};
}

MultiScaleCodes quantize_multiscale(const at::Tensor& h, const std::vector<Size3>& schedule,
                                    const BsqQuantConfig& cfg, const OnBsqScale& on_scale) {
    if (h.dim() != 4 && h.dim() != 5)
        throw std::invalid_argument(
            "bsq::quantize_multiscale: h must be (B,d,H,W) or (B,d,T,H,W), got " + shape_of(h));
    if (schedule.empty()) throw std::invalid_argument("bsq::quantize_multiscale: empty schedule");
    const at::Tensor x = h.dim() == 4 ? h.unsqueeze(2) : h;
    const Size3 full{x.size(2), x.size(3), x.size(4)};
    for (const Size3& s : schedule)
        if (s[0] < 1 || s[1] < 1 || s[2] < 1 || s[0] > full[0] || s[1] > full[1] || s[2] > full[2])
            throw std::invalid_argument("bsq::quantize_multiscale: scale (" + std::to_string(s[0]) +
                                        "," + std::to_string(s[1]) + "," + std::to_string(s[2]) +
                                        ") does not fit the latent " + shape_of(x));
    MultiScaleCodes out;
    at::Tensor residual = x.contiguous();
    at::Tensor f_hat;
    for (size_t si = 0; si < schedule.size(); ++si) {
        const bool at_full = schedule[si] == full;
        const at::Tensor r = at_full ? residual : interpolate(residual, schedule[si], cfg.down);
        BsqQuantized q = bsq_quantize(r, cfg);
        if (on_scale) on_scale(si, q);
        at::Tensor quantized = q.quantized;
        if (!at_full) quantized = interpolate(quantized, full, cfg.up).contiguous();
        residual = residual - quantized.detach();
        f_hat = f_hat.defined() ? f_hat + quantized : quantized;
        out.bits.push_back(std::move(q.bits));
        if (si + 1 != schedule.size())
            out.var_inputs.push_back(interpolate(f_hat, schedule[si + 1], cfg.down).contiguous());
    }
    out.f_hat = f_hat.size(2) == 1 ? f_hat.squeeze(2) : f_hat;  // official squeeze(2)
    return out;
}

}  // namespace varscope::bsq

namespace varscope::bsq {

TeacherForcing teacher_forcing(const at::Tensor& h, const std::vector<Size3>& vae_schedule,
                               const BsqQuantConfig& cfg) {
    if (h.dim() != 4 && h.dim() != 5)
        throw std::invalid_argument(
            "bsq::teacher_forcing: h must be (B,d,H,W) or (B,d,1,H,W), got " + shape_of(h));
    if (vae_schedule.empty()) throw std::invalid_argument("bsq::teacher_forcing: empty schedule");
    const at::Tensor codes_out = h.dim() == 4 ? h.unsqueeze(2) : h;
    const size_t last = vae_schedule.size() - 1;
    TeacherForcing out;
    for (size_t si = 0; si <= last; ++si) {
        // Official: residual = codes_out - cum (cum starts as the integer 0: no rounding).
        at::Tensor residual = out.summed.defined() ? codes_out - out.summed : codes_out;
        if (si != last) residual = interpolate(residual, vae_schedule[si], cfg.down).contiguous();
        BsqQuantized q = bsq_quantize(residual, cfg);
        // Always interpolated, even at the last scale where it is the identity size.
        const at::Tensor up = interpolate(q.quantized, vae_schedule.back(), cfg.up).contiguous();
        out.summed = out.summed.defined() ? out.summed + up : up;
        out.bits.push_back(q.bits);
        if (si < last)
            out.next_inputs.push_back(
                interpolate(out.summed, vae_schedule[si + 1], cfg.up).contiguous());
    }
    return out;
}

at::Tensor token_labels(const at::Tensor& bits, const BsqQuantConfig& cfg) {
    if (bits.dim() != 5 || bits.size(1) != 1 || bits.size(-1) != cfg.codebook_dim)
        throw std::invalid_argument("bsq::token_labels: expected (B,1,h,w," +
                                    std::to_string(cfg.codebook_dim) + "), got " + shape_of(bits));
    const int64_t B = bits.size(0);
    if (!cfg.spatial_patchify) return bits.reshape({B, -1, cfg.codebook_dim});
    const at::Tensor x = patchify_codes(bits.squeeze(1).permute({0, 3, 1, 2}));
    return x.permute({0, 2, 3, 1}).reshape({B, -1, 4 * cfg.codebook_dim});
}

at::Tensor token_inputs(const at::Tensor& x, const BsqQuantConfig& cfg) {
    if (x.dim() != 5 || x.size(2) != 1 || x.size(1) != cfg.codebook_dim)
        throw std::invalid_argument("bsq::token_inputs: expected (B," +
                                    std::to_string(cfg.codebook_dim) + ",1,h,w), got " +
                                    shape_of(x));
    at::Tensor y = x.squeeze(-3);
    if (cfg.spatial_patchify) y = patchify_codes(y);
    return y.reshape({y.size(0), y.size(1), -1}).permute({0, 2, 1});
}

}  // namespace varscope::bsq
