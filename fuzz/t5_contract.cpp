#include "fuzz/t5_contract.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/models/t5_encoder.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "fuzz/reader_contracts.h"

namespace varscope::fuzz {

void check_t5(const std::string& input, const std::string& folder) {
    if (input.empty()) return;
    const std::string body = input.substr(1);
    try {
        switch (static_cast<unsigned char>(input[0]) % 3) {
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
