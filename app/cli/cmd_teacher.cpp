// `varscope-cli teacher-forward`: the teacher-forced forward pass of any model family on given
// inputs (parity checks against the official code, training diagnostics): VAR reads 'labels'
// and 'tokens.<si>' and writes 'logits' (B, L, V) and 'x_BLCv'; MAR reads the encoder/decoder
// and DiffLoss inputs (core/runner/mar_runner.cpp) and writes their outputs.
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/mar_cli_common.h"  // check_output_file
#include "app/cli/run_args.h"
#include "core/io/checkpoint.h"

namespace varscope::cli {

Command add_teacher_forward(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "teacher-forward",
        "run the teacher-forced forward pass on the tensors of a .safetensors file (VAR: "
        "'labels' and 'tokens.<si>' -> 'logits' (B, L, V) and 'x_BLCv')");
    auto model = std::make_shared<ModelArgs>();
    auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
    auto eager = std::make_shared<bool>(false);
    model->add_to(*cmd, Family::Var);
    cmd->add_option("--input", *in, "safetensors with the inputs")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--output", *out, "safetensors to write")->required();
    cmd->add_flag("--eager", *eager, "eager attention instead of SDPA");
    return [model, in, out, eager]() {
        check_output_file(*out, true, "--output");
        const auto runner = model->build();
        const StateDict result = runner->teacher_forward(load_checkpoint(*in), *in, *eager);
        save_safetensors(result, *out);
        std::cerr << "wrote " << *out << " (" << result.size() << " tensors)\n";
        return 0;
    };
}

}  // namespace varscope::cli
