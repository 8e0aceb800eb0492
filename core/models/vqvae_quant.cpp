#include "core/models/vqvae_quant.h"

#include <torch/nn/modules/container/modulelist.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace varscope {

int64_t phi_tick_index(int64_t K, int64_t si, int64_t SN) {
    if (K <= 1) return 0;
    // numpy.linspace: start + i * ((stop - start) / (K - 1)), the last tick set to stop exactly.
    const double start = K == 4 ? 1.0 / 3.0 / K : 1.0 / 2.0 / K;
    const double stop = 1.0 - start;
    const double step = (stop - start) / static_cast<double>(K - 1);
    const double at = SN > 1 ? static_cast<double>(si) / static_cast<double>(SN - 1) : 0.0;
    int64_t best = 0;
    double best_dist = 0.0;
    for (int64_t i = 0; i < K; ++i) {
        const double tick = i == K - 1 ? stop : static_cast<double>(i) * step + start;
        const double dist = std::abs(tick - at);
        if (i == 0 || dist < best_dist) {  // strict: the first index wins ties, like argmin
            best = i;
            best_dist = dist;
        }
    }
    return best;
}

namespace vqvae {
namespace {

at::Tensor bicubic_to(const at::Tensor& x, int64_t size) {
    return at::upsample_bicubic2d(x, {size, size}, /*align_corners=*/false);
}

std::string shape_str(at::IntArrayRef s) {
    std::ostringstream os;
    os << s;
    return os.str();
}

at::Tensor area_to(const at::Tensor& x, int64_t size) {
    // F.interpolate(mode='area') is adaptive average pooling.
    return at::adaptive_avg_pool2d(x, {size, size});
}

}  // namespace

// ---------------------------------------------------------------------------------------------

PhiSetImpl::PhiSetImpl(const VqvaeConfig& cfg)
    : ratio_(std::abs(cfg.quant_resi)), slots_(1), shared_(cfg.share_quant_resi == 1) {
    const bool is_identity = ratio_ <= 1e-6;
    const int64_t C = cfg.z_channels;
    auto make = [&] { return torch::nn::Conv2d(torch::nn::Conv2dOptions(C, C, 3).padding(1)); };
    if (cfg.share_quant_resi == 0) {
        slots_ =
            cfg.qresi_counts > 0 ? cfg.qresi_counts : static_cast<int64_t>(cfg.patch_nums.size());
        // PhiNonShared is itself the ModuleList: children sit directly under quant_resi.
        for (int64_t i = 0; i < slots_ && !is_identity; ++i)
            convs_.push_back(register_module(std::to_string(i), make()));
    } else if (cfg.share_quant_resi == 1) {
        if (!is_identity) convs_.push_back(register_module("qresi", make()));
    } else {
        slots_ = cfg.share_quant_resi;
        auto list = register_module("qresi_ls", torch::nn::ModuleList());
        for (int64_t i = 0; i < slots_ && !is_identity; ++i) {
            convs_.push_back(make());
            list->push_back(convs_.back());
        }
    }
}

int64_t PhiSetImpl::index_for(int64_t si, int64_t SN) const {
    return shared_ ? 0 : phi_tick_index(slots_, si, SN);
}

at::Tensor PhiSetImpl::forward(const at::Tensor& h, int64_t si, int64_t SN) {
    if (convs_.empty()) return h;
    return h.mul(1.0 - ratio_) + convs_[index_for(si, SN)](h).mul_(ratio_);
}

// ---------------------------------------------------------------------------------------------

VectorQuantizerImpl::VectorQuantizerImpl(const VqvaeConfig& cfg)
    : vocab_size_(cfg.vocab_size),
      cvae_(cfg.z_channels),
      beta_(cfg.beta),
      patch_nums_(cfg.patch_nums) {
    quant_resi_ = register_module("quant_resi", PhiSet(cfg));
    ema_vocab_hit_SV_ = register_buffer(
        "ema_vocab_hit_SV", at::zeros({static_cast<int64_t>(patch_nums_.size()), vocab_size_}));
    embedding_ = register_module("embedding", torch::nn::Embedding(vocab_size_, cvae_));
}

void VectorQuantizerImpl::check_latent(const at::Tensor& f) const {
    const int64_t last = patch_nums_.back();
    if (f.dim() != 4 || f.size(1) != cvae_ || f.size(2) != last || f.size(3) != last)
        throw std::invalid_argument("VQVAE quantizer: expected f of shape [B, " +
                                    std::to_string(cvae_) + ", " + std::to_string(last) + ", " +
                                    std::to_string(last) + "], got " + shape_str(f.sizes()));
}

at::Tensor VectorQuantizerImpl::residual_at(const at::Tensor& f_rest, int64_t si) const {
    const int64_t SN = static_cast<int64_t>(patch_nums_.size());
    const at::Tensor r = si != SN - 1 ? area_to(f_rest, patch_nums_[si]) : f_rest;
    return r.permute({0, 2, 3, 1}).reshape({-1, cvae_});
}

at::Tensor VectorQuantizerImpl::nearest(const at::Tensor& z_NC) const {
    // ||z||^2 + ||e||^2 - 2 z.e in the official order; the search itself carries no gradient.
    const at::Tensor z = z_NC.detach();
    const at::Tensor E = embedding_->weight.detach();
    at::Tensor d = z.square().sum(1, /*keepdim=*/true) + E.square().sum(1, /*keepdim=*/false);
    d.addmm_(z, E.t(), /*beta=*/1, /*alpha=*/-2);
    return d.argmin(1);
}

at::Tensor VectorQuantizerImpl::lookup(const at::Tensor& idx_Bl, int64_t pn) {
    const int64_t B = idx_Bl.size(0);
    return embedding_(idx_Bl).view({B, pn, pn, cvae_}).permute({0, 3, 1, 2});
}

std::vector<at::Tensor> VectorQuantizerImpl::quantize_scales(const at::Tensor& f, bool want_fhat) {
    check_latent(f);
    const int64_t B = f.size(0), H = f.size(2);
    const int64_t SN = static_cast<int64_t>(patch_nums_.size());
    at::Tensor f_rest = f.detach().clone();
    at::Tensor f_hat = at::zeros_like(f_rest);
    std::vector<at::Tensor> out;
    for (int64_t si = 0; si < SN; ++si) {
        const int64_t pn = patch_nums_[si];
        const at::Tensor idx_N = nearest(residual_at(f_rest, si));
        at::Tensor h = lookup(idx_N.view({B, pn * pn}), pn);
        if (si != SN - 1) h = bicubic_to(h, H);
        h = quant_resi_(h.contiguous(), si, SN);
        f_hat.add_(h);
        f_rest.sub_(h.detach());  // the residual only steers the index search
        out.push_back(want_fhat ? f_hat.clone() : idx_N.reshape({B, pn * pn}));
    }
    return out;
}

std::vector<at::Tensor> VectorQuantizerImpl::f_to_idx(const at::Tensor& f) {
    return quantize_scales(f, /*want_fhat=*/false);
}

std::vector<at::Tensor> VectorQuantizerImpl::f_to_fhats(const at::Tensor& f) {
    return quantize_scales(f, /*want_fhat=*/true);
}

at::Tensor VectorQuantizerImpl::idx_to_fhat(const std::vector<at::Tensor>& idx) {
    const int64_t SN = static_cast<int64_t>(patch_nums_.size());
    if (idx.empty() || static_cast<int64_t>(idx.size()) > SN)
        throw std::invalid_argument("VQVAE idx_to_fhat: expected 1.." + std::to_string(SN) +
                                    " token maps, got " + std::to_string(idx.size()));
    const int64_t B = idx[0].size(0), HW = patch_nums_.back();
    at::Tensor f_hat = at::zeros({B, cvae_, HW, HW}, codebook().options().dtype(at::kFloat));
    for (int64_t si = 0; si < static_cast<int64_t>(idx.size()); ++si) {
        at::Tensor h = lookup(idx[si], patch_nums_[si]);
        if (si < SN - 1) h = bicubic_to(h, HW);
        f_hat.add_(quant_resi_(h, si, SN));
    }
    return f_hat;
}

at::Tensor VectorQuantizerImpl::idx_to_var_input(const std::vector<at::Tensor>& idx) {
    const int64_t SN = static_cast<int64_t>(patch_nums_.size());
    if (static_cast<int64_t>(idx.size()) < SN - 1 || idx.empty())
        throw std::invalid_argument("VQVAE idx_to_var_input: expected at least " +
                                    std::to_string(std::max<int64_t>(SN - 1, 1)) +
                                    " token maps, got " + std::to_string(idx.size()));
    const int64_t B = idx[0].size(0), HW = patch_nums_.back();
    at::Tensor f_hat = at::zeros({B, cvae_, HW, HW}, codebook().options().dtype(at::kFloat));
    std::vector<at::Tensor> next_scales;
    for (int64_t si = 0; si < SN - 1; ++si) {
        f_hat.add_(quant_resi_(bicubic_to(lookup(idx[si], patch_nums_[si]), HW), si, SN));
        const int64_t pn_next = patch_nums_[si + 1];
        next_scales.push_back(area_to(f_hat, pn_next).view({B, cvae_, -1}).transpose(1, 2));
    }
    // With a single scale there is nothing to teacher-force (the official code returns None).
    if (next_scales.empty()) return at::zeros({B, 0, cvae_}, f_hat.options());
    return at::cat(next_scales, 1);
}

std::pair<at::Tensor, at::Tensor> VectorQuantizerImpl::next_autoregressive_input(
    int64_t si, int64_t SN, at::Tensor& f_hat, const at::Tensor& h_BChw) {
    const int64_t HW = patch_nums_.back();
    if (si != SN - 1) {
        f_hat.add_(quant_resi_(bicubic_to(h_BChw, HW), si, SN));  // Phi acts after upsampling
        return {f_hat, area_to(f_hat, patch_nums_[si + 1])};
    }
    f_hat.add_(quant_resi_(h_BChw, si, SN));
    return {f_hat, f_hat};
}

QuantizerTrainOutput VectorQuantizerImpl::forward_train(const at::Tensor& f_in, bool with_usages) {
    // The official code runs this part in float32 with autocast disabled.
    const at::Tensor f = f_in.scalar_type() == at::kFloat ? f_in : f_in.to(at::kFloat);
    check_latent(f);
    const int64_t B = f.size(0), H = f.size(2);
    const int64_t SN = static_cast<int64_t>(patch_nums_.size());
    const at::Tensor f_no_grad = f.detach();
    at::Tensor f_rest = f_no_grad.clone();
    at::Tensor f_hat = at::zeros_like(f_rest);
    at::Tensor loss;
    for (int64_t si = 0; si < SN; ++si) {
        const int64_t pn = patch_nums_[si];
        const at::Tensor idx_N = nearest(residual_at(f_rest, si));
        if (is_training()) {
            // Hit counts are local to this process (the official code all-reduces them first).
            // record_hit advances once per scale, as upstream, so only scale 0 of the first
            // step takes the plain copy.
            at::NoGradGuard no_grad;
            const at::Tensor hit_V = at::bincount(idx_N, {}, vocab_size_).to(at::kFloat);
            at::Tensor row = ema_vocab_hit_SV_[si];
            if (record_hit_ == 0)
                row.copy_(hit_V);
            else if (record_hit_ < 100)
                row.mul_(0.9).add_(hit_V.mul(0.1));
            else
                row.mul_(0.99).add_(hit_V.mul(0.01));
            ++record_hit_;
        }
        at::Tensor h = embedding_(idx_N.view({B, pn, pn})).permute({0, 3, 1, 2});
        if (si != SN - 1) h = bicubic_to(h, H);
        h = quant_resi_(h.contiguous(), si, SN);
        f_hat = f_hat + h;
        f_rest.sub_(h.detach());
        // Commitment term pulls the encoder towards f_hat; the codebook/Phi term pulls f_hat
        // towards the (frozen) encoder output.
        at::Tensor term =
            at::mse_loss(f_hat.detach(), f).mul_(beta_) + at::mse_loss(f_hat, f_no_grad);
        loss = loss.defined() ? loss + term : term;
    }
    QuantizerTrainOutput out;
    out.vq_loss = loss.mul(1.0 / static_cast<double>(SN));
    out.f_hat = (f_hat.detach() - f_no_grad).add_(f);  // straight-through estimator
    if (with_usages) {
        // An entry counts as used when its EMA hit count reaches 8% of a uniform share.
        const double margin = static_cast<double>(f.numel() / f.size(1)) / vocab_size_ * 0.08;
        const at::Tensor used =
            (ema_vocab_hit_SV_.detach() >= margin).to(at::kFloat).mean(1).to(at::kCPU, at::kDouble);
        for (int64_t si = 0; si < SN; ++si) out.usages.push_back(used[si].item<double>() * 100.0);
    }
    return out;
}

}  // namespace vqvae
}  // namespace varscope
