// load_pth: torch.save zip archives. LibTorch's PyTorchStreamReader reads the zip; our own
// pickle interpreter (pickle_reader.h) reads data.pkl without ever running code from it.
#include <ATen/ops/empty.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "core/io/checkpoint.h"
#include "core/io/checkpoint_internal.h"
#include "core/io/npy.h"
#include "core/io/pickle_reader.h"

namespace varscope {

namespace {

using pickle::PickleError;
using pickle::Value;
using pickle::ValuePtr;
using Kind = Value::Kind;

constexpr int kMaxNesting = 64;  // deeper dicts are not state dicts (or are cyclic)
constexpr size_t kMaxDims = 64;
constexpr uint64_t kMaxVisits = uint64_t(1) << 20;  // containers; far above real checkpoints

// Storage classes named in torch.save's persistent ids.
std::optional<at::ScalarType> storage_dtype(const std::string& global) {
    static const std::map<std::string, at::ScalarType> types = {
        {"torch.FloatStorage", at::kFloat},
        {"torch.HalfStorage", at::kHalf},
        {"torch.BFloat16Storage", at::kBFloat16},
        {"torch.DoubleStorage", at::kDouble},
        {"torch.LongStorage", at::kLong},
        {"torch.IntStorage", at::kInt},
        {"torch.ShortStorage", at::kShort},
        {"torch.CharStorage", at::kChar},
        {"torch.ByteStorage", at::kByte},
        {"torch.BoolStorage", at::kBool},
        {"torch.ComplexFloatStorage", at::kComplexFloat},
        {"torch.ComplexDoubleStorage", at::kComplexDouble},
        {"torch.UntypedStorage", at::kByte},
        {"torch.storage.UntypedStorage", at::kByte},
    };
    auto it = types.find(global);
    return it == types.end() ? std::nullopt : std::optional(it->second);
}

// torch.<dtype> globals, which _rebuild_tensor_v3 receives for dtypes without a storage class.
std::optional<at::ScalarType> torch_dtype(const std::string& global) {
    static const std::map<std::string, at::ScalarType> types = {
        {"torch.float32", at::kFloat},
        {"torch.float16", at::kHalf},
        {"torch.bfloat16", at::kBFloat16},
        {"torch.float64", at::kDouble},
        {"torch.int64", at::kLong},
        {"torch.int32", at::kInt},
        {"torch.int16", at::kShort},
        {"torch.int8", at::kChar},
        {"torch.uint8", at::kByte},
        {"torch.bool", at::kBool},
        {"torch.uint16", at::kUInt16},
        {"torch.uint32", at::kUInt32},
        {"torch.uint64", at::kUInt64},
        {"torch.complex32", at::kComplexHalf},
        {"torch.complex64", at::kComplexFloat},
        {"torch.complex128", at::kComplexDouble},
        {"torch.float8_e4m3fn", at::kFloat8_e4m3fn},
        {"torch.float8_e5m2", at::kFloat8_e5m2},
        {"torch.float8_e4m3fnuz", at::kFloat8_e4m3fnuz},
        {"torch.float8_e5m2fnuz", at::kFloat8_e5m2fnuz},
        {"torch.float8_e8m0fnu", at::kFloat8_e8m0fnu},
    };
    auto it = types.find(global);
    return it == types.end() ? std::nullopt : std::optional(it->second);
}

const ValuePtr& arg(const std::vector<ValuePtr>& args, size_t i, Kind kind, const char* what) {
    if (i >= args.size()) throw PickleError(std::string("missing argument '") + what + "'");
    if (!args[i]->is(kind)) {
        throw PickleError(std::string("argument '") + what + "' is a " +
                          pickle::kind_name(args[i]->kind) + ", expected a " +
                          pickle::kind_name(kind));
    }
    return args[i];
}

std::vector<int64_t> int_list(const std::vector<ValuePtr>& args, size_t i, const char* what) {
    if (i >= args.size()) throw PickleError(std::string("missing argument '") + what + "'");
    const Value& v = *args[i];
    if (!v.is(Kind::Tuple) && !v.is(Kind::List)) {
        throw PickleError(std::string("argument '") + what + "' is not a tuple of ints");
    }
    if (v.items.size() > kMaxDims)
        throw PickleError(std::string("argument '") + what + "' has too many dims");
    std::vector<int64_t> out;
    for (const auto& item : v.items) {
        if (!item->is(Kind::Int) || item->integer < 0) {
            throw PickleError(std::string("argument '") + what + "' must hold non-negative ints");
        }
        out.push_back(item->integer);
    }
    return out;
}

// Elements of storage a strided view reaches (offset + furthest element + 1), or nullopt on
// overflow. Zero-sized views need nothing.
std::optional<uint64_t> strided_extent(int64_t offset, const std::vector<int64_t>& size,
                                       const std::vector<int64_t>& stride) {
    uint64_t last = 0;
    for (size_t d = 0; d < size.size(); ++d) {
        if (size[d] == 0) return 0;
        uint64_t step = 0;
        if (__builtin_mul_overflow(uint64_t(size[d] - 1), uint64_t(stride[d]), &step) ||
            __builtin_add_overflow(last, step, &last)) {
            return std::nullopt;
        }
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(last, uint64_t(offset) + 1, &end)) return std::nullopt;
    return end;
}

// storage, storage_offset, size, stride (requires_grad, hooks and metadata do not matter here).
at::Tensor rebuild_tensor(const std::vector<ValuePtr>& args, std::optional<at::ScalarType> dtype) {
    const at::Tensor storage = arg(args, 0, Kind::Storage, "storage")->tensor;
    const int64_t offset = arg(args, 1, Kind::Int, "storage_offset")->integer;
    const std::vector<int64_t> size = int_list(args, 2, "size");
    const std::vector<int64_t> stride = int_list(args, 3, "stride");
    if (offset < 0) throw PickleError("negative storage offset");
    if (size.size() != stride.size()) throw PickleError("size and stride differ in length");

    const at::ScalarType type = dtype.value_or(storage.scalar_type());
    const uint64_t item = c10::elementSize(type);
    const uint64_t available = storage.nbytes();
    const std::optional<uint64_t> extent = strided_extent(offset, size, stride);
    uint64_t needed = 0;
    if (!extent || __builtin_mul_overflow(*extent, item, &needed) || needed > available) {
        throw PickleError("storage holds " + std::to_string(available) +
                          " bytes, but a tensor of shape " + c10::str(c10::IntArrayRef(size)) +
                          " at offset " + std::to_string(offset) + " needs " +
                          (extent ? std::to_string(needed) : std::string("more")));
    }
    // A view of the shared storage: tensors saved as views of one another stay views.
    return at::empty({0}, at::TensorOptions().dtype(type))
        .set_(storage.storage(), offset, size, stride);
}

// _rebuild_parameter(data, requires_grad, hooks[, state]): a Parameter is just its tensor here.
ValuePtr rebuild_parameter(const std::vector<ValuePtr>& args) {
    return arg(args, 0, Kind::Tensor, "data");
}

std::map<std::string, pickle::Function> tensor_functions() {
    std::map<std::string, pickle::Function> f;
    f["torch._utils._rebuild_tensor_v2"] = [](const std::vector<ValuePtr>& args) {
        return pickle::make_tensor(rebuild_tensor(args, std::nullopt));
    };
    f["torch._utils._rebuild_tensor_v3"] = [](const std::vector<ValuePtr>& args) {
        const std::string& name = arg(args, 6, Kind::Global, "dtype")->text;
        const std::optional<at::ScalarType> dtype = torch_dtype(name);
        if (!dtype) throw PickleError("unsupported dtype " + name);
        return pickle::make_tensor(rebuild_tensor(args, dtype));
    };
    f["torch._utils._rebuild_parameter"] = rebuild_parameter;
    f["torch._utils._rebuild_parameter_with_state"] = rebuild_parameter;
    f["torch.Size"] = [](const std::vector<ValuePtr>& args) {
        int_list(args, 0, "sizes");  // validates
        auto t = pickle::make_value(Kind::Tuple);
        t->items = args[0]->items;
        return t;
    };
    // Tensor subclasses: (func, type, args, state). Only the rebuilds above may be `func`.
    const auto inner = f;
    f["torch._tensor._rebuild_from_type_v2"] = [inner](const std::vector<ValuePtr>& args) {
        const std::string& func = arg(args, 0, Kind::Global, "func")->text;
        auto it = inner.find(func);
        if (it == inner.end() || func == "torch.Size") {
            throw PickleError("refusing to call global '" + func + "' from _rebuild_from_type_v2");
        }
        return it->second(arg(args, 2, Kind::Tuple, "args")->items);
    };
    return f;
}

class PthReader {
  public:
    explicit PthReader(std::string path) : path_(std::move(path)) {}
    StateDict read();

