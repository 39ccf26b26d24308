// The pickle machine behind parse_torch_file: plain data and tensor storages, any other global refused.
#include "engine/checkpoint/torch_pickle.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

#include "engine/errors.h"
#include "data/error.h"

namespace pinfeed::engine::torch_file {

[[noreturn]] void foreign(const std::string& path, const std::string& why) {
  throw CheckpointError(path + ": not a file that torch.save wrote with plain data (a pinfeed checkpoint or a state "
                           "dict): " + why);
}
[[noreturn]] void damaged(const std::string& path, const std::string& why) {
  throw DataError(path + ": truncated or damaged: " + why);
}

std::string first_line(const c10::Error& e) {
  const std::string what = e.what_without_backtrace();
  return what.substr(0, what.find('\n'));
}

namespace {

// A global the pickle names, kept on the stack as a string no plain string of a state dict starts with.
const std::string kGlobal = "\x01" "global:";
std::string global_name(const c10::IValue& v) {
  if (!v.isString() || v.toStringRef().rfind(kGlobal, 0) != 0) return "";
  return v.toStringRef().substr(kGlobal.size());
}

const std::map<std::string, at::ScalarType>& storage_types() {
  static const std::map<std::string, at::ScalarType> types = {
      {"torch.FloatStorage", at::kFloat},   {"torch.DoubleStorage", at::kDouble}, {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16}, {"torch.LongStorage", at::kLong},   {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},   {"torch.CharStorage", at::kChar},     {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", at::kBool},     {"torch.UntypedStorage", at::kByte}};
  return types;
}

// unpickle()'s machine (torch_pickle.h).
class Unpickler {
 public:
  Unpickler(const std::vector<uint8_t>& pickle, caffe2::serialize::PyTorchStreamReader& archive, const std::string& path)
      : p_(pickle), archive_(archive), path_(path) {}

  c10::IValue run() {
    for (;;) {
      const uint8_t op = u8();
      switch (op) {
        case 0x80: {  // PROTO
          const int protocol = u8();
          if (protocol < 2 || protocol > 5) foreign(path_, "pickle protocol " + std::to_string(protocol));
          break;
        }
        case 0x95: take(8); break;  // FRAME: a length hint
        case '.':                   // STOP
          if (stack_.size() != 1 || !marks_.empty()) damaged(path_, "the pickle stops with a malformed stack");
          return stack_[0];
        case '(': marks_.push_back(stack_.size()); break;
        case '}': stack_.emplace_back(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get())); break;
        case ']': stack_.emplace_back(c10::impl::GenericList(c10::AnyType::get())); break;
        case ')': stack_.emplace_back(c10::ivalue::Tuple::create(std::vector<c10::IValue>{})); break;
        case 'd': {
          c10::impl::GenericDict d(c10::AnyType::get(), c10::AnyType::get());
          set_items(d, pop_mark());
          stack_.emplace_back(std::move(d));
          break;
        }
        case 'l': {
          c10::impl::GenericList l(c10::AnyType::get());
          for (auto& v : pop_mark()) l.push_back(std::move(v));
          stack_.emplace_back(std::move(l));
          break;
        }
        case 't': stack_.emplace_back(c10::ivalue::Tuple::create(pop_mark())); break;
        case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84;
          need_stack(n);
          std::vector<c10::IValue> items(stack_.end() - n, stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.emplace_back(c10::ivalue::Tuple::create(std::move(items)));
          break;
        }
        case 's': {  // SETITEM
          need_stack(3);
          c10::IValue value = pop(), key = pop();
          set_items(dict_on_top(), {std::move(key), std::move(value)});
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<c10::IValue> items = pop_mark();
          set_items(dict_on_top(), std::move(items));
          break;
        }
        case 'a': {  // APPEND
          need_stack(2);
          c10::IValue v = pop();
          list_on_top().push_back(std::move(v));
          break;
        }
        case 'e': {  // APPENDS
          std::vector<c10::IValue> items = pop_mark();
          auto l = list_on_top();
          for (auto& v : items) l.push_back(std::move(v));
          break;
        }
        case 'N': stack_.emplace_back(); break;
        case 0x88: stack_.emplace_back(true); break;
        case 0x89: stack_.emplace_back(false); break;
        case 'J': stack_.emplace_back(static_cast<int64_t>(static_cast<int32_t>(le(4)))); break;
        case 'K': stack_.emplace_back(static_cast<int64_t>(u8())); break;
        case 'M': stack_.emplace_back(static_cast<int64_t>(le(2))); break;
        case 0x8a: {  // LONG1: little-endian two's complement
          const size_t n = u8();
          if (n > 8) foreign(path_, "an integer wider than 64 bits");
          uint64_t v = le(n);
          if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);
          stack_.emplace_back(static_cast<int64_t>(v));
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          const uint8_t* b = take(8);
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = bits << 8 | b[i];
          double d;
          std::memcpy(&d, &bits, 8);
          stack_.emplace_back(d);
          break;
        }
        case 'X': stack_.emplace_back(text(le(4))); break;     // BINUNICODE
        case 0x8c: stack_.emplace_back(text(u8())); break;     // SHORT_BINUNICODE
        case 0x8d: stack_.emplace_back(text(le(8))); break;    // BINUNICODE8
        case 'q': memo_[u8()] = top(); break;                   // BINPUT
        case 'r': memo_[static_cast<uint32_t>(le(4))] = top(); break;  // LONG_BINPUT
        case 0x94: {                                            // MEMOIZE
          const uint64_t id = memo_.size();
          memo_[id] = top();
          break;
        }
        case 'h': stack_.push_back(memo(u8())); break;          // BINGET
        case 'j': stack_.push_back(memo(le(4))); break;         // LONG_BINGET
        case 'c': {                                             // GLOBAL module\nname\n
          const std::string module = line(), name = line();
          stack_.emplace_back(kGlobal + module + "." + name);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          need_stack(2);
          const c10::IValue name = pop(), module = pop();
          if (!name.isString() || !module.isString()) damaged(path_, "a global without a name");
          stack_.emplace_back(kGlobal + module.toStringRef() + "." + name.toStringRef());
          break;
        }
        case 'R': {  // REDUCE
          need_stack(2);
          c10::IValue args = pop(), callable = pop();
          stack_.push_back(call(callable, args));
          break;
        }
        case 'b': {  // BUILD: an OrderedDict's attributes (a state dict's _metadata: module versions), not needed
          need_stack(2);
          pop();
          if (!top().isGenericDict()) foreign(path_, "its pickle sets the state of an object");
          break;
        }
        case 'Q': {  // BINPERSID: a tensor storage, in the archive's data/ folder
          need_stack(1);
          c10::IValue id = pop();
          stack_.push_back(storage(id));
          break;
        }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          foreign(path_, std::string("its pickle uses opcode ") + hex + ", which plain data does not");
        }
      }
    }
  }

