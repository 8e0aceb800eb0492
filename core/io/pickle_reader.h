// A small pickle interpreter for the data that torch.save writes (protocols 2-5, binary opcodes).
//
// It never imports or calls anything. A GLOBAL is only a name; when the pickle calls one
// (REDUCE), the name is looked up in a fixed table: the caller's functions (tensor rebuilds),
// a few plain containers (OrderedDict, set, bytes), and classes that are known to be harmless
// data (argparse.Namespace, numpy scalars), which become opaque values. Any other call is refused
// with a PickleError naming the global.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace varscope::pickle {

// Malformed or refused pickle data; the message says what and at which byte offset.
class PickleError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
    enum class Kind {
        None,
        Bool,
        Int,
        Float,
        String,
        Bytes,
        Tuple,
        List,
        Dict,
        Set,
        Global,
        Tensor,
        Storage,
        Opaque
    };

    Kind kind = Kind::None;
    bool boolean = false;
    int64_t integer = 0;
    double real = 0.0;
    // String/Bytes contents; "module.name" for a Global and the class name of an Opaque value.
    std::string text;
    std::vector<ValuePtr> items;                         // Tuple, List, Set
    std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // Dict, in insertion order
    at::Tensor tensor;  // Tensor; for a Storage, a 1-D tensor of its dtype covering all of it

    bool is(Kind k) const { return kind == k; }
};

ValuePtr make_value(Value::Kind kind);
ValuePtr make_int(int64_t v);
ValuePtr make_string(Value::Kind kind, std::string text);  // String, Bytes, Global or Opaque
ValuePtr make_tensor(at::Tensor t);

// Readable kind name for error messages ("tuple", "dict", ...).
const char* kind_name(Value::Kind kind);

// Implements an allowed global when the pickle calls it with `args`; throws PickleError on bad
// arguments.
using Function = std::function<ValuePtr(const std::vector<ValuePtr>& args)>;

struct Environment {
    std::map<std::string, Function> functions;  // "module.name" -> implementation
    std::function<ValuePtr(const ValuePtr& pid)> persistent_load;  // BINPERSID; null = refused
};

class Unpickler {
  public:
    Unpickler(const uint8_t* data, size_t size, Environment env);
    // Breaks reference cycles and deep chains that a hostile pickle may have built.
    ~Unpickler();
    Unpickler(const Unpickler&) = delete;
    Unpickler& operator=(const Unpickler&) = delete;

    // Runs to STOP and returns the result. The values stay valid while the Unpickler lives.
    ValuePtr load();

  private:
    void step(uint8_t op);
    [[noreturn]] void fail(const std::string& what) const;

    // Input.
    const uint8_t* take(size_t n);
    uint8_t u8() { return *take(1); }
    uint64_t le(size_t n);
    std::string line();
    uint64_t string_length(uint8_t op);  // length prefix of a string/bytes opcode

    // Stack.
    void push(ValuePtr v) { stack_.push_back(std::move(v)); }
    ValuePtr pop();
    ValuePtr& top();
    std::vector<ValuePtr> pop_mark();
    ValuePtr container(Value::Kind kind);  // a new container, tracked for cleanup

    // Opcodes with some logic.
    void memo_put(uint64_t index);
    void memo_get(uint64_t index);
    void push_global(std::string module, std::string name);
    void reduce();
    void new_object(bool with_kwargs);
    void set_items(std::vector<ValuePtr> kv);
    void append_items(std::vector<ValuePtr> items);
    ValuePtr call(const Value& callable, const std::vector<ValuePtr>& args);
    ValuePtr call_builtin(const std::string& name, const std::vector<ValuePtr>& args,
                          bool& handled);
    ValuePtr encode(const std::vector<ValuePtr>& args);

    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
    size_t op_start_ = 0;
    Environment env_;
    std::vector<ValuePtr> stack_;
    std::vector<size_t> marks_;
    std::unordered_map<uint64_t, ValuePtr> memo_;
    std::vector<ValuePtr> containers_;
};

}  // namespace varscope::pickle
