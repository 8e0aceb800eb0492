// `varscope-cli teacher-forward`: logits for given token maps (parity checks against the
// official code, and training diagnostics).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/mar_cli_common.h"  // check_output_file
#include "app/cli/model_options.h"
#include "app/cli/teacher_input.h"
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
        check_output_file(*out, true, "--output");
        VarPipeline pipe = model->build();
        const auto& c = pipe.var_config();
        const TeacherInput input = check_teacher_input(load_checkpoint(*in), c, *in);
        const auto dev = pipe.device();
        std::vector<at::Tensor> idx;
        for (const auto& t : input.tokens) idx.push_back(t.to(dev));
        c10::InferenceMode guard;
        auto x = pipe.sampler().vqvae()->idx_to_var_input(idx);
        auto logits =
            pipe.sampler().transformer()->forward_teacher(input.labels.to(dev), x, *eager);
        save_safetensors({{"logits", logits.cpu()}, {"x_BLCv", x.to(at::kFloat).cpu()}}, *out);
        std::cerr << "wrote " << *out << " logits " << logits.sizes() << "\n";
        return 0;
    };
}

}  // namespace varscope::cli