 private:
  const uint8_t* take(size_t n) {
    if (n > p_.size() - at_) damaged(path_, "the pickle (data.pkl) ends early");
    const uint8_t* b = p_.data() + at_;
    at_ += n;
    return b;
  }
  uint8_t u8() { return *take(1); }
  uint64_t le(size_t n) {
    const uint8_t* b = take(n);
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = v << 8 | b[i];
    return v;
  }
  std::string text(uint64_t n) {
    if (n > p_.size() - at_) damaged(path_, "the pickle (data.pkl) ends early");
    const uint8_t* b = take(static_cast<size_t>(n));
    return std::string(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
  }
  std::string line() {
    const auto* begin = p_.data() + at_;
    const auto* end = static_cast<const uint8_t*>(std::memchr(begin, '\n', p_.size() - at_));
    if (!end) damaged(path_, "the pickle (data.pkl) ends early");
    at_ += static_cast<size_t>(end - begin) + 1;
    return std::string(reinterpret_cast<const char*>(begin), static_cast<size_t>(end - begin));
  }
  void need_stack(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) damaged(path_, "its pickle reads past its stack");
  }
  c10::IValue& top() {
    need_stack(1);
    return stack_.back();
  }
  c10::IValue pop() {
    need_stack(1);
    c10::IValue v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  std::vector<c10::IValue> pop_mark() {
    if (marks_.empty()) damaged(path_, "its pickle closes a mark it never opened");
    const size_t start = marks_.back();
    marks_.pop_back();
    std::vector<c10::IValue> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(start)),
                                   std::make_move_iterator(stack_.end()));
    stack_.resize(start);
    return items;
  }
  c10::IValue memo(uint64_t id) {
    const auto it = memo_.find(id);
    if (it == memo_.end()) damaged(path_, "its pickle reads a memo entry it never wrote");
    return it->second;
  }
  c10::impl::GenericDict dict_on_top() {
    if (!top().isGenericDict()) foreign(path_, "its pickle adds items to something that is not a dict");
    return top().toGenericDict();
  }
  c10::impl::GenericList list_on_top() {
    if (!top().isList()) foreign(path_, "its pickle appends to something that is not a list");
    return top().toList();
  }
  void set_items(c10::impl::GenericDict d, std::vector<c10::IValue> items) {
    if (items.size() % 2) damaged(path_, "a dict with a key and no value");
    for (size_t i = 0; i < items.size(); i += 2) {
      if (!items[i].isString() && !items[i].isInt()) foreign(path_, "a dict key that is neither a string nor an int");
      d.insert_or_assign(std::move(items[i]), std::move(items[i + 1]));
    }
  }

  std::vector<c10::IValue> args_of(const c10::IValue& args, size_t min, size_t max, const std::string& what) {
    if (!args.isTuple() || args.toTupleRef().elements().size() < min || args.toTupleRef().elements().size() > max) {
      damaged(path_, what + " with the wrong arguments");
    }
    return args.toTupleRef().elements().vec();
  }

  static std::vector<int64_t> ints(const c10::IValue& v, bool* ok) {
    std::vector<int64_t> out;
    if (!v.isTuple()) {
      *ok = false;
      return out;
    }
    for (const auto& e : v.toTupleRef().elements()) {
      if (!e.isInt() || e.toInt() < 0) *ok = false;
      out.push_back(e.isInt() ? e.toInt() : 0);
    }
    return out;
  }

