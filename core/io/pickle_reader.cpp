#include "core/io/pickle_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

namespace varscope::pickle {

namespace {

// Opcodes, named as in CPython's pickletools.
enum Op : uint8_t {
    MARK = '(',
    STOP = '.',
    POP = '0',
    POP_MARK = '1',
    DUP = '2',
    BININT = 'J',
    BININT1 = 'K',
    BININT2 = 'M',
    NONE = 'N',
    BINPERSID = 'Q',
    REDUCE = 'R',
    BINSTRING = 'T',
    SHORT_BINSTRING = 'U',
    BINUNICODE = 'X',
    APPEND = 'a',
    BUILD = 'b',
    GLOBAL = 'c',
    DICT = 'd',
    EMPTY_DICT = '}',
    APPENDS = 'e',
    BINGET = 'h',
    LONG_BINGET = 'j',
    LIST = 'l',
    EMPTY_LIST = ']',
    BINPUT = 'q',
    LONG_BINPUT = 'r',
    SETITEM = 's',
    TUPLE = 't',
    EMPTY_TUPLE = ')',
    SETITEMS = 'u',
    BINFLOAT = 'G',
    BINBYTES = 'B',
    SHORT_BINBYTES = 'C',
    PROTO = 0x80,
    NEWOBJ = 0x81,
    TUPLE1 = 0x85,
    TUPLE2 = 0x86,
    TUPLE3 = 0x87,
    NEWTRUE = 0x88,
    NEWFALSE = 0x89,
    LONG1 = 0x8a,
    LONG4 = 0x8b,
    SHORT_BINUNICODE = 0x8c,
    BINUNICODE8 = 0x8d,
    BINBYTES8 = 0x8e,
    EMPTY_SET = 0x8f,
    ADDITEMS = 0x90,
    FROZENSET = 0x91,
    NEWOBJ_EX = 0x92,
    STACK_GLOBAL = 0x93,
    MEMOIZE = 0x94,
    FRAME = 0x95,
    BYTEARRAY8 = 0x96,
};

// Classes and functions whose calls carry plain data (configs, numpy scalars, paths) that a
// checkpoint may hold next to its tensors. They are never constructed: the call yields an opaque
// value so that the tensors around them still load.
const std::set<std::string>& opaque_callables() {
    static const std::set<std::string> names = {
        "argparse.Namespace",
        "types.SimpleNamespace",
        "copyreg._reconstructor",
        "builtins.object",
        "builtins.complex",
        "builtins.slice",
        "builtins.range",
        "numpy.dtype",
        "numpy.ndarray",
        "numpy.core.multiarray.scalar",
        "numpy._core.multiarray.scalar",
        "numpy.core.multiarray._reconstruct",
        "numpy._core.multiarray._reconstruct",
        "pathlib.Path",
        "pathlib.PosixPath",
        "pathlib.WindowsPath",
        "pathlib.PurePosixPath",
        "pathlib.PureWindowsPath",
        "datetime.datetime",
        "datetime.date",
        "datetime.time",
        "datetime.timedelta",
        "datetime.timezone",
        "decimal.Decimal",
        "fractions.Fraction",
        "uuid.UUID",
        "torch.device",
    };
    return names;
}

bool is_container(Value::Kind k) {
    using K = Value::Kind;
    return k == K::Tuple || k == K::List || k == K::Dict || k == K::Set;
}

// Python 2 module names that protocol-2 pickles use for builtins (fix_imports).
std::string python3_module(std::string module) {
    if (module == "__builtin__") return "builtins";
    if (module == "copy_reg") return "copyreg";
    return module;
}

// Decodes UTF-8 into code points; false on malformed input.
bool utf8_code_points(const std::string& s, std::vector<uint32_t>& out) {
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<uint8_t>(s[i]);
        size_t n = c < 0x80           ? 1
                   : (c >> 5) == 0x6  ? 2
                   : (c >> 4) == 0xe  ? 3
                   : (c >> 3) == 0x1e ? 4
                                      : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? c : c & (0xff >> (n + 1));
        for (size_t k = 1; k < n; ++k) {
            const auto cc = static_cast<uint8_t>(s[i + k]);
            if ((cc >> 6) != 0x2) return false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        out.push_back(cp);
        i += n;
    }
    return true;
}

}  // namespace

ValuePtr make_value(Value::Kind kind) {
    auto v = std::make_shared<Value>();
    v->kind = kind;
    return v;
}

ValuePtr make_int(int64_t i) {
    auto v = make_value(Value::Kind::Int);
    v->integer = i;
    return v;
}

ValuePtr make_string(Value::Kind kind, std::string text) {
    auto v = make_value(kind);
    v->text = std::move(text);
    return v;
}

ValuePtr make_tensor(at::Tensor t) {
    auto v = make_value(Value::Kind::Tensor);
    v->tensor = std::move(t);
    return v;
}

namespace {

// LONG1/LONG4 payload: little-endian two's complement; values beyond int64 stay opaque.
ValuePtr long_value(const uint8_t* p, uint64_t n) {
    const uint8_t fill = n > 0 && (p[n - 1] & 0x80) ? 0xff : 0x00;
    const bool fits =
        std::all_of(p + std::min<uint64_t>(n, 8), p + n, [&](uint8_t b) { return b == fill; }) &&
        (n <= 8 || (p[7] & 0x80) == (fill & 0x80));
    if (!fits) return make_string(Value::Kind::Opaque, "builtins.int");
    uint64_t v = 0;
    for (uint64_t i = 0; i < 8; ++i) v |= uint64_t(i < n ? p[i] : fill) << (8 * i);
    return make_int(static_cast<int64_t>(v));
}

}  // namespace

const char* kind_name(Value::Kind kind) {
    switch (kind) {
        case Value::Kind::None:
            return "None";
        case Value::Kind::Bool:
            return "bool";
        case Value::Kind::Int:
            return "int";
        case Value::Kind::Float:
            return "float";
        case Value::Kind::String:
            return "str";
        case Value::Kind::Bytes:
            return "bytes";
        case Value::Kind::Tuple:
            return "tuple";
        case Value::Kind::List:
            return "list";
        case Value::Kind::Dict:
            return "dict";
        case Value::Kind::Set:
            return "set";
        case Value::Kind::Global:
            return "global";
        case Value::Kind::Storage:
            return "storage";
        case Value::Kind::Tensor:
            return "tensor";
        case Value::Kind::Opaque:
            return "object";
    }
    return "?";
}

Unpickler::Unpickler(const uint8_t* data, size_t size, Environment env)
    : data_(data), size_(size), env_(std::move(env)) {}

Unpickler::~Unpickler() {
    // Every container is also owned here, so emptying them one by one never recurses.
    for (auto& c : containers_) {
        c->items.clear();
        c->entries.clear();
    }
}

void Unpickler::fail(const std::string& what) const {
    char op[8];
    std::snprintf(op, sizeof op, "0x%02x", op_start_ < size_ ? data_[op_start_] : 0);
    throw PickleError(what + " (opcode " + op + " at byte " + std::to_string(op_start_) + ")");
}

const uint8_t* Unpickler::take(size_t n) {
    if (n > size_ - pos_) {
        fail("truncated pickle: needs " + std::to_string(n) + " more bytes, " +
             std::to_string(size_ - pos_) + " left");
    }
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
}

uint64_t Unpickler::le(size_t n) {
    const uint8_t* p = take(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
    return v;
}

std::string Unpickler::line() {
    const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (nl == nullptr) fail("truncated pickle: unterminated line");
    const size_t n = static_cast<const uint8_t*>(nl) - (data_ + pos_);
    std::string s(reinterpret_cast<const char*>(take(n)), n);
    take(1);
    return s;
}

uint64_t Unpickler::string_length(uint8_t op) {
    switch (op) {
        case SHORT_BINUNICODE:
        case SHORT_BINSTRING:
        case SHORT_BINBYTES:
            return le(1);
        case BINUNICODE:
        case BINBYTES:
            return le(4);
        case BINSTRING: {
            const auto n = static_cast<int32_t>(le(4));
            if (n < 0) fail("negative string length");
            return static_cast<uint64_t>(n);
        }
        default:
            return le(8);
    }
}

ValuePtr Unpickler::pop() {
    const size_t base = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= base) fail("stack underflow");
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
}

ValuePtr& Unpickler::top() {
    const size_t base = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= base) fail("stack underflow");
    return stack_.back();
}

