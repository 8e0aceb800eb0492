// `varscope-cli train tokenizer`: a SentencePiece model (T5 layout) trained on the training
// phrasings of a packed emoji file's captions; reports how it covers the held-out phrasings.
// --vocabulary-out writes the words of the same phrasings (prompt_vocabulary.json, read by the
// T5 text encoder beside spiece.model: core/text/prompt_vocabulary.h), with or without --out.
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "app/cli/commands.h"
#include "app/cli/mar_cli_common.h"  // check_output_file, check_distinct_outputs
#include "app/cli/option_checks.h"
#include "core/data/emoji_captions.h"
#include "core/io/atomic_file.h"
#include "core/text/caption_tokenizer.h"
#include "core/text/prompt_vocabulary.h"

namespace varscope::cli {
namespace {

struct TokenizerArgs {
    std::string data, out, vocabulary_out;
    int vocab = 1000;
    bool force = false;
};

int run_train_tokenizer(const TokenizerArgs& a) {
    if (a.out.empty() && a.vocabulary_out.empty())
        throw std::invalid_argument("nothing to write: give --out, --vocabulary-out or both");
    check_output_file(a.out, a.force, "--out");  // each skips an empty path
    check_output_file(a.vocabulary_out, a.force, "--vocabulary-out");
    check_distinct_outputs({{"--out", a.out}, {"--vocabulary-out", a.vocabulary_out}});

    const EmojiCaptions captions = load_emoji_captions(a.data);
    nlohmann::json report;
    if (!a.vocabulary_out.empty()) {
        const auto vocabulary = PromptVocabulary::from_phrasings(training_sentences(captions));
        write_file_atomic(a.vocabulary_out, vocabulary.to_json().dump(1) + "\n");
        report["vocabulary"] = a.vocabulary_out;
        report["vocabulary_words"] = vocabulary.size();
    }
    if (a.out.empty()) {
        std::cout << report.dump(2) << "\n";
        return 0;
    }
    SentencePieceTrainOptions options;
    options.vocab_size = a.vocab;
    const TrainedCaptionTokenizer t = train_caption_tokenizer(captions, options);
    write_file_atomic(a.out, t.model);
    report.update(t.stats.to_json());
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
    cmd->add_option("--out", a->out, "output spiece.model");
    cmd->add_option("--vocabulary-out", a->vocabulary_out,
                    "also (or only) write the training phrasings' words: prompt_vocabulary.json, "
                    "beside spiece.model in a T5 folder");
    cmd->add_option("--vocab", a->vocab, "pieces in the model, <pad> </s> <unk> included")
        ->check(whole_number_at_least(4))
        ->capture_default_str();
    cmd->add_flag("--force", a->force, "overwrite an existing --out");
    return {cmd, [a]() { return run_train_tokenizer(*a); }};
}

}  // namespace varscope::cli
