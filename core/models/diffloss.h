// MAR's DiffLoss head: SimpleMLPAdaLN, a residual MLP whose blocks are modulated (AdaLN) by the
// sum of a sinusoidal timestep embedding and the transformer's condition vector z. It predicts
// the noise (first half of its output) and the interpolation of the log variance (second half)
// of a Gaussian diffusion over one token's latent. Names follow the official state dict
// ("diffloss.net.<...>" inside the MAR model).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <vector>

namespace varscope {

// A LayerNorm module applied through its tensors (the module's forward is not const).
at::Tensor apply_layer_norm(const torch::nn::LayerNorm& ln, const at::Tensor& x);

// Sinusoidal features of (fractional) timesteps: [cos(t f_i), sin(t f_i)], f_i = 10000^(-i/half).
at::Tensor timestep_features(const at::Tensor& t, int64_t dim, double max_period = 10000.0);

class TimestepEmbedderImpl : public torch::nn::Module {
  public:
    explicit TimestepEmbedderImpl(int64_t hidden, int64_t frequency_dim = 256);
    at::Tensor forward(const at::Tensor& t) const;  // mlp(features(t)): (N, hidden)
    torch::nn::Sequential mlp{nullptr};             // mlp.0 Linear, mlp.1 SiLU, mlp.2 Linear

  private:
    torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
    int64_t frequency_dim_;
};
TORCH_MODULE(TimestepEmbedder);

// The AdaLN modulations of every block (shift, 1 + scale, gate) and of the final layer (shift,
// 1 + scale) for given conditions y: they depend on y only, so a sampling loop can compute them
// for all its timesteps at once (one weight pass) instead of once per step.
// A block's entries may be undefined where a step needs less (ModulationNeed).
struct DiffModulation {
    std::vector<at::Tensor> shift, scale1, gate;  // per block, (R, W) each
    at::Tensor final_shift, final_scale1;
    DiffModulation rows(int64_t start, int64_t count) const;  // views of rows [start, +count)
};

// What a diffusion step needs of a block's modulation: LazyMAR's head MLP cache replays some
// blocks from a kept output change (None) or a kept MLP term times this step's gate (Gate).
enum class ModulationNeed { None, Gate, All };

class DiffResBlockImpl : public torch::nn::Module {
  public:
    explicit DiffResBlockImpl(int64_t channels);
    at::Tensor forward(const at::Tensor& x,
                       const at::Tensor& y) const;  // x + gate * mlp(mod(ln x))
    // (shift, 1 + scale, gate) for conditions y.
    std::vector<at::Tensor> modulation(const at::Tensor& y) const;
    // ... from silu(y): all three, or {undefined, undefined, gate} for Gate (rows of the same
    // weight: the same math at a third of the FLOPs), or nothing for None.
    std::vector<at::Tensor> modulation_from_silu(const at::Tensor& silu_y,
                                                 ModulationNeed need) const;
    at::Tensor forward_modulated(const at::Tensor& x, const at::Tensor& shift,
                                 const at::Tensor& scale1, const at::Tensor& gate) const;
    // The residual branch before its gate, mlp(mod(ln x)): forward_modulated is
    // x + gate * mlp_modulated (LazyMAR's head MLP cache keeps this term across steps).
    at::Tensor mlp_modulated(const at::Tensor& x, const at::Tensor& shift,
                             const at::Tensor& scale1) const;
    torch::nn::LayerNorm in_ln{nullptr};
    torch::nn::Sequential mlp{nullptr};                    // 0 Linear, 1 SiLU, 2 Linear
    torch::nn::Sequential adaLN_modulation{nullptr};       // 0 SiLU, 1 Linear(C, 3C)
    const torch::nn::Linear& fc1() const { return fc1_; }  // mlp.0 (for fused kernels)
    const torch::nn::Linear& fc2() const { return fc2_; }  // mlp.2

  private:
    torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, ada_{nullptr};
    int64_t channels_;
};
TORCH_MODULE(DiffResBlock);

class DiffFinalLayerImpl : public torch::nn::Module {
  public:
    DiffFinalLayerImpl(int64_t channels, int64_t out_channels);
    at::Tensor forward(const at::Tensor& x, const at::Tensor& y) const;
    std::vector<at::Tensor> modulation(const at::Tensor& y) const;  // (shift, 1 + scale)
    std::vector<at::Tensor> modulation_from_silu(const at::Tensor& silu_y) const;
    at::Tensor forward_modulated(const at::Tensor& x, const at::Tensor& shift,
                                 const at::Tensor& scale1) const;
    torch::nn::Linear linear{nullptr};
    torch::nn::Sequential adaLN_modulation{nullptr};  // 0 SiLU, 1 Linear(C, 2C)

  private:
    torch::nn::Linear ada_{nullptr};
    int64_t channels_;
};
TORCH_MODULE(DiffFinalLayer);

class SimpleMlpAdaLNImpl : public torch::nn::Module {
  public:
    SimpleMlpAdaLNImpl(int64_t in_channels, int64_t width, int64_t out_channels, int64_t z_channels,
                       int64_t depth);
    // x (N, in), t (N) timesteps of the original 1000-step process, c (N, z): (N, out).
    at::Tensor forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& c) const;
    // The condition y = time_embed(t) + cond_embed(c), split out so a loop can embed the
    // condition once and the timestep per step.
    at::Tensor embed_condition(const at::Tensor& c) const;
    at::Tensor forward_embedded(const at::Tensor& x, const at::Tensor& t_emb,
                                const at::Tensor& c_emb) const;
    // The modulations for y = t_emb + c_emb (rows of y), and the network given them (rows of
    // x and m match): forward_embedded(x, t, c) == forward_modulated(x, modulations(t + c)).
    DiffModulation modulations(const at::Tensor& y) const;
    // ... only what a step needs (per block; the final layer's always): needs.size() == depth.
    DiffModulation modulations(const at::Tensor& y, const std::vector<ModulationNeed>& needs) const;
    at::Tensor forward_modulated(const at::Tensor& x, const DiffModulation& m) const;
    int64_t width() const;
    int64_t depth() const { return static_cast<int64_t>(blocks_.size()); }
    const DiffResBlockImpl& block(int64_t i) const { return *blocks_.at(static_cast<size_t>(i)); }

    TimestepEmbedder time_embed{nullptr};
    torch::nn::Linear cond_embed{nullptr}, input_proj{nullptr};
    torch::nn::ModuleList res_blocks{nullptr};
    DiffFinalLayer final_layer{nullptr};
    int64_t in_channels() const { return in_channels_; }

  private:
    std::vector<DiffResBlock> blocks_;
    int64_t in_channels_;
};
TORCH_MODULE(SimpleMlpAdaLN);

// The module registered as "diffloss" in MAR; it only holds the network (the diffusion
// schedules live in core/sampling/gaussian_diffusion.h).
class DiffLossImpl : public torch::nn::Module {
  public:
    DiffLossImpl(int64_t target_channels, int64_t z_channels, int64_t depth, int64_t width);
    SimpleMlpAdaLN net{nullptr};
};
TORCH_MODULE(DiffLoss);

}  // namespace varscope
