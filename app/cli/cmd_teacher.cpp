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
        if (!input.count("labels")) throw std::invalid_argument(*in + ": no 'labels' tensor");
        const auto dev = pipe.device();
        std::vector<at::Tensor> idx;
        for (int64_t si = 0; si < c.num_scales(); ++si) {
            auto it = input.find("tokens." + std::to_string(si));
            if (it == input.end()) throw std::invalid_argument(*in + ": no 'tokens." + std::to_string(si) + "'");
            const int64_t pn = c.patch_nums[si];
            if (it->second.dim() != 2 || it->second.size(1) != pn * pn)
                throw std::invalid_argument(*in + ": 'tokens." + std::to_string(si) + "' must be (B, " + std::to_string(pn * pn) + ")");
            idx.push_back(it->second.to(dev, at::kLong));
        }
        c10::InferenceMode guard;
        auto x = pipe.sampler().vqvae()->idx_to_var_input(idx);
        auto logits = pipe.sampler().transformer()->forward_teacher(input["labels"].to(dev, at::kLong), x, *eager);
        save_safetensors({{"logits", logits.cpu()}, {"x_BLCv", x.to(at::kFloat).cpu()}}, *out);
        std::cerr << "wrote " << *out << " logits " << logits.sizes() << "\n";
        return 0;
    };
}

}  // namespace varscope::cli