std::vector<ValuePtr> Unpickler::pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    const size_t base = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> items(std::make_move_iterator(stack_.begin() + base),
                                std::make_move_iterator(stack_.end()));
    stack_.resize(base);
    return items;
}

ValuePtr Unpickler::container(Value::Kind kind) {
    auto v = make_value(kind);
    containers_.push_back(v);
    return v;
}

ValuePtr Unpickler::load() {
    for (;;) {
        op_start_ = pos_;
        if (pos_ >= size_) fail("truncated pickle: no STOP opcode");
        const uint8_t op = u8();
        if (op == STOP) {
            ValuePtr result = pop();
            return result;
        }
        step(op);
    }
}

void Unpickler::step(uint8_t op) {
    using K = Value::Kind;
    switch (op) {
        case PROTO:
            if (u8() > 5) fail("unsupported pickle protocol");
            break;
        case FRAME:  // an 8-byte frame length, only a read-ahead hint
            le(8);
            break;
        case MARK:
            marks_.push_back(stack_.size());
            break;
        case POP:
            if (!marks_.empty() && stack_.size() == marks_.back()) {
                pop_mark();  // CPython pops the mark itself when the frame is empty
            } else {
                pop();
            }
            break;
        case POP_MARK:
            pop_mark();
            break;
        case DUP:
            push(top());
            break;

        case NONE:
            push(make_value(K::None));
            break;
        case NEWTRUE:
        case NEWFALSE: {
            auto v = make_value(K::Bool);
            v->boolean = op == NEWTRUE;
            push(v);
            break;
        }
        case BININT:
            push(make_int(static_cast<int32_t>(le(4))));
            break;
        case BININT1:
            push(make_int(le(1)));
            break;
        case BININT2:
            push(make_int(le(2)));
            break;
        case LONG1:
        case LONG4: {
            const uint64_t n = op == LONG1 ? le(1) : le(4);
            push(long_value(take(n), n));
            break;
        }
        case BINFLOAT: {
            const uint8_t* p = take(8);
            uint64_t bits = 0;
            for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];  // big-endian
            auto v = make_value(K::Float);
            std::memcpy(&v->real, &bits, sizeof bits);
            push(v);
            break;
        }

        case SHORT_BINUNICODE:
        case BINUNICODE:
        case BINUNICODE8:
        case SHORT_BINSTRING:
        case BINSTRING:
        case SHORT_BINBYTES:
        case BINBYTES:
        case BINBYTES8:
        case BYTEARRAY8: {
            const uint64_t n = string_length(op);
            const uint8_t* p = take(n);
            const bool is_text = op == SHORT_BINUNICODE || op == BINUNICODE || op == BINUNICODE8 ||
                                 op == SHORT_BINSTRING || op == BINSTRING;
            push(make_string(is_text ? K::String : K::Bytes,
                             std::string(reinterpret_cast<const char*>(p), n)));
            break;
        }

        case EMPTY_TUPLE:
            push(container(K::Tuple));
            break;
        case TUPLE1:
        case TUPLE2:
        case TUPLE3: {
            auto t = container(K::Tuple);
            t->items.resize(op - TUPLE1 + 1);
            for (auto it = t->items.rbegin(); it != t->items.rend(); ++it) *it = pop();
            push(t);
            break;
        }
        case TUPLE:
        case LIST:
        case FROZENSET: {
            auto t = container(op == TUPLE ? K::Tuple : op == LIST ? K::List : K::Set);
            t->items = pop_mark();
            push(t);
            break;
        }
        case EMPTY_LIST:
            push(container(K::List));
            break;
        case EMPTY_DICT:
            push(container(K::Dict));
            break;
        case EMPTY_SET:
            push(container(K::Set));
            break;
        case DICT: {
            auto kv = pop_mark();
            push(container(K::Dict));
            set_items(std::move(kv));
            break;
        }
        case APPEND: {
            auto v = pop();
            append_items({v});
            break;
        }
        case APPENDS:
        case ADDITEMS:
            append_items(pop_mark());
            break;
        case SETITEM: {
            auto v = pop();
            auto k = pop();
            set_items({k, v});
            break;
        }
        case SETITEMS:
            set_items(pop_mark());
            break;

        case BINPUT:
            memo_put(le(1));
            break;
        case LONG_BINPUT:
            memo_put(le(4));
            break;
        case MEMOIZE:
            memo_put(memo_.size());
            break;
        case BINGET:
            memo_get(le(1));
            break;
        case LONG_BINGET:
            memo_get(le(4));
            break;

        case GLOBAL: {
            std::string module = line();
            std::string name = line();
            push_global(std::move(module), std::move(name));
            break;
        }
        case STACK_GLOBAL: {
            auto name = pop();
            auto module = pop();
            if (!name->is(K::String) || !module->is(K::String))
                fail("STACK_GLOBAL needs two strings");
            push_global(module->text, name->text);
            break;
        }
        case REDUCE:
            reduce();
            break;
        case NEWOBJ:
            new_object(false);
            break;
        case NEWOBJ_EX:
            new_object(true);
            break;
        case BUILD:
            // The state would go to __setstate__ or __dict__; nothing we load needs it.
            pop();
            top();
            break;
        case BINPERSID: {
            auto pid = pop();
            if (!env_.persistent_load) fail("persistent id without a loader");
            push(env_.persistent_load(pid));
            break;
        }
        default: {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", op);
            fail(std::string("unknown or unsupported opcode ") + hex);
        }
    }
}