  // The calls a state dict's pickle makes; any other is refused, as torch.load(weights_only=True) refuses it.
  c10::IValue call(const c10::IValue& callable, const c10::IValue& args) {
    const std::string g = global_name(callable);
    if (g.empty()) damaged(path_, "its pickle calls something that is not a global");
    if (g == "collections.OrderedDict") {
      if (!args.isTuple() || !args.toTupleRef().elements().empty()) foreign(path_, "an OrderedDict built from arguments");
      return c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get());
    }
    if (g == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args_of(args, 6, 7, g));
    if (g == "torch._utils._rebuild_parameter" || g == "torch._utils._rebuild_parameter_with_state") {
      const std::vector<c10::IValue> a = args_of(args, 3, 4, g);
      if (!a[0].isTensor()) damaged(path_, g + " of something that is not a tensor");
      return a[0];
    }
    // pinfeed's format-1 checkpoints (torch::jit::pickle_save): TorchScript's type tags around dicts and lists.
    if (g == "torch.jit._pickle.restore_type_tag") return args_of(args, 2, 2, g)[0];
    if (g.rfind("torch.jit._pickle.build_", 0) == 0) return args_of(args, 1, 1, g)[0];
    const std::string hint = g.rfind("__torch__.", 0) == 0
                                 ? " (a TorchScript module: save model.state_dict() with torch.save instead)"
                                 : "";
    foreign(path_, "its pickle names " + g + ", which only Python can build" + hint);
  }

  c10::IValue rebuild_tensor(const std::vector<c10::IValue>& a) {
    if (!a[0].isTensor() || !a[1].isInt()) damaged(path_, "a tensor without its storage");
    const at::Tensor& storage = a[0].toTensor();
    bool ok = a[1].toInt() >= 0;
    const std::vector<int64_t> size = ints(a[2], &ok), stride = ints(a[3], &ok);
    if (!ok || size.size() != stride.size()) damaged(path_, "a tensor with a negative or malformed size or stride");
    // The last element the view reaches must lie inside its storage.
    __int128 last = a[1].toInt();
    bool empty = false;
    for (size_t i = 0; i < size.size(); ++i) {
      if (size[i] == 0) empty = true;
      last += static_cast<__int128>(size[i] > 0 ? size[i] - 1 : 0) * stride[i];
    }
    if (!empty && last >= storage.numel()) {
      damaged(path_, "a tensor of shape " + c10::str(at::IntArrayRef(size)) + " reaches past its storage of " +
                         std::to_string(storage.numel()) + " elements");
    }
    return at::empty({0}, storage.options()).set_(storage.storage(), empty ? 0 : a[1].toInt(), size, stride);
  }

  c10::IValue storage(const c10::IValue& id) {
    if (!id.isTuple() || id.toTupleRef().elements().size() != 5) foreign(path_, "a persistent object that is not a storage");
    const auto& e = id.toTupleRef().elements();
    if (!e[0].isString() || e[0].toStringRef() != "storage" || !e[2].isString() || !e[4].isInt() || e[4].toInt() < 0) {
      foreign(path_, "a persistent object that is not a storage");
    }
    const auto type = storage_types().find(global_name(e[1]));
    if (type == storage_types().end()) foreign(path_, "a storage of type " + global_name(e[1]));
    const std::string& key = e[2].toStringRef();
    if (const auto it = storages_.find(key); it != storages_.end()) return it->second;
    const int64_t numel = e[4].toInt();
    const int64_t item = static_cast<int64_t>(c10::elementSize(type->second));
    const std::string record = "data/" + key;
    if (!archive_.hasRecord(record)) damaged(path_, "its archive lacks " + record);
    at::DataPtr data;
    size_t bytes = 0;
    try {
      std::tie(data, bytes) = archive_.getRecord(record);
    } catch (const c10::Error& err) {
      damaged(path_, record + ": " + first_line(err));
    }
    if (numel > static_cast<int64_t>(bytes) / item) {
      damaged(path_, record + " holds " + std::to_string(bytes) + " bytes, fewer than its " + std::to_string(numel) +
                         " elements need");
    }
    at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(type->second));
    if (numel > 0) std::memcpy(t.data_ptr(), data.get(), static_cast<size_t>(numel * item));
    storages_.emplace(key, t);
    return t;
  }

  const std::vector<uint8_t>& p_;
  size_t at_ = 0;
  caffe2::serialize::PyTorchStreamReader& archive_;
  const std::string& path_;
  std::vector<c10::IValue> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, c10::IValue> memo_;
  std::map<std::string, at::Tensor> storages_;  // by record key: views share one
};

}  // namespace

c10::IValue unpickle(const std::vector<uint8_t>& pickle, caffe2::serialize::PyTorchStreamReader& archive,
                     const std::string& path) {
  return Unpickler(pickle, archive, path).run();
}

}  // namespace pinfeed::engine::torch_file
