// The T5 text encoder's readers of a stranger's folder (issue #32): the first byte picks the
// input's role, the rest is its content.
//   0: spiece.model bytes -> SentencePieceTokenizer (then a few encodes): TokenizerError only
//   1: config.json -> T5EncoderConfig::from_json: std::invalid_argument only
//   2: model.safetensors.index.json beside no shards -> load_t5_encoder_tensors: CheckpointError
// SentencePiece itself is the system library (not instrumented): a crash inside it is still a
// finding, ours to guard against.
#include <filesystem>

#include "core/io/json_read.h"
#include "core/models/t5_encoder.h"
#include "core/text/sentencepiece_tokenizer.h"
#include "fuzz/fuzz_util.h"

namespace {

const std::filesystem::path& folder() {
    static const std::filesystem::path p = [] {
        auto d = std::filesystem::temp_directory_path() /
                 ("varscope-fuzz-t5-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        static std::filesystem::path for_exit;
        for_exit = d;
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(for_exit, ec);
        });
        return d;
    }();
    return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        switch (data[0] % 3) {
            case 0: {
                const auto tok = varscope::SentencePieceTokenizer::from_bytes(body, "fuzz");
                for (const char* p :
                     {"", "a cat </s> <extra_id_3>", "\xf0\x9f\x98\x80 \xe4\xb8\x80"})
                    (void)tok.encode_batch({p, "x"});
                break;
            }
            case 1:
                (void)varscope::T5EncoderConfig::from_json(varscope::parse_json(body, "fuzz"),
                                                           "fuzz");
                break;
            default: {
                FILE* f = std::fopen((folder() / "model.safetensors.index.json").c_str(), "wb");
                if (!f) std::abort();
                if (!body.empty() && std::fwrite(body.data(), 1, body.size(), f) != body.size())
                    std::abort();
                std::fclose(f);
                (void)varscope::load_t5_encoder_tensors(folder().string());
            }
        }
    } catch (const varscope::TokenizerError&) {
    } catch (const varscope::CheckpointError&) {
    } catch (const std::invalid_argument&) {
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    return 0;
}