void Unpickler::memo_put(uint64_t index) {
    memo_[index] = top();
}

void Unpickler::memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    push(it->second);
}

void Unpickler::push_global(std::string module, std::string name) {
    if (module.empty() || name.empty()) fail("empty global name");
    push(make_string(Value::Kind::Global, python3_module(std::move(module)) + "." + name));
}

void Unpickler::set_items(std::vector<ValuePtr> kv) {
    if (kv.size() % 2 != 0) fail("odd number of items for a dict");
    ValuePtr& target = top();
    if (target->is(Value::Kind::Opaque)) return;  // an unbuilt object's items are dropped
    if (!target->is(Value::Kind::Dict))
        fail(std::string("setting items on a ") + kind_name(target->kind));
    for (size_t i = 0; i < kv.size(); i += 2) target->entries.emplace_back(kv[i], kv[i + 1]);
}

void Unpickler::append_items(std::vector<ValuePtr> items) {
    ValuePtr& target = top();
    if (target->is(Value::Kind::Opaque)) return;
    if (!target->is(Value::Kind::List) && !target->is(Value::Kind::Set)) {
        fail(std::string("appending to a ") + kind_name(target->kind));
    }
    for (auto& v : items) target->items.push_back(std::move(v));
}

void Unpickler::reduce() {
    auto args = pop();
    auto callable = pop();
    if (!args->is(Value::Kind::Tuple)) fail("REDUCE arguments are not a tuple");
    push(call(*callable, args->items));
}

