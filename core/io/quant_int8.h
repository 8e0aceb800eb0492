// Weight-only int8 storage for shipped checkpoints: 2-D weights stored as int8 with one
// symmetric scale per output row, dequantised when the file is read (load_safetensors), so
// models only ever see float tensors under their official names.
//
// File layout (safetensors): a quantised weight W (R x C) is stored as
//   "<name>"            int8 (R, C)   q = round(W / s), |q| <= 127
//   "<name>.qscale"     float32 (R)   s = max_j |W_ij| / 127 (> 0, finite)
// and listed in the metadata key "varscope.quant", a JSON object
//   {"scheme": "int8-rowwise-symmetric", "scale_suffix": ".qscale", "dtype": "float16",
//    "tensors": ["<name>", ...]}
// where "dtype" is what the dequantised tensors become (the file's other float tensors' type).
// Reading dequantises W = q * s[:, None] and drops the scale tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <utility>

#include "core/io/state_dict.h"

namespace varscope {

inline constexpr const char* kQuantMetadataKey = "varscope.quant";
inline constexpr const char* kQuantScheme = "int8-rowwise-symmetric";
inline constexpr const char* kQuantScaleSuffix = ".qscale";

// (q int8 (R, C), scale float32 (R)) for a 2-D float tensor. Rows of zeros get scale 1.
// Element error: |W - q*s| <= s / 2 = max|row| / 254.
std::pair<at::Tensor, at::Tensor> quantize_int8_rowwise(const at::Tensor& w);
at::Tensor dequantize_int8_rowwise(const at::Tensor& q, const at::Tensor& scale,
                                   at::ScalarType dtype);

// Quantises the tensors of `sd` that `select` accepts (each must be a 2-D float tensor) and
// returns the file's tensors; `metadata_json` receives the "varscope.quant" value. `dtype` is
// recorded as the type the loader restores.
StateDict quantize_state_dict_int8(
    const StateDict& sd, const std::function<bool(const std::string&, const at::Tensor&)>& select,
    at::ScalarType dtype, std::string& metadata_json);

// The default choice for shipped transformer weights: 2-D float tensors named "*.weight" with at
// least `min_numel` elements (linear layers and embeddings; biases, norms, positions stay float).
bool is_large_2d_weight(const std::string& name, const at::Tensor& t, int64_t min_numel = 16384);

// Applies "varscope.quant" (if `metadata` has it) to tensors read from `path`: replaces each
// listed int8 tensor by its float dequantisation and removes the scales. Throws CheckpointError
// naming the file and tensor for a malformed description, a missing or mis-shaped tensor or
// scale, non-finite or non-positive scales, or scale tensors that no entry lists.
void dequantize_state_dict_in_place(StateDict& sd,
                                    const std::map<std::string, std::string>& metadata,
                                    const std::string& path);

}  // namespace varscope
