// `varscope-cli teacher-forward`: logits for given token maps (parity checks against the
// official code, and training diagnostics).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/model_options.h"
#include "core/io/checkpoint.h"

namespace varscope::cli {

Runner add_teacher_forward(CLI::App& app) {
    auto* cmd = app.add_subcommand("teacher-forward",
        "run the teacher-forced forward pass: reads 'labels' and 'tokens.<si>' from a "
        ".safetensors file, writes 'logits' (B, L, V) and 'x_BLCv'");
    auto model = std::make_shared<ModelOptions>();
    auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
    auto eager = std::make_shared<bool>(false);
    model->add_to(*cmd);
    cmd->add_option("--input", *in, "safetensors with labels and tokens.<si>")->required()->check(CLI::ExistingFile);
    cmd->add_option("--output", *out, "safetensors to write")->required();
    cmd->add_flag("--eager", *eager, "eager attention instead of SDPA");
    return [model, in, out, eager]() {
        VarPipeline pipe = model->build();
        const auto& c = pipe.var_config();
        StateDict input = load_checkpoint(*in);
        const auto bad = [&](const std::string& what) {
            return std::invalid_argument(*in + ": " + what);
        };
        // Integer tensors with values in range: out-of-range ids reached LibTorch's "index out of
        // range in self", and float ids were truncated without a word.
        const auto check_ids = [&](const std::string& name, const at::Tensor& t, int64_t lo,
                                   int64_t hi) {
            if (at::isFloatingType(t.scalar_type()) || t.scalar_type() == at::kBool)
                throw bad("'" + name + "' must hold integers, got " +
                          std::string(c10::toString(t.scalar_type())));
            if (t.numel() > 0 && (t.min().item<int64_t>() < lo || t.max().item<int64_t>() > hi))
                throw bad("'" + name + "' values must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
        };
        if (!input.count("labels")) throw bad("no 'labels' tensor");
        const at::Tensor labels = input["labels"];
        if (labels.dim() != 1 || labels.size(0) < 1)
            throw bad("'labels' must be (B) with B >= 1, got " + c10::str(labels.sizes()));
        // -1 or num_classes (the official code's index): the unconditional embedding.
        check_ids("labels", labels, -1, c.num_classes);
        const int64_t B = labels.size(0);
        const auto dev = pipe.device();
        std::vector<at::Tensor> idx;
        for (int64_t si = 0; si < c.num_scales(); ++si) {
            const std::string name = "tokens." + std::to_string(si);
            auto it = input.find(name);
            if (it == input.end()) throw bad("no '" + name + "'");
            const int64_t pn = c.patch_nums[si];
            if (it->second.dim() != 2 || it->second.size(0) != B || it->second.size(1) != pn * pn)
                throw bad("'" + name + "' must be (" + std::to_string(B) + ", " +
                          std::to_string(pn * pn) + "), got " + c10::str(it->second.sizes()));
            check_ids(name, it->second, 0, c.vocab_size - 1);
            idx.push_back(it->second.to(dev, at::kLong));
        }
        if (input.count("tokens." + std::to_string(c.num_scales())))
            throw bad("more token maps than the model's " + std::to_string(c.num_scales()) +
                      " scales");
        c10::InferenceMode guard;
        auto x = pipe.sampler().vqvae()->idx_to_var_input(idx);
        auto logits =
            pipe.sampler().transformer()->forward_teacher(labels.to(dev, at::kLong), x, *eager);
        save_safetensors({{"logits", logits.cpu()}, {"x_BLCv", x.to(at::kFloat).cpu()}}, *out);
        std::cerr << "wrote " << *out << " logits " << logits.sizes() << "\n";
        return 0;
    };
}

}  // namespace varscope::cli