void Unpickler::new_object(bool with_kwargs) {
    if (with_kwargs) pop();
    auto args = pop();
    auto cls = pop();
    if (!cls->is(Value::Kind::Global)) fail(std::string("NEWOBJ on a ") + kind_name(cls->kind));
    // cls.__new__(cls, *args): containers start empty, anything else stays unbuilt.
    const std::string& name = cls->text;
    if (name == "collections.OrderedDict" || name == "builtins.dict" ||
        name == "collections.defaultdict") {
        push(container(Value::Kind::Dict));
    } else if (name == "builtins.list") {
        push(container(Value::Kind::List));
    } else if (name == "builtins.set" || name == "builtins.frozenset") {
        push(container(Value::Kind::Set));
    } else {
        push(make_string(Value::Kind::Opaque, name));
    }
}

ValuePtr Unpickler::call(const Value& callable, const std::vector<ValuePtr>& args) {
    if (!callable.is(Value::Kind::Global))
        fail(std::string("calling a ") + kind_name(callable.kind));
    const std::string& name = callable.text;
    if (auto it = env_.functions.find(name); it != env_.functions.end()) {
        try {
            ValuePtr v = it->second(args);
            if (v) return v;
        } catch (const PickleError& e) {
            fail(name + ": " + e.what());
        }
        fail(name + " returned nothing");
    }
    bool handled = false;
    ValuePtr v = call_builtin(name, args, handled);
    if (handled) return v;
    if (opaque_callables().count(name) != 0) return make_string(Value::Kind::Opaque, name);
    if (name.rfind("torch.", 0) == 0) {
        fail("unsupported global '" + name +
             "' (only dense tensors and plain containers are loaded)");
    }
    fail("refusing to call global '" + name +
         "': not on the allow-list of tensor rebuilds and plain data types (the file may be "
         "malicious)");
}

