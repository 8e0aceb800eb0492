#include "core/io/quant_int8.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "core/io/checkpoint_internal.h"
#include "core/io/json_read.h"

namespace varscope {

namespace {

const std::vector<std::pair<std::string, at::ScalarType>>& dtype_names() {
    static const std::vector<std::pair<std::string, at::ScalarType>> n = {
        {"float16", at::kHalf}, {"bfloat16", at::kBFloat16}, {"float32", at::kFloat}};
    return n;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::pair<at::Tensor, at::Tensor> quantize_int8_rowwise(const at::Tensor& w) {
    if (w.dim() != 2 || !w.is_floating_point())
        throw std::invalid_argument("quantize_int8_rowwise: expected a 2-D float tensor");
    auto x = w.detach().to(at::kCPU, at::kFloat);
    auto amax = x.abs().amax(1);
    // An all-zero row has no range; any positive scale reproduces it exactly.
    auto scale = at::where(amax.gt(0), amax / 127.0, at::ones_like(amax));
    auto q = (x / scale.unsqueeze(1)).round().clamp(-127, 127).to(at::kChar);
    return {q, scale.contiguous()};
}

at::Tensor dequantize_int8_rowwise(const at::Tensor& q, const at::Tensor& scale,
                                   at::ScalarType dtype) {
    return (q.to(at::kFloat) * scale.to(at::kFloat).unsqueeze(1)).to(dtype);
}

bool is_large_2d_weight(const std::string& name, const at::Tensor& t, int64_t min_numel) {
    return t.is_floating_point() && t.dim() == 2 && t.numel() >= min_numel &&
           ends_with(name, ".weight");
}

StateDict quantize_state_dict_int8(
    const StateDict& sd, const std::function<bool(const std::string&, const at::Tensor&)>& select,
    at::ScalarType dtype, std::string& metadata_json) {
    std::string dtype_name;
    for (const auto& [n, t] : dtype_names())
        if (t == dtype) dtype_name = n;
    if (dtype_name.empty())
        throw std::invalid_argument("quantize_state_dict_int8: unsupported restore dtype");
    StateDict out;
    nlohmann::json names = nlohmann::json::array();
    for (const auto& [name, t] : sd) {
        if (!select(name, t)) {
            out[name] = t;
            continue;
        }
        if (sd.count(name + kQuantScaleSuffix))
            throw std::invalid_argument("quantize_state_dict_int8: '" + name + kQuantScaleSuffix +
                                        "' already exists");
        auto [q, s] = quantize_int8_rowwise(t);
        out[name] = q;
        out[name + kQuantScaleSuffix] = s;
        names.push_back(name);
    }
    metadata_json = nlohmann::json{
        {"scheme", kQuantScheme},
        {"scale_suffix", kQuantScaleSuffix},
        {"dtype", dtype_name},
        {"tensors",
         names}}.dump();
    return out;
}

void dequantize_state_dict_in_place(StateDict& sd,
                                    const std::map<std::string, std::string>& metadata,
                                    const std::string& path) {
    auto it = metadata.find(kQuantMetadataKey);
    if (it == metadata.end()) return;
    const std::string key = kQuantMetadataKey;
    auto fail = [&](const std::string& what) { detail::checkpoint_fail(path, key + ": " + what); };
    nlohmann::json j;
    try {
        j = parse_json(it->second, "the value");
    } catch (const JsonReadError& e) {
        fail(std::string("not a JSON object (") + e.what() + ")");
    }
    if (!j.is_object()) fail("not a JSON object");
    if (j.value("scheme", "") != kQuantScheme)
        fail("unsupported scheme '" + j.value("scheme", "") + "' (expected '" + kQuantScheme +
             "')");
    if (!j.contains("tensors") || !j["tensors"].is_array())
        fail("'tensors' must be a list of names");
    const std::string suffix = j.value("scale_suffix", "");
    if (suffix.empty()) fail("'scale_suffix' is missing");
    at::ScalarType dtype = at::kFloat;
    bool known = false;
    for (const auto& [n, t] : dtype_names())
        if (n == j.value("dtype", "")) dtype = t, known = true;
    if (!known) fail("'dtype' must be float16, bfloat16 or float32");

    std::set<std::string> scales;
    for (const auto& v : j["tensors"]) {
        if (!v.is_string()) fail("'tensors' must be a list of names");
        const std::string name = v.get<std::string>();
        const std::string sname = name + suffix;
        auto w = sd.find(name);
        auto s = sd.find(sname);
        if (w == sd.end()) fail("listed tensor '" + name + "' is not in the file");
        if (s == sd.end()) fail("tensor '" + name + "' has no scale tensor '" + sname + "'");
        const at::Tensor& q = w->second;
        const at::Tensor& sc = s->second;
        if (q.scalar_type() != at::kChar || q.dim() != 2)
            fail("tensor '" + name + "' must be a 2-D int8 tensor");
        if (!sc.is_floating_point() || sc.dim() != 1 || sc.size(0) != q.size(0))
            fail("scale '" + sname + "' must be a float vector of " + std::to_string(q.size(0)) +
                 " entries (one per row of '" + name + "')");
        const auto sf = sc.to(at::kFloat);
        if (!sf.isfinite().all().item<bool>() || !sf.gt(0).all().item<bool>())
            fail("scale '" + sname + "' holds non-finite or non-positive values");
        scales.insert(sname);
    }
    // Scales nobody lists would otherwise reach the model as unexpected tensors.
    for (const auto& [name, t] : sd)
        if (ends_with(name, suffix) && !scales.count(name))
            fail("scale tensor '" + name + "' belongs to no listed tensor");
    for (const auto& v : j["tensors"]) {
        const std::string name = v.get<std::string>();
        sd[name] = dequantize_int8_rowwise(sd[name], sd[name + suffix], dtype);
    }
    for (const auto& s : scales) sd.erase(s);
}

}  // namespace varscope