  private:
    [[noreturn]] void fail(const std::string& what) const { detail::checkpoint_fail(path_, what); }
    at::DataPtr record(const std::string& name, size_t& size);
    void check_byteorder();
    ValuePtr load_storage(const ValuePtr& pid);
    void check_zip_layout();
    void flatten(const ValuePtr& v, const std::string& name, int depth, StateDict& out);

    std::string path_;
    uint64_t file_size_ = 0;
    std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip_;
    std::map<std::string, c10::Storage> storages_;  // by record key: shared between tensors
    uint64_t visited_ = 0;
};

// LibTorch's stream reader ends the process (a fatal log, not an exception) on two layouts it
// refuses: a first record outside a folder, and no version record (fuzz_pth's inputs in
// tests/fixtures/fuzz). Checked first with our own zip listing; an archive that listing cannot
// read goes to LibTorch as before, whose other refusals are exceptions.
void PthReader::check_zip_layout() {
    std::vector<std::string> names;
    try {
        names = list_zip(path_);
    } catch (const std::exception&) {
        return;
    }
    if (names.empty()) fail("not a torch.save zip archive: the zip is empty");
    const auto slash = names[0].find('/');
    if (slash == std::string::npos)
        fail("not a torch.save zip archive: its first record '" + names[0] +
             "' is not inside a folder");
    const std::string dir = names[0].substr(0, slash + 1);
    auto has = [&](const std::string& n) {
        return std::find(names.begin(), names.end(), n) != names.end();
    };
    if (!has(dir + "version") && !has(dir + ".data/version"))
        fail("not a torch.save zip archive: no " + dir + "version record");
}

StateDict PthReader::read() {
    file_size_ = detail::checked_file_size(path_);
    const std::string head = detail::read_head(path_, 16);
    detail::reject_raw_pickle(path_, head);
    if (head.rfind("PK", 0) != 0) fail("not a zip archive, so not a torch.save file");
    check_zip_layout();
    zip_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path_);
    if (!zip_->hasRecord("data.pkl")) fail("no data.pkl in the archive, so not a torch.save file");
    check_byteorder();

