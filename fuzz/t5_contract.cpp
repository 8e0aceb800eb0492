#include "fuzz/t5_contract.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/models/t5_encoder.h"
#include "core/text/prompt_vocabulary.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "fuzz/reader_contracts.h"

namespace varscope::fuzz {

void check_t5(const std::string& input, const std::string& folder) {
    if (input.empty()) return;
    const std::string body = input.substr(1);
    try {
        // % 5: roles 0-2 keep the bytes of the seeds and fixtures written before 3 and 4 existed.
        switch (static_cast<unsigned char>(input[0]) % 5) {
            case 0: {
                const auto tok = SentencePieceTokenizer::from_bytes(body, "fuzz");
                for (const char* p :
                     {"", "a cat </s> <extra_id_3>", "\xf0\x9f\x98\x80 \xe4\xb8\x80"})
                    (void)tok.encode_batch({p, "x"});
                break;
            }
            case 1:
                (void)T5EncoderConfig::from_json(parse_json(body, "fuzz"), "fuzz");
                break;
            case 3: {
                const auto v = PromptVocabulary::from_json(parse_json(body, "fuzz"), "fuzz");
                for (const char* p : {"", "a b, c", "\xc3\x85land \xe2\x80\x99s", ",,, ."})
                    (void)v.filter(p);
                break;
            }
            case 4: {
                static const PromptVocabulary v =
                    PromptVocabulary::from_phrasings({"thumbs up, dark skin tone", "a & b"});
                const FilteredPrompt f = v.filter(body);
                if (f.changed())
                    for (const auto& w : prompt_words(f.text))
                        if (!v.contains(w))
                            throw std::logic_error("the filter kept the unknown word '" + w + "'");
                if (!f.changed() && f.text != body)
                    throw std::logic_error("an unchanged prompt was not given back as typed");
                break;
            }
            default: {
                const auto index = std::filesystem::path(folder) / "model.safetensors.index.json";
                FILE* f = std::fopen(index.c_str(), "wb");
                if (!f) throw std::runtime_error("cannot write " + index.string());
                const bool written =
                    body.empty() || std::fwrite(body.data(), 1, body.size(), f) == body.size();
                std::fclose(f);
                if (!written) throw std::runtime_error("cannot write " + index.string());
                (void)load_t5_encoder_tensors(folder);
            }
        }
    } catch (const TokenizerError&) {
    } catch (const CheckpointError&) {
    } catch (const std::invalid_argument&) {
    } catch (const std::exception& e) {
        throw ContractBroken(std::string("the T5 folder's readers let through: ") + e.what());
    }
}

}  // namespace varscope::fuzz
