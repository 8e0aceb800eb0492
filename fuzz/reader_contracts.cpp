// The reader harnesses' checks (fuzz/reader_contracts.h says who calls them).
#include "fuzz/reader_contracts.h"

#include <ATen/ops/zeros.h>

#include <fstream>
#include <iterator>

#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/io/npy.h"
#include "core/io/pickle_reader.h"
#include "core/models/var_teacher_input.h"

namespace varscope::fuzz {

namespace {

// Runs `read`; the documented errors `Allowed...` are the reader's answer to bad input,
// anything else escaping is a broken contract.
template <class... Allowed, class Read>
void only_throws(const char* reader, Read&& read) {
    try {
        read();
    } catch (const ContractBroken&) {
        throw;
    } catch (const std::exception& e) {
        if ((... || (dynamic_cast<const Allowed*>(&e) != nullptr))) return;
        throw ContractBroken(std::string(reader) + " let through: " + e.what());
    }
}

std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

void check_json(const std::string& bytes) {
    nlohmann::json j;
    bool parsed = false;
    only_throws<JsonReadError>("parse_json", [&] {
        j = parse_json(bytes, "fuzz");
        parsed = true;
    });
    if (!parsed) return;
    // Invalid UTF-8 in strings parses but does not print (nlohmann throws type_error 316).
    std::string text;
    try {
        text = j.dump();
    } catch (const nlohmann::json::type_error&) {
        return;
    }
    try {
        if (parse_json(text, "fuzz round trip") != j)
            throw ContractBroken("parse_json: the round trip changed the value");
    } catch (const JsonReadError& e) {
        throw ContractBroken(std::string("parse_json refused its own output: ") + e.what());
    }
}

void check_pickle(const std::string& bytes) {
    pickle::Environment env;
    // A tensor rebuild that accepts anything, so the persistent-load and REDUCE paths run.
    env.functions["torch._utils._rebuild_tensor_v2"] = [](const std::vector<pickle::ValuePtr>& a) {
        return pickle::make_tensor(at::zeros({static_cast<int64_t>(a.size())}));
    };
    env.persistent_load = [](const pickle::ValuePtr&) {
        return pickle::make_tensor(at::zeros({4}));
    };
    only_throws<pickle::PickleError>("the unpickler", [&] {
        pickle::Unpickler u(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                            std::move(env));
        (void)u.load();
    });
}

void check_pth(const std::string& path) {
    only_throws<CheckpointError>("load_pth", [&] { (void)load_pth(path); });
}

void check_safetensors(const std::string& path) {
    only_throws<CheckpointError>("load_checkpoint", [&] { (void)load_checkpoint(path); });
    only_throws<CheckpointError>("read_safetensors_metadata",
                                 [&] { (void)read_safetensors_metadata(path); });
}

void check_teacher_input(const std::string& path) {
    // Set by hand: VarConfig::for_depth lives in var.cpp with the whole transformer.
    VarConfig config;
    config.patch_nums = {1, 2};
    config.num_classes = 10;
    config.vocab_size = 16;
    only_throws<CheckpointError, std::invalid_argument>("check_var_teacher_input", [&] {
        (void)check_var_teacher_input(load_checkpoint(path), config, path);
    });
}

void check_npz(const std::string& bytes) {
    only_throws<NpyError>("parse_npz", [&] { (void)parse_npz(bytes, "fuzz.npz"); });
    only_throws<NpyError>("parse_npy", [&] { (void)parse_npy(bytes, "fuzz.npy"); });
}

const std::vector<std::string>& reader_harnesses() {
    static const std::vector<std::string> names = {"fuzz_json",          "fuzz_pickle",
                                                   "fuzz_pth",           "fuzz_safetensors",
                                                   "fuzz_teacher_input", "fuzz_npz"};
    return names;
}

void check_reader(const std::string& harness, const std::string& path) {
    if (harness == "fuzz_json") return check_json(file_bytes(path));
    if (harness == "fuzz_pickle") return check_pickle(file_bytes(path));
    if (harness == "fuzz_pth") return check_pth(path);
    if (harness == "fuzz_safetensors") return check_safetensors(path);
    if (harness == "fuzz_teacher_input") return check_teacher_input(path);
    if (harness == "fuzz_npz") return check_npz(file_bytes(path));
    throw std::invalid_argument("not a reader harness: '" + harness + "'");
}

}  // namespace varscope::fuzz
