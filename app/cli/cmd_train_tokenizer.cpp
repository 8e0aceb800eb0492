// `varscope-cli train tokenizer`: a SentencePiece model (T5 layout) trained on the training
// phrasings of a packed emoji file's captions; reports how it covers the held-out phrasings.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "app/cli/commands.h"
#include "app/cli/io_paths.h"
#include "app/cli/option_checks.h"
#include "core/data/emoji_captions.h"
#include "core/io/atomic_file.h"
#include "core/text/caption_tokenizer.h"

namespace fs = std::filesystem;

namespace varscope::cli {
namespace {

struct TokenizerArgs {
    std::string data, out;
    int vocab = 1000;
    bool force = false;
};

int run_train_tokenizer(const TokenizerArgs& a) {
    check_not_an_input(a.out, "--out");
    const fs::path out(a.out);
    const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
    if (!fs::is_directory(dir))
        throw std::invalid_argument("--out: folder '" + dir.string() + "' does not exist");
    if (fs::exists(out) && !a.force)
        throw std::invalid_argument("'" + a.out + "' exists; pass --force to overwrite it");

    const EmojiCaptions captions = load_emoji_captions(a.data);
    SentencePieceTrainOptions options;
    options.vocab_size = a.vocab;
    const TrainedCaptionTokenizer t = train_caption_tokenizer(captions, options);
    write_file_atomic(a.out, t.model);
    nlohmann::json report = t.stats.to_json();
    report["model"] = a.out;
    report["model_bytes"] = t.model.size();
    report["vocab"] = a.vocab;
    std::cout << report.dump(2) << "\n";
    return 0;
}

}  // namespace

TrainSubcommand add_train_tokenizer(CLI::App& train) {
    auto a = std::make_shared<TokenizerArgs>();
    auto* cmd = train.add_subcommand(
        "tokenizer",
        "train a SentencePiece tokenizer (T5 ids) on the training captions of a packed file");
    cmd->add_option("--data", a->data, "packed data set with captions (varscope-cli pack-emoji)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--out", a->out, "output spiece.model")->required();
    cmd->add_option("--vocab", a->vocab, "pieces in the model, <pad> </s> <unk> included")
        ->check(whole_number_at_least(4))
        ->capture_default_str();
    cmd->add_flag("--force", a->force, "overwrite an existing --out");
    return {cmd, [a]() { return run_train_tokenizer(*a); }};
}

}  // namespace varscope::cli
