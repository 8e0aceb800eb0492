// The Inception-v3 of the FID literature (issue #34): pytorch-fid's variant (FIDInceptionA..E:
// average pools that leave the padding out of the count, a max pool in the last block), fed as
// pytorch-fid feeds it (uint8 / 255, bilinear resize to 299x299 without corner alignment, 2x - 1),
// with the weights of pytorch-fid's file `pt_inception-2015-12-05-6726825d.pth` (supplied by the
// user; nothing is downloaded). Gives per image the pool3 features (FID, precision/recall), the
// 1008 logits without the fc bias (torch-fidelity's "logits_unbiased", for IS) and the spatial
// features of sFID (ADM's evaluator: "mixed_6/conv", the 1x1 branch of Mixed_6d, first 7 of its
// 192 channels over the 17x17 grid, flattened height, width, channel as TensorFlow lays them out).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/io/state_dict.h"

namespace varscope {

inline constexpr int64_t kInceptionPool3Dim = 2048;
inline constexpr int64_t kInceptionLogitsDim = 1008;
inline constexpr int64_t kInceptionSpatialDim = 7 * 17 * 17;  // 2023

struct InceptionFeatures {
    at::Tensor pool3;    // (N, 2048) float32
    at::Tensor logits;   // (N, 1008) float32; undefined for weights without "fc.weight"
    at::Tensor spatial;  // (N, 2023) float32
};

// Every parameter and buffer the network reads, in torchvision's names ("Mixed_6d.branch1x1.
// conv.weight", "fc.weight", ...) with its shape. "fc.*" is optional (IS needs it).
std::vector<std::pair<std::string, std::vector<int64_t>>> inception_tensor_shapes();

// Weights from a simple formula, identical in C++ and tools/parity/fid_parity.py (so the parity
// fixtures need no 95 MB weight file): value i of tensor `name` comes from
// z = splitmix64(fnv1a64(name) + i * 0x9E3779B97F4A7C15), u = (z >> 40) / 2^24 in [0, 1):
// conv weights (2u - 1) * sqrt(6 / fan_in), BN weight 1 + (2u - 1) / 4, BN bias (2u - 1) / 4,
// running mean (2u - 1) / 8, running variance 1 + u / 2, fc weight (2u - 1) / 2, fc bias
// (2u - 1) / 8. Arithmetic in double, rounded once to float32.
StateDict synthetic_inception_weights();

// uint8 (N, 3, H, W) or float in [0, 1] -> what pytorch-fid's InceptionV3 feeds its first block:
// float32 (N, 3, 299, 299) in [-1, 1]. Float input is quantised to uint8 first (round half
// to even, as torch.round; clamped), as an image written to PNG and read by pytorch-fid would be.
at::Tensor fid_preprocess(const at::Tensor& images);

class FidInception {
  public:
    // Checks that every tensor is there with its shape (CheckpointError naming `source` and the
    // tensor). Accepts torchvision's names, pytorch-fid's InceptionV3 module names
    // ("blocks.2.6.branch1x1.conv.weight", no fc) and a "module." / "model." prefix.
    FidInception(const StateDict& weights, const std::string& source);
    // A .pth (pytorch-fid's file or a torch.save'd state dict) or .safetensors file.
    static FidInception load(const std::string& path);

    bool has_logits() const { return weights_.count("fc.weight") > 0; }
    const at::Device& device() const { return device_; }
    void to(const at::Device& device);

    // Images as fid_preprocess takes them, on any device (moved to the network's).
    InceptionFeatures features(const at::Tensor& images) const;
    // Already preprocessed input (N, 3, 299, 299) in [-1, 1].
    InceptionFeatures features_of_input(const at::Tensor& input) const;

  private:
    at::Tensor conv(const std::string& name, const at::Tensor& x) const;
    const at::Tensor& w(const std::string& name) const;

    StateDict weights_;
    at::Device device_ = at::kCPU;
};

}  // namespace varscope
