// Distribution metrics over feature-network outputs (issue #34), as the reference tools compute
// them: Frechet distance (pytorch-fid's calculate_frechet_distance; FID on pool3, sFID on the
// spatial features), Inception Score (torch-fidelity's isc over logits, without its shuffle),
// precision/recall (Kynkaanniemi et al. 2019, k-nearest-neighbour radii, torch-fidelity's prc).
// Statistics in float64. Reference statistics files are .npz (mu, sigma[, mu_s, sigma_s]: the
// layout of pytorch-fid's --save-stats and of ADM's reference batches).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace varscope {

struct FeatureStats {
    at::Tensor mu;      // (D,) float64, CPU
    at::Tensor sigma;   // (D, D) float64, CPU: covariance with N - 1 (np.cov)
    int64_t count = 0;  // samples behind them (0 when read from a file)
    // (N, D) float64 samples minus mu, kept when N <= D (fewer samples than features: the
    // covariances are singular, and tr(sqrtm(S1 S2)) comes exactly and cheaply from them).
    at::Tensor centred;
};

// (N, D) features, N >= 2; std::invalid_argument otherwise.
FeatureStats feature_stats(const at::Tensor& features);

// ||mu1 - mu2||^2 + tr(S1) + tr(S2) - 2 tr(sqrtm(S1 S2)). tr(sqrtm(S1 S2)) is the real part of
// the sum of the principal square roots of the eigenvalues of S1 S2 (what the trace of
// scipy.linalg.sqrtm's Schur-based root equals), in float64; where they are not finite, `eps`
// is added to both diagonals first, as pytorch-fid does. Where both sides kept their centred
// samples (N <= D), the same trace is the sum of the singular values of X2 X1^T over
// sqrt((N1 - 1)(N2 - 1)) (the nonzero eigenvalues of S1 S2 are those of (X2 X1^T)^T (X2 X1^T)):
// exact where the D x D product is singular, and an N1 x N2 problem instead of a D x D one.
// std::invalid_argument on mismatched or non-finite statistics.
double frechet_distance(const FeatureStats& a, const FeatureStats& b, double eps = 1e-6);

struct InceptionScore {
    double mean = 0, std = 0;  // over the splits (std: population, as np.std)
    int64_t splits = 0;
};
// (N, C) logits (softmax taken here, float64); split i holds rows [i N / s, (i + 1) N / s).
// std::invalid_argument when N < splits.
InceptionScore inception_score(const at::Tensor& logits, int64_t splits = 10);

struct PrecisionRecall {
    double precision = 0;  // generated samples inside some real sample's k-NN ball
    double recall = 0;     // real samples inside some generated sample's k-NN ball
    int64_t k = 0;
};
// (N, D) and (M, D) features on any one device; exact Euclidean distances (float64, no matmul
// shortcut), in row blocks. A ball's radius is the distance to the k-th nearest other sample
// of its own set. std::invalid_argument when a set has k samples or fewer.
PrecisionRecall precision_recall(const at::Tensor& generated, const at::Tensor& real,
                                 int64_t k = 3);

// Reference statistics: "mu" and "sigma" of an .npz, or "mu_s" / "sigma_s" with `spatial`
// (ADM's sFID statistics). NpyError naming the file and array on a missing array or wrong shape.
FeatureStats read_reference_stats(const std::string& path, bool spatial = false);
// mu, sigma (and mu_s, sigma_s where `spatial` has them) as float64 arrays, np.savez layout.
void write_reference_stats(const std::string& path, const FeatureStats& stats,
                           const FeatureStats* spatial = nullptr);

}  // namespace varscope
