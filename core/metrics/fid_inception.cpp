#include "core/metrics/fid_inception.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <map>
#include <set>

#include "core/io/checkpoint.h"

namespace varscope {
namespace {

// One BasicConv2d: convolution without bias, batch norm (eps 1e-3), ReLU.
struct ConvSpec {
    int64_t in = 0, out = 0, kh = 1, kw = 1, stride = 1, ph = 0, pw = 0;
};

const std::map<std::string, ConvSpec>& conv_specs() {
    static const std::map<std::string, ConvSpec> specs = [] {
        std::map<std::string, ConvSpec> s;
        auto add = [&](const std::string& name, int64_t in, int64_t out, int64_t kh, int64_t kw,
                       int64_t stride = 1, int64_t ph = 0,
                       int64_t pw = 0) { s[name] = {in, out, kh, kw, stride, ph, pw}; };
        add("Conv2d_1a_3x3", 3, 32, 3, 3, 2);
        add("Conv2d_2a_3x3", 32, 32, 3, 3);
        add("Conv2d_2b_3x3", 32, 64, 3, 3, 1, 1, 1);
        add("Conv2d_3b_1x1", 64, 80, 1, 1);
        add("Conv2d_4a_3x3", 80, 192, 3, 3);
        auto block_a = [&](const std::string& p, int64_t in, int64_t pool) {
            add(p + ".branch1x1", in, 64, 1, 1);
            add(p + ".branch5x5_1", in, 48, 1, 1);
            add(p + ".branch5x5_2", 48, 64, 5, 5, 1, 2, 2);
            add(p + ".branch3x3dbl_1", in, 64, 1, 1);
            add(p + ".branch3x3dbl_2", 64, 96, 3, 3, 1, 1, 1);
            add(p + ".branch3x3dbl_3", 96, 96, 3, 3, 1, 1, 1);
            add(p + ".branch_pool", in, pool, 1, 1);
        };
        block_a("Mixed_5b", 192, 32);
        block_a("Mixed_5c", 256, 64);
        block_a("Mixed_5d", 288, 64);
        add("Mixed_6a.branch3x3", 288, 384, 3, 3, 2);
        add("Mixed_6a.branch3x3dbl_1", 288, 64, 1, 1);
        add("Mixed_6a.branch3x3dbl_2", 64, 96, 3, 3, 1, 1, 1);
        add("Mixed_6a.branch3x3dbl_3", 96, 96, 3, 3, 2);
        auto block_c = [&](const std::string& p, int64_t c7) {
            add(p + ".branch1x1", 768, 192, 1, 1);
            add(p + ".branch7x7_1", 768, c7, 1, 1);
            add(p + ".branch7x7_2", c7, c7, 1, 7, 1, 0, 3);
            add(p + ".branch7x7_3", c7, 192, 7, 1, 1, 3, 0);
            add(p + ".branch7x7dbl_1", 768, c7, 1, 1);
            add(p + ".branch7x7dbl_2", c7, c7, 7, 1, 1, 3, 0);
            add(p + ".branch7x7dbl_3", c7, c7, 1, 7, 1, 0, 3);
            add(p + ".branch7x7dbl_4", c7, c7, 7, 1, 1, 3, 0);
            add(p + ".branch7x7dbl_5", c7, 192, 1, 7, 1, 0, 3);
            add(p + ".branch_pool", 768, 192, 1, 1);
        };
        block_c("Mixed_6b", 128);
        block_c("Mixed_6c", 160);
        block_c("Mixed_6d", 160);
        block_c("Mixed_6e", 192);
        add("Mixed_7a.branch3x3_1", 768, 192, 1, 1);
        add("Mixed_7a.branch3x3_2", 192, 320, 3, 3, 2);
        add("Mixed_7a.branch7x7x3_1", 768, 192, 1, 1);
        add("Mixed_7a.branch7x7x3_2", 192, 192, 1, 7, 1, 0, 3);
        add("Mixed_7a.branch7x7x3_3", 192, 192, 7, 1, 1, 3, 0);
        add("Mixed_7a.branch7x7x3_4", 192, 192, 3, 3, 2);
        auto block_e = [&](const std::string& p, int64_t in) {
            add(p + ".branch1x1", in, 320, 1, 1);
            add(p + ".branch3x3_1", in, 384, 1, 1);
            add(p + ".branch3x3_2a", 384, 384, 1, 3, 1, 0, 1);
            add(p + ".branch3x3_2b", 384, 384, 3, 1, 1, 1, 0);
            add(p + ".branch3x3dbl_1", in, 448, 1, 1);
            add(p + ".branch3x3dbl_2", 448, 384, 3, 3, 1, 1, 1);
            add(p + ".branch3x3dbl_3a", 384, 384, 1, 3, 1, 0, 1);
            add(p + ".branch3x3dbl_3b", 384, 384, 3, 1, 1, 1, 0);
            add(p + ".branch_pool", in, 192, 1, 1);
        };
        block_e("Mixed_7b", 1280);
        block_e("Mixed_7c", 2048);
        return s;
    }();
    return specs;
}

// pytorch-fid's InceptionV3 module holds the same layers as blocks.<i>.<j>.
const std::map<std::string, std::string>& module_block_names() {
    static const std::map<std::string, std::string> names = {
        {"blocks.0.0", "Conv2d_1a_3x3"}, {"blocks.0.1", "Conv2d_2a_3x3"},
        {"blocks.0.2", "Conv2d_2b_3x3"}, {"blocks.1.0", "Conv2d_3b_1x1"},
        {"blocks.1.1", "Conv2d_4a_3x3"}, {"blocks.2.0", "Mixed_5b"},
        {"blocks.2.1", "Mixed_5c"},      {"blocks.2.2", "Mixed_5d"},
        {"blocks.2.3", "Mixed_6a"},      {"blocks.2.4", "Mixed_6b"},
        {"blocks.2.5", "Mixed_6c"},      {"blocks.2.6", "Mixed_6d"},
        {"blocks.2.7", "Mixed_6e"},      {"blocks.3.0", "Mixed_7a"},
        {"blocks.3.1", "Mixed_7b"},      {"blocks.3.2", "Mixed_7c"}};
    return names;
}

std::string canonical_name(std::string name) {
    for (const char* prefix : {"module.", "model."})
        if (name.rfind(prefix, 0) == 0) name = name.substr(std::string(prefix).size());
    if (name.rfind("blocks.", 0) == 0) {
        const size_t second_dot = name.find('.', name.find('.', 7) + 1);
        const std::string block = name.substr(0, second_dot);
        const auto it = module_block_names().find(block);
        if (it != module_block_names().end() && second_dot != std::string::npos)
            return it->second + name.substr(second_dot);
    }
    return name;
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

uint64_t fnv1a64(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t splitmix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// (2u - 1) * scale + offset and u * scale + offset, as documented in the header.
at::Tensor formula_tensor(const std::string& name, const std::vector<int64_t>& shape, bool centred,
                          double scale, double offset) {
    auto t = at::empty(shape, at::kFloat);
    float* p = t.data_ptr<float>();
    const uint64_t seed = fnv1a64(name);
    for (int64_t i = 0; i < t.numel(); ++i) {
        const uint64_t z = splitmix64(seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull);
        const double u = static_cast<double>(z >> 40) / 16777216.0;
        p[i] = static_cast<float>((centred ? 2 * u - 1 : u) * scale + offset);
    }
    return t;
}

[[noreturn]] void fail(const std::string& source, const std::string& what) {
    throw CheckpointError("Inception weights '" + source + "': " + what);
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> inception_tensor_shapes() {
    std::vector<std::pair<std::string, std::vector<int64_t>>> out;
    for (const auto& [name, c] : conv_specs()) {
        out.push_back({name + ".conv.weight", {c.out, c.in, c.kh, c.kw}});
        for (const char* b : {"weight", "bias", "running_mean", "running_var"})
            out.push_back({name + ".bn." + b, {c.out}});
    }
    out.push_back({"fc.weight", {kInceptionLogitsDim, kInceptionPool3Dim}});
    out.push_back({"fc.bias", {kInceptionLogitsDim}});
    return out;
}

StateDict synthetic_inception_weights() {
    StateDict w;
    for (const auto& [name, shape] : inception_tensor_shapes()) {
        at::Tensor t;
        if (ends_with(name, ".conv.weight")) {
            const double fan_in = static_cast<double>(shape[1] * shape[2] * shape[3]);
            t = formula_tensor(name, shape, true, std::sqrt(6.0 / fan_in), 0);
        } else if (ends_with(name, ".bn.weight")) {
            t = formula_tensor(name, shape, true, 0.25, 1);
        } else if (ends_with(name, ".bn.bias")) {
            t = formula_tensor(name, shape, true, 0.25, 0);
        } else if (ends_with(name, ".running_mean")) {
            t = formula_tensor(name, shape, true, 0.125, 0);
        } else if (ends_with(name, ".running_var")) {
            t = formula_tensor(name, shape, false, 0.5, 1);
        } else if (name == "fc.weight") {
            t = formula_tensor(name, shape, true, 0.5, 0);
        } else {
            t = formula_tensor(name, shape, true, 0.125, 0);
        }
        w[name] = t;
    }
    return w;
}

at::Tensor fid_preprocess(const at::Tensor& images) {
    if (!images.defined() || images.dim() != 4 || images.size(1) != 3)
        throw std::invalid_argument(
            "FID Inception: expected RGB images (N, 3, H, W), got " +
            (images.defined() ? c10::str(images.sizes()) : std::string("no tensor")));
    at::Tensor bytes = images;
    if (images.scalar_type() != at::kByte) {
        if (!images.is_floating_point())
            throw std::invalid_argument("FID Inception: images must be uint8 or float in [0, 1]");
        bytes = images.to(at::kFloat).mul(255).round().clamp(0, 255).to(at::kByte);
    }
    // torchvision's ToTensor: uint8 -> float32 / 255; then pytorch-fid's resize and scale.
    auto x = bytes.to(at::kFloat).div(255);
    x = at::upsample_bilinear2d(x, {299, 299}, /*align_corners=*/false);
    return 2 * x - 1;
}

FidInception::FidInception(const StateDict& weights, const std::string& source) {
    std::map<std::string, std::vector<int64_t>> expected;
    for (const auto& [name, shape] : inception_tensor_shapes()) expected[name] = shape;
    for (const auto& [raw, t] : weights) {
        const std::string name = canonical_name(raw);
        if (ends_with(name, ".num_batches_tracked")) continue;
        const auto it = expected.find(name);
        if (it == expected.end())
            fail(source, "unexpected tensor '" + raw +
                             "' (not a layer of pytorch-fid's FID Inception-v3; "
                             "an Inception with aux logits or another network?)");
        if (t.sizes().vec() != it->second)
            fail(source, "tensor '" + raw + "' has shape " + c10::str(t.sizes()) + ", expected " +
                             c10::str(at::IntArrayRef(it->second)));
        if (!t.is_floating_point()) fail(source, "tensor '" + raw + "' is not floating point");
        if (weights_.count(name)) fail(source, "tensor '" + raw + "' given twice");
        weights_[name] = t.to(at::kFloat).contiguous();
    }
    for (const auto& [name, shape] : expected) {
        if (name.rfind("fc.", 0) == 0) continue;  // only IS needs the classifier
        if (!weights_.count(name)) fail(source, "missing tensor '" + name + "'");
    }
    if (weights_.count("fc.weight") != weights_.count("fc.bias"))
        fail(source, "fc.weight and fc.bias come together");
}

FidInception FidInception::load(const std::string& path) {
    return FidInception(load_checkpoint(path), path);
}

void FidInception::to(const at::Device& device) {
    for (auto& [name, t] : weights_) t = t.to(device);
    device_ = device;
}

const at::Tensor& FidInception::w(const std::string& name) const {
    const auto it = weights_.find(name);
    if (it == weights_.end()) throw std::logic_error("FID Inception: no tensor " + name);
    return it->second;
}

at::Tensor FidInception::conv(const std::string& name, const at::Tensor& x) const {
    const ConvSpec& c = conv_specs().at(name);
    auto y = at::conv2d(x, w(name + ".conv.weight"), {}, {c.stride, c.stride}, {c.ph, c.pw});
    y = at::batch_norm(y, w(name + ".bn.weight"), w(name + ".bn.bias"),
                       w(name + ".bn.running_mean"), w(name + ".bn.running_var"),
                       /*training=*/false, 0.1, 1e-3, /*cudnn_enabled=*/true);
    return at::relu(y);
}

InceptionFeatures FidInception::features(const at::Tensor& images) const {
    return features_of_input(fid_preprocess(images.to(device_)));
}

InceptionFeatures FidInception::features_of_input(const at::Tensor& input) const {
    if (input.dim() != 4 || input.size(1) != 3)
        throw std::invalid_argument("FID Inception: input must be (N, 3, H, W)");
    c10::InferenceMode guard;
    // The average pools of FIDInceptionA/C/E_1 leave the padding out of the count (as
    // TensorFlow's graph did); E_2 max-pools.
    auto avg3 = [](const at::Tensor& t) { return at::avg_pool2d(t, 3, 1, 1, false, false); };
    auto x = input.to(device_, at::kFloat);
    x = conv("Conv2d_1a_3x3", x);
    x = conv("Conv2d_2a_3x3", x);
    x = conv("Conv2d_2b_3x3", x);
    x = at::max_pool2d(x, 3, 2);
    x = conv("Conv2d_3b_1x1", x);
    x = conv("Conv2d_4a_3x3", x);
    x = at::max_pool2d(x, 3, 2);
    for (const char* p : {"Mixed_5b", "Mixed_5c", "Mixed_5d"}) {
        const std::string b = p;
        auto b5 = conv(b + ".branch5x5_2", conv(b + ".branch5x5_1", x));
        auto b3 = conv(b + ".branch3x3dbl_3",
                       conv(b + ".branch3x3dbl_2", conv(b + ".branch3x3dbl_1", x)));
        x = at::cat({conv(b + ".branch1x1", x), b5, b3, conv(b + ".branch_pool", avg3(x))}, 1);
    }
    {
        auto b3 = conv("Mixed_6a.branch3x3", x);
        auto bd = conv("Mixed_6a.branch3x3dbl_3",
                       conv("Mixed_6a.branch3x3dbl_2", conv("Mixed_6a.branch3x3dbl_1", x)));
        x = at::cat({b3, bd, at::max_pool2d(x, 3, 2)}, 1);
    }
    at::Tensor spatial;
    for (const char* p : {"Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"}) {
        const std::string b = p;
        auto b1 = conv(b + ".branch1x1", x);
        if (b == "Mixed_6d")  // sFID: NHWC order, as ADM's [..., :7] on TensorFlow's tensor
            spatial = b1.narrow(1, 0, 7).permute({0, 2, 3, 1}).reshape({b1.size(0), -1});
        auto b7 = x;
        for (const char* s : {".branch7x7_1", ".branch7x7_2", ".branch7x7_3"}) b7 = conv(b + s, b7);
        auto bd = x;
        for (const char* s : {".branch7x7dbl_1", ".branch7x7dbl_2", ".branch7x7dbl_3",
                              ".branch7x7dbl_4", ".branch7x7dbl_5"})
            bd = conv(b + s, bd);
        x = at::cat({b1, b7, bd, conv(b + ".branch_pool", avg3(x))}, 1);
    }
    {
        auto b3 = conv("Mixed_7a.branch3x3_2", conv("Mixed_7a.branch3x3_1", x));
        auto b7 = x;
        for (const char* s :
             {".branch7x7x3_1", ".branch7x7x3_2", ".branch7x7x3_3", ".branch7x7x3_4"})
            b7 = conv(std::string("Mixed_7a") + s, b7);
        x = at::cat({b3, b7, at::max_pool2d(x, 3, 2)}, 1);
    }
    for (const char* p : {"Mixed_7b", "Mixed_7c"}) {
        const std::string b = p;
        auto b3 = conv(b + ".branch3x3_1", x);
        b3 = at::cat({conv(b + ".branch3x3_2a", b3), conv(b + ".branch3x3_2b", b3)}, 1);
        auto bd = conv(b + ".branch3x3dbl_2", conv(b + ".branch3x3dbl_1", x));
        bd = at::cat({conv(b + ".branch3x3dbl_3a", bd), conv(b + ".branch3x3dbl_3b", bd)}, 1);
        auto pool = b == "Mixed_7b" ? avg3(x) : at::max_pool2d(x, 3, 1, 1);
        x = at::cat({conv(b + ".branch1x1", x), b3, bd, conv(b + ".branch_pool", pool)}, 1);
    }
    InceptionFeatures f;
    f.pool3 = at::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    if (has_logits()) f.logits = f.pool3.mm(w("fc.weight").t());
    f.spatial = spatial;
    return f;
}

}  // namespace varscope
