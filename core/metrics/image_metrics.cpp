#include "core/metrics/image_metrics.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace varscope {
namespace {

at::Tensor as_batch(const at::Tensor& x) {
    if (x.dim() == 3) return x.unsqueeze(0);
    if (x.dim() != 4)
        throw std::invalid_argument("image metrics need (B, C, H, W) or (C, H, W) tensors");
    return x;
}

void check_pair(const at::Tensor& a, const at::Tensor& b) {
    if (a.sizes() != b.sizes())
        throw std::invalid_argument("image metrics need images of the same shape");
}

at::Tensor gaussian_window(int64_t size, double sigma, const at::TensorOptions& opt) {
    auto x = at::arange(size, opt).sub((size - 1) / 2.0);
    auto g = at::exp(x.pow(2).div(-2 * sigma * sigma));
    g = g / g.sum();
    return g.unsqueeze(1).mm(g.unsqueeze(0));  // (size, size), sums to 1
}

}  // namespace

std::vector<double> psnr(const at::Tensor& a_in, const at::Tensor& b_in) {
    auto a = as_batch(a_in).to(at::kDouble), b = as_batch(b_in).to(at::kDouble);
    check_pair(a, b);
    auto mse = (a - b).pow(2).flatten(1).mean(1).cpu();
    std::vector<double> out;
    for (int64_t i = 0; i < mse.size(0); ++i) {
        const double m = mse[i].item<double>();
        out.push_back(m == 0.0 ? std::numeric_limits<double>::infinity()
                               : 10.0 * std::log10(1.0 / m));
    }
    return out;
}

std::vector<double> ssim(const at::Tensor& a_in, const at::Tensor& b_in) {
    auto a = as_batch(a_in).to(at::kDouble), b = as_batch(b_in).to(at::kDouble);
    check_pair(a, b);
    const int64_t C = a.size(1);
    const int64_t win = std::min<int64_t>({11, a.size(2), a.size(3)});
    auto w = gaussian_window(win, 1.5, a.options()).expand({C, 1, win, win}).contiguous();
    auto filt = [&](const at::Tensor& x) {
        return at::conv2d(x, w, at::Tensor(), at::IntArrayRef{1, 1}, at::IntArrayRef{0, 0},
                          at::IntArrayRef{1, 1}, C);
    };
    const double c1 = 0.01 * 0.01, c2 = 0.03 * 0.03;
    const auto mu_a = filt(a);
    const auto mu_b = filt(b);
    const auto s_aa = filt(a * a) - mu_a * mu_a;
    const auto s_bb = filt(b * b) - mu_b * mu_b;
    const auto s_ab = filt(a * b) - mu_a * mu_b;
    auto map = ((2 * mu_a * mu_b + c1) * (2 * s_ab + c2)) /
               ((mu_a * mu_a + mu_b * mu_b + c1) * (s_aa + s_bb + c2));
    auto per_image = map.flatten(1).mean(1).cpu();
    std::vector<double> out;
    for (int64_t i = 0; i < per_image.size(0); ++i) out.push_back(per_image[i].item<double>());
    return out;
}

at::Tensor abs_diff_map(const at::Tensor& a, const at::Tensor& b) {
    check_pair(as_batch(a), as_batch(b));
    return (as_batch(a).to(at::kFloat) - as_batch(b).to(at::kFloat)).abs().mean(1);
}

std::vector<TokenAgreement> token_agreement(const std::vector<at::Tensor>& base,
                                            const std::vector<at::Tensor>& acc) {
    if (base.size() != acc.size())
        throw std::invalid_argument("token lists have different numbers of scales");
    std::vector<TokenAgreement> out;
    for (size_t si = 0; si < base.size(); ++si) {
        if (base[si].sizes() != acc[si].sizes())
            throw std::invalid_argument("token maps of scale " + std::to_string(si) +
                                        " differ in shape");
        const auto b = base[si].cpu(), x = acc[si].cpu();
        TokenAgreement t;
        t.scale = static_cast<int64_t>(si);
        t.total = b.numel();
        t.identical = (b.eq(x) & b.ge(0)).sum().item<int64_t>();
        t.undecoded = x.lt(0).sum().item<int64_t>();
        out.push_back(t);
    }
    return out;
}

}  // namespace varscope