    size_t size = 0;
    const at::DataPtr pkl = record("data.pkl", size);
    pickle::Environment env;
    env.functions = tensor_functions();
    env.persistent_load = [this](const ValuePtr& pid) { return load_storage(pid); };
    pickle::Unpickler unpickler(static_cast<const uint8_t*>(pkl.get()), size, std::move(env));
    try {
        const ValuePtr root = unpickler.load();
        StateDict out;
        flatten(root, "", 0, out);
        return out;
    } catch (const PickleError& e) {
        fail(std::string("data.pkl: ") + e.what());
    }
}

at::DataPtr PthReader::record(const std::string& name, size_t& size) {
    // A record cannot be larger than the file (torch.save stores records uncompressed); this
    // keeps a forged zip directory from making us allocate absurd amounts.
    if (zip_->getRecordSize(name) > file_size_)
        fail("record '" + name + "' claims more bytes than the file has");
    auto [data, n] = zip_->getRecord(name);
    size = n;
    return std::move(data);
}

void PthReader::check_byteorder() {
    if (!zip_->hasRecord("byteorder")) return;  // older writers: always little-endian
    size_t size = 0;
    const at::DataPtr data = record("byteorder", size);
    std::string order(static_cast<const char*>(data.get()), size);
    while (!order.empty() && std::isspace(static_cast<unsigned char>(order.back())))
        order.pop_back();
    if (order != "little")
        fail("byteorder is '" + order + "'; only little-endian checkpoints are supported");
}

// pid = ('storage', storage_type, key, location, numel); location is ignored (loaded on CPU).
ValuePtr PthReader::load_storage(const ValuePtr& pid) {
    if (!pid->is(Kind::Tuple) || pid->items.size() < 5 || !pid->items[0]->is(Kind::String) ||
        pid->items[0]->text != "storage") {
        throw PickleError(
            "unsupported persistent id (expected ('storage', type, key, location, numel))");
    }
    const std::vector<ValuePtr>& f = pid->items;
    if (!f[1]->is(Kind::Global) || !f[2]->is(Kind::String) || !f[4]->is(Kind::Int) ||
        f[4]->integer < 0) {
        throw PickleError("malformed storage persistent id");
    }
    const std::optional<at::ScalarType> dtype = storage_dtype(f[1]->text);
    if (!dtype) throw PickleError("unsupported storage type '" + f[1]->text + "'");
    const std::string& key = f[2]->text;
    const bool key_ok = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    if (!key_ok) throw PickleError("malformed storage key '" + key + "'");

    auto it = storages_.find(key);
    if (it == storages_.end()) {
        const std::string name = "data/" + key;
        if (!zip_->hasRecord(name))
            fail("storage record '" + name + "' is missing from the archive");
        size_t size = 0;
        at::DataPtr bytes = record(name, size);
        c10::Storage storage(c10::Storage::use_byte_size_t(), size, std::move(bytes), nullptr,
                             false);
        it = storages_.emplace(key, std::move(storage)).first;
    }
    const uint64_t numel = static_cast<uint64_t>(f[4]->integer);
    const uint64_t item = c10::elementSize(*dtype);
    uint64_t needed = 0;
    if (__builtin_mul_overflow(numel, item, &needed) || needed > it->second.nbytes()) {
        fail("storage record 'data/" + key + "' holds " + std::to_string(it->second.nbytes()) +
             " bytes, but data.pkl says it has " + std::to_string(numel) + " elements of " +
             std::to_string(item) + " bytes (truncated or corrupt file)");
    }
    auto v = pickle::make_value(Kind::Storage);
    v->tensor = at::empty({0}, at::TensorOptions().dtype(*dtype))
                    .set_(it->second, 0, {static_cast<int64_t>(numel)}, {1});
    return v;
}

// Dicts nest with '.', lists/tuples by index; leaves other than tensors are skipped.
void PthReader::flatten(const ValuePtr& v, const std::string& name, int depth, StateDict& out) {
    if (v->is(Kind::Tensor)) {
        if (!out.emplace(name, v->tensor).second) fail("tensor name '" + name + "' occurs twice");
        return;
    }
    if (!v->is(Kind::Dict) && !v->is(Kind::List) && !v->is(Kind::Tuple)) return;
    if (depth >= kMaxNesting) {
        fail("objects nested deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    // Shared containers are walked once per path to them; a forged pickle could nest them into
    // exponentially many paths.
    if (++visited_ > kMaxVisits) fail("too many nested containers (shared ones repeated?)");

    const auto child = [&](const std::string& key) {
        return name.empty() ? key : name + "." + key;
    };
    for (const auto& [key, value] : v->entries) {
        if (key->is(Kind::String)) flatten(value, child(key->text), depth + 1, out);
        if (key->is(Kind::Int)) flatten(value, child(std::to_string(key->integer)), depth + 1, out);
    }
    for (size_t i = 0; i < v->items.size(); ++i) {
        flatten(v->items[i], child(std::to_string(i)), depth + 1, out);
    }
}

}  // namespace

StateDict load_pth(const std::string& path) {
    try {
        return PthReader(path).read();
    } catch (const CheckpointError&) {
        throw;
    } catch (const PickleError& e) {
        detail::checkpoint_fail(path, std::string("data.pkl: ") + e.what());
    } catch (const c10::Error& e) {
        // The zip reader's messages carry a backtrace after the first line.
        std::string msg = e.what_without_backtrace();
        msg = msg.substr(0, msg.find('\n'));
        detail::checkpoint_fail(
            path, "cannot read the torch.save zip archive (truncated or corrupt?): " + msg);
    } catch (const std::bad_alloc&) {
        detail::checkpoint_fail(path, "out of memory while reading");
    } catch (const std::exception& e) {
        detail::checkpoint_fail(path, e.what());
    }
}

}  // namespace varscope
