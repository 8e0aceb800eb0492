#include "core/models/var_teacher_input.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace varscope {

VarTeacherInput check_var_teacher_input(const StateDict& input, const VarConfig& c,
                                        const std::string& path) {
    const auto bad = [&](const std::string& what) {
        return std::invalid_argument(path + ": " + what);
    };
    // Integer tensors with values in range: out-of-range ids reached LibTorch's "index out of
    // range in self", and float ids were truncated without a word.
    const auto check_ids = [&](const std::string& name, const at::Tensor& t, int64_t lo,
                               int64_t hi) {
        if (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()) ||
            t.scalar_type() == at::kBool)
            throw bad("'" + name + "' must hold integers, got " +
                      std::string(c10::toString(t.scalar_type())));
        if (t.numel() > 0 && (t.min().item<int64_t>() < lo || t.max().item<int64_t>() > hi))
            throw bad("'" + name + "' values must be in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    };
    const auto labels_it = input.find("labels");
    if (labels_it == input.end()) throw bad("no 'labels' tensor");
    VarTeacherInput out;
    out.labels = labels_it->second;
    if (out.labels.dim() != 1 || out.labels.size(0) < 1)
        throw bad("'labels' must be (B) with B >= 1, got " + c10::str(out.labels.sizes()));
    // -1 or num_classes (the official code's index): the unconditional embedding.
    check_ids("labels", out.labels, -1, c.num_classes);
    out.labels = out.labels.to(at::kLong);
    const int64_t B = out.labels.size(0);
    for (int64_t si = 0; si < c.num_scales(); ++si) {
        const std::string name = "tokens." + std::to_string(si);
        auto it = input.find(name);
        if (it == input.end()) throw bad("no '" + name + "'");
        const int64_t pn = c.patch_nums[si];
        if (it->second.dim() != 2 || it->second.size(0) != B || it->second.size(1) != pn * pn)
            throw bad("'" + name + "' must be (" + std::to_string(B) + ", " +
                      std::to_string(pn * pn) + "), got " + c10::str(it->second.sizes()));
        check_ids(name, it->second, 0, c.vocab_size - 1);
        out.tokens.push_back(it->second.to(at::kLong));
    }
    if (input.count("tokens." + std::to_string(c.num_scales())))
        throw bad("more token maps than the model's " + std::to_string(c.num_scales()) + " scales");
    return out;
}

}  // namespace varscope
