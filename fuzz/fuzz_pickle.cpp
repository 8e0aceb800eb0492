// The pickle interpreter alone (core/io/pickle_reader.h): any byte string must end in a value
// or a PickleError, never a crash, a hang or unbounded memory.
#include <ATen/ATen.h>

#include "core/io/pickle_reader.h"
#include "fuzz/fuzz_util.h"

using namespace varscope::pickle;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Environment env;
    // A tensor rebuild that accepts anything, so the persistent-load and REDUCE paths run.
    env.functions["torch._utils._rebuild_tensor_v2"] = [](const std::vector<ValuePtr>& args) {
        return make_tensor(at::zeros({static_cast<int64_t>(args.size())}));
    };
    env.persistent_load = [](const ValuePtr&) { return make_tensor(at::zeros({4})); };
    try {
        Unpickler u(data, size, std::move(env));
        (void)u.load();
    } catch (const PickleError&) {
    } catch (const std::exception& e) {
        varscope::fuzz::unexpected(e.what());
    }
    return 0;
}
