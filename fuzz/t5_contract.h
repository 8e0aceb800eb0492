// fuzz_t5's check as a plain function, for the harness (fuzz/fuzz_t5.cpp) and the regression
// test (tests/fuzz_regressions_test.cpp replays tests/fixtures/fuzz/fuzz_t5/). Apart from
// reader_contracts.h: it needs the T5 encoder and SentencePiece, which the other harnesses'
// build leaves out.
#pragma once

#include <string>

namespace varscope::fuzz {

// The input's first byte picks the role, the rest is its content:
//   0: spiece.model bytes -> SentencePieceTokenizer (then a few encodes): TokenizerError only
//   1: config.json -> T5EncoderConfig::from_json: std::invalid_argument only
//   2: model.safetensors.index.json written into `folder` (no shards beside it) ->
//      load_t5_encoder_tensors: CheckpointError / std::invalid_argument only
//   3: prompt_vocabulary.json -> PromptVocabulary::from_json (then a few filters):
//      std::invalid_argument only
//   4: a prompt (any bytes) -> a fixed vocabulary's filter: nothing may escape, and the result
//      must hold only known words (or be the prompt as given)
// Throws ContractBroken (reader_contracts.h) when anything else escapes.
void check_t5(const std::string& input, const std::string& folder);

}  // namespace varscope::fuzz
