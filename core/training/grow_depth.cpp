#include "core/training/grow_depth.h"

#include <ATen/ATen.h>

#include <set>
#include <stdexcept>

namespace varscope {

namespace {

// "blocks.<j>.<rest>" -> j and rest; false for other names.
bool split_block_name(const std::string& name, int64_t& j, std::string& rest) {
    if (name.rfind("blocks.", 0) != 0) return false;
    const auto dot = name.find('.', 7);
    if (dot == std::string::npos || dot == 7) return false;
    const std::string index = name.substr(7, dot - 7);
    if (index.find_first_not_of("0123456789") != std::string::npos) return false;
    j = std::stoll(index);
    rest = name.substr(dot + 1);
    return true;
}

}  // namespace

const GrowSpec& var_grow_spec() {
    static const GrowSpec s{
        "attn.mat_qkv.weight",
        {"attn.proj.weight", "attn.proj.bias", "ffn.fc2.weight", "ffn.fc2.bias"}};
    return s;
}

const GrowSpec& infinity_grow_spec() {
    static const GrowSpec s{"sa.mat_qkv.weight",
                            {"sa.proj.weight", "sa.proj.bias", "ca.proj.weight", "ca.proj.bias",
                             "ffn.fc2.weight", "ffn.fc2.bias"}};
    return s;
}

int64_t count_blocks(const StateDict& dict, const std::string& marker) {
    int64_t d = 0;
    while (dict.count("blocks." + std::to_string(d) + "." + marker)) ++d;
    return d;
}

StateDict grown_state_dict(const StateDict& own, int64_t depth, const StateDict& small,
                           const GrowSpec& spec, const std::string& what, int64_t* small_depth) {
    const int64_t d = count_blocks(small, spec.block_marker);
    if (d == 0) throw std::invalid_argument(what + ": no blocks to grow from");
    if (d > depth)
        throw std::invalid_argument(what + " has " + std::to_string(d) +
                                    " blocks, more than the model's " + std::to_string(depth));
    std::vector<int64_t> target(d);
    for (int64_t i = 0; i < d; ++i) target[i] = i * depth / d;
    const std::set<int64_t> kept(target.begin(), target.end());
    const std::set<std::string> zeroed(spec.zeroed.begin(), spec.zeroed.end());

    StateDict merged;
    for (const auto& [name, t] : own) {
        int64_t j = 0;
        std::string rest;
        if (!split_block_name(name, j, rest) || kept.count(j)) continue;
        at::Tensor v = t.detach().clone();
        if (zeroed.count(rest)) v.zero_();
        merged[name] = v;
    }
    for (const auto& [name, t] : small) {
        int64_t i = 0;
        std::string rest;
        if (!split_block_name(name, i, rest)) {
            merged[name] = t;
            continue;
        }
        if (i >= d)
            throw std::invalid_argument(what + ": block numbering has gaps ('" + name + "')");
        merged["blocks." + std::to_string(target[i]) + "." + rest] = t;
    }
    if (small_depth) *small_depth = d;
    return merged;
}

}  // namespace varscope
