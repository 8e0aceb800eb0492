#include "core/metrics/feature_stats.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

#include "core/io/npy.h"

namespace varscope {
namespace {

void check_matrix(const at::Tensor& t, const char* what) {
    if (!t.defined() || t.dim() != 2)
        throw std::invalid_argument(std::string(what) + ": expected an (N, D) feature matrix");
    if (!at::isfinite(t).all().item<bool>())
        throw std::invalid_argument(std::string(what) + ": features hold NaN or infinity");
}

// Distances from every row of `rows` to every row of `cols`, `block` rows at a time.
template <typename F>
void distance_blocks(const at::Tensor& rows, const at::Tensor& cols, F&& take) {
    constexpr int64_t block = 512;
    for (int64_t i = 0; i < rows.size(0); i += block) {
        const int64_t n = std::min(block, rows.size(0) - i);
        take(i, at::cdist(rows.narrow(0, i, n), cols, 2.0, /*donot_use_mm*/ 2));
    }
}

// Per row, the distance to its k-th nearest other row (itself, at 0, is the first).
at::Tensor knn_radii(const at::Tensor& x, int64_t k) {
    auto radii = at::empty({x.size(0)}, x.options());
    distance_blocks(x, x, [&](int64_t i, const at::Tensor& d) {
        radii.narrow(0, i, d.size(0)).copy_(std::get<0>(d.kthvalue(k + 1, 1)));
    });
    return radii;
}

// The fraction of rows of `a` within some row of `b`'s radius.
double covered(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_radii) {
    int64_t inside = 0;
    distance_blocks(a, b, [&](int64_t, const at::Tensor& d) {
        inside += d.le(b_radii.unsqueeze(0)).any(1).sum().item<int64_t>();
    });
    return static_cast<double>(inside) / a.size(0);
}

void check_stats(const FeatureStats& s, const char* what) {
    if (!s.mu.defined() || !s.sigma.defined() || s.mu.dim() != 1 || s.sigma.dim() != 2 ||
        s.sigma.size(0) != s.mu.size(0) || s.sigma.size(1) != s.mu.size(0))
        throw std::invalid_argument(std::string("Frechet distance: ") + what +
                                    " statistics need mu (D,) and sigma (D, D)");
    if (!at::isfinite(s.mu).all().item<bool>() || !at::isfinite(s.sigma).all().item<bool>())
        throw std::invalid_argument(std::string("Frechet distance: ") + what +
                                    " statistics hold NaN or infinity");
}

double trace_sqrt_product(const at::Tensor& s1, const at::Tensor& s2) {
    const auto lambda = at::linalg_eigvals(s1.mm(s2));  // complex128
    if (!at::isfinite(lambda).all().item<bool>()) return NAN;
    return at::real(at::sqrt(lambda)).sum().item<double>();
}

}  // namespace

FeatureStats feature_stats(const at::Tensor& features) {
    check_matrix(features, "feature statistics");
    if (features.size(0) < 2)
        throw std::invalid_argument("feature statistics need at least 2 samples, got " +
                                    std::to_string(features.size(0)));
    const auto x = features.to(at::kCPU, at::kDouble);
    FeatureStats s;
    s.mu = x.mean(0);
    const auto centred = x - s.mu;
    s.sigma = centred.t().mm(centred).div(static_cast<double>(x.size(0) - 1));
    s.count = x.size(0);
    if (x.size(0) <= x.size(1)) s.centred = centred;
    return s;
}

double frechet_distance(const FeatureStats& a, const FeatureStats& b, double eps) {
    check_stats(a, "first");
    check_stats(b, "second");
    if (a.mu.size(0) != b.mu.size(0))
        throw std::invalid_argument("Frechet distance: feature sizes differ (" +
                                    std::to_string(a.mu.size(0)) + " vs " +
                                    std::to_string(b.mu.size(0)) + ")");
    const auto s1 = a.sigma.to(at::kCPU, at::kDouble), s2 = b.sigma.to(at::kCPU, at::kDouble);
    const auto diff = a.mu.to(at::kCPU, at::kDouble) - b.mu.to(at::kCPU, at::kDouble);
    double tr_covmean = NAN;
    if (a.centred.defined() && b.centred.defined()) {
        const auto m =
            b.centred.to(at::kCPU, at::kDouble).mm(a.centred.to(at::kCPU, at::kDouble).t());
        tr_covmean = at::linalg_svdvals(m).sum().item<double>() /
                     std::sqrt(static_cast<double>(a.centred.size(0) - 1) *
                               static_cast<double>(b.centred.size(0) - 1));
    } else {
        tr_covmean = trace_sqrt_product(s1, s2);
    }
    if (!std::isfinite(tr_covmean)) {
        const auto offset = at::eye(s1.size(0), s1.options()).mul(eps);
        tr_covmean = trace_sqrt_product(s1 + offset, s2 + offset);
    }
    return diff.dot(diff).item<double>() + s1.trace().item<double>() + s2.trace().item<double>() -
           2 * tr_covmean;
}

InceptionScore inception_score(const at::Tensor& logits, int64_t splits) {
    check_matrix(logits, "Inception Score");
    const int64_t n = logits.size(0);
    if (splits < 1 || n < splits)
        throw std::invalid_argument("Inception Score: " + std::to_string(n) + " images for " +
                                    std::to_string(splits) +
                                    " splits (need at least one image per split)");
    const auto l = logits.to(at::kCPU, at::kDouble);
    const auto p = l.softmax(1), log_p = l.log_softmax(1);
    std::vector<double> scores;
    for (int64_t i = 0; i < splits; ++i) {
        const int64_t begin = i * n / splits, end = (i + 1) * n / splits;
        const auto pc = p.narrow(0, begin, end - begin);
        const auto q = pc.mean(0, true);
        const auto kl = (pc * (log_p.narrow(0, begin, end - begin) - q.log())).sum(1).mean();
        scores.push_back(std::exp(kl.item<double>()));
    }
    InceptionScore out;
    out.splits = splits;
    for (double s : scores) out.mean += s / splits;
    double var = 0;
    for (double s : scores) var += (s - out.mean) * (s - out.mean) / splits;
    out.std = std::sqrt(var);
    return out;
}

PrecisionRecall precision_recall(const at::Tensor& generated, const at::Tensor& real, int64_t k) {
    check_matrix(generated, "precision/recall (generated)");
    check_matrix(real, "precision/recall (real)");
    if (generated.size(1) != real.size(1))
        throw std::invalid_argument("precision/recall: feature sizes differ");
    if (k < 1 || generated.size(0) <= k || real.size(0) <= k)
        throw std::invalid_argument(
            "precision/recall: each set needs more than k = " + std::to_string(k) + " samples (" +
            std::to_string(generated.size(0)) + " generated, " + std::to_string(real.size(0)) +
            " real)");
    const auto g = generated.to(at::kDouble), r = real.to(generated.device(), at::kDouble);
    PrecisionRecall out;
    out.k = k;
    out.precision = covered(g, r, knn_radii(r, k));
    out.recall = covered(r, g, knn_radii(g, k));
    return out;
}

FeatureStats read_reference_stats(const std::string& path, bool spatial) {
    const std::string mu_name = spatial ? "mu_s" : "mu", sigma_name = spatial ? "sigma_s" : "sigma";
    const auto arrays = read_npz(path, {mu_name, sigma_name});
    FeatureStats s;
    s.mu = arrays.at(mu_name).to(at::kDouble).reshape({-1});
    s.sigma = arrays.at(sigma_name).to(at::kDouble);
    const int64_t d = s.mu.size(0);
    if (s.sigma.dim() != 2 || s.sigma.size(0) != d || s.sigma.size(1) != d)
        throw NpyError(path + ": '" + sigma_name + "' has shape " + c10::str(s.sigma.sizes()) +
                       ", expected (" + std::to_string(d) + ", " + std::to_string(d) + ") for '" +
                       mu_name + "' of " + std::to_string(d));
    if (!at::isfinite(s.mu).all().item<bool>() || !at::isfinite(s.sigma).all().item<bool>())
        throw NpyError(path + ": '" + mu_name + "' or '" + sigma_name + "' holds NaN or infinity");
    return s;
}

void write_reference_stats(const std::string& path, const FeatureStats& stats,
                           const FeatureStats* spatial) {
    std::map<std::string, at::Tensor> arrays = {{"mu", stats.mu.to(at::kDouble)},
                                                {"sigma", stats.sigma.to(at::kDouble)}};
    if (spatial) {
        arrays["mu_s"] = spatial->mu.to(at::kDouble);
        arrays["sigma_s"] = spatial->sigma.to(at::kDouble);
    }
    write_npz(arrays, path);
}

}  // namespace varscope