ValuePtr Unpickler::call_builtin(const std::string& name, const std::vector<ValuePtr>& args,
                                 bool& handled) {
    using K = Value::Kind;
    handled = true;
    if (name == "collections.OrderedDict" || name == "builtins.dict" ||
        name == "collections.defaultdict") {
        auto d = container(K::Dict);
        if (name == "collections.defaultdict" || args.empty()) return d;  // the factory is dropped
        const Value& src = *args[0];
        if (src.is(K::Dict)) {
            d->entries = src.entries;
        } else if (src.is(K::List) || src.is(K::Tuple)) {
            for (const auto& pair : src.items) {
                if (!(pair->is(K::Tuple) || pair->is(K::List)) || pair->items.size() != 2) {
                    fail(name + " expects (key, value) pairs");
                }
                d->entries.emplace_back(pair->items[0], pair->items[1]);
            }
        } else {
            fail(name + " called with a " + kind_name(src.kind));
        }
        return d;
    }
    if (name == "builtins.set" || name == "builtins.frozenset" || name == "builtins.list") {
        auto s = container(name == "builtins.list" ? K::List : K::Set);
        if (!args.empty()) {
            if (!is_container(args[0]->kind) || args[0]->is(K::Dict))
                fail(name + " expects a sequence");
            s->items = args[0]->items;
        }
        return s;
    }
    if (name == "_codecs.encode") return encode(args);
    if (name == "builtins.bytes" || name == "builtins.bytearray") {
        if (args.empty()) return make_string(K::Bytes, "");
        if (args[0]->is(K::Bytes)) return make_string(K::Bytes, args[0]->text);
        fail(name + " called with a " + kind_name(args[0]->kind));
    }
    handled = false;
    return nullptr;
}

// _codecs.encode(text, encoding): how protocol 2 stores bytes (latin1 maps code points to bytes).
ValuePtr Unpickler::encode(const std::vector<ValuePtr>& args) {
    using K = Value::Kind;
    if (args.size() != 2 || !args[0]->is(K::String) || !args[1]->is(K::String)) {
        fail("_codecs.encode expects (str, encoding)");
    }
    const std::string& encoding = args[1]->text;
    if (encoding == "utf-8" || encoding == "utf8" || encoding == "ascii") {
        return make_string(K::Bytes, args[0]->text);
    }
    if (encoding != "latin1" && encoding != "latin-1" && encoding != "iso-8859-1") {
        fail("_codecs.encode with unsupported encoding '" + encoding + "'");
    }
    std::vector<uint32_t> cps;
    if (!utf8_code_points(args[0]->text, cps)) fail("_codecs.encode of malformed UTF-8");
    std::string out;
    out.reserve(cps.size());
    for (uint32_t cp : cps) {
        if (cp > 0xff) fail("_codecs.encode: character outside latin1");
        out.push_back(static_cast<char>(cp));
    }
    return make_string(K::Bytes, std::move(out));
}

}  // namespace varscope::pickle
