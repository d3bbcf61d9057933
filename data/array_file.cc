#include "data/array_file.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <string_view>

#include "core/decimal.h"
#include "data/dataset.h"

namespace shmtrain::data {
namespace {

constexpr size_t kBlockBytes = size_t{1} << 20;

Status Bad(const ByteSource& src, const std::string& what) {
  return Status::Data(src.name() + ": " + what);
}

const char* TypeName(ElemType t) {
  switch (t) {
    case ElemType::kU8: return "uint8";
    case ElemType::kI8: return "int8";
    case ElemType::kU16: return "uint16";
    case ElemType::kI16: return "int16";
    case ElemType::kU32: return "uint32";
    case ElemType::kI32: return "int32";
    case ElemType::kU64: return "uint64";
    case ElemType::kI64: return "int64";
    case ElemType::kF32: return "float32";
    case ElemType::kF64: return "float64";
    case ElemType::kBool: return "bool";
  }
  return "?";
}

// The element count of `shape`, or -1 when a dimension is negative or the bytes of its
// nonzero dimensions' product would not fit in 63 bits: a shape that passes has no product of
// dimensions that overflows, zero or not.
int64_t CountOf(const std::vector<int64_t>& shape, int elem_size) {
  int64_t bytes = elem_size;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(bytes, d, &bytes)) {
      return -1;
    }
  }
  return empty ? 0 : bytes / elem_size;
}

// ---- NPY header: a Python dict literal, read by a small recursive-descent parser ----

struct Literal {
  enum Kind { kString, kBool, kTuple, kOther } kind = kOther;
  std::string text;            // kString
  bool flag = false;           // kBool
  std::vector<int64_t> items;  // kTuple of integers
};

class DictParser {
 public:
  explicit DictParser(std::string_view s) : s_(s) {}

  // Fills *out with each key's value; kData saying what and where in the header on a syntax
  // error (the caller names the file).
  Status Parse(std::vector<std::pair<std::string, Literal>>* out) {
    if (!Eat('{')) return Fail("it does not start with '{'");
    while (!Eat('}')) {
      Literal key, value;
      if (!Value(&key) || key.kind != Literal::kString) return Fail("a key is not a string");
      if (!Eat(':')) return Fail("':' missing after '" + key.text + "'");
      if (!Value(&value)) return Fail("the value of '" + key.text + "' is not understood");
      out->emplace_back(key.text, value);
      if (!Eat(',') && !Peek('}')) return Fail("',' or '}' expected");
    }
    return Status::Ok();
  }

 private:
  Status Fail(const std::string& what) const {
    return Status::Data(what + " (at byte " + std::to_string(i_) + " of the header)");
  }
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  bool Peek(char c) {
    Space();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool Eat(char c) {
    if (!Peek(c)) return false;
    ++i_;
    return true;
  }
  bool Word(std::string_view w) {
    Space();
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool Value(Literal* v) {
    Space();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '\'' || c == '"') {
      const size_t end = s_.find(c, i_ + 1);
      if (end == std::string_view::npos) return false;
      v->kind = Literal::kString;
      v->text = std::string(s_.substr(i_ + 1, end - i_ - 1));
      i_ = end + 1;
      return true;
    }
    if (Word("True") || Word("False")) {
      v->kind = Literal::kBool;
      v->flag = s_[i_ - 1] == 'e' && s_[i_ - 2] == 'u';
      return true;
    }
    if (c == '(') return Tuple(v);
    if (c == '[') return Skip(']', v);  // a structured dtype: refused by the caller
    return false;
  }
  bool Tuple(Literal* v) {
    ++i_;
    v->kind = Literal::kTuple;
    while (!Eat(')')) {
      Space();
      int64_t n = 0;
      size_t digits = 0;
      for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; ++i_, ++digits) {
        if (n > (INT64_MAX - 9) / 10) return false;
        n = n * 10 + (s_[i_] - '0');
      }
      if (digits == 0) return false;
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // written by Python 2
      v->items.push_back(n);
      if (!Eat(',') && !Peek(')')) return false;
    }
    return true;
  }
  bool Skip(char close, Literal* v) {
    const size_t end = s_.find(close, i_);
    if (end == std::string_view::npos) return false;
    v->kind = Literal::kOther;
    i_ = end + 1;
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

// The element type of an NPY descr such as '<f4', '|u1'; a refusal names what it is.
Status ParseDescr(const ByteSource& src, const std::string& d, ArrayHeader* h) {
  const std::string what = "dtype '" + d + "'";
  if (d.size() < 2) return Bad(src, what + " is not understood");
  const char order = d[0], kind = d[1];
  const std::string size = d.substr(2);
  if (kind == 'O')
    return Bad(
        src,
        what +
            " is an object array, which is not supported (save numbers, e.g. x.astype('float32'))");
  if (kind == 'U' || kind == 'S' || kind == 'a')
    return Bad(src, what + " holds text, which is not supported (numeric arrays only)");
  static const struct { char kind; const char* size; ElemType type; } kTypes[] = {
      {'u', "1", ElemType::kU8},  {'i', "1", ElemType::kI8},  {'u', "2", ElemType::kU16},
      {'i', "2", ElemType::kI16}, {'u', "4", ElemType::kU32}, {'i', "4", ElemType::kI32},
      {'u', "8", ElemType::kU64}, {'i', "8", ElemType::kI64}, {'f', "4", ElemType::kF32},
      {'f', "8", ElemType::kF64}, {'b', "1", ElemType::kBool}};
  for (const auto& t : kTypes) {
    if (t.kind != kind || size != t.size) continue;
    h->type = t.type;
    h->big_endian = order == '>' && h->ElemSize() > 1;
    if (h->big_endian) {
      return Bad(src, what + " is big-endian, which is not supported (save it little-endian, "
                             "e.g. x.astype('<" + std::string(1, kind) + size + "'))");
    }
    if (order != '<' && order != '|' && order != '=' && order != '>') break;
    return Status::Ok();
  }
  return Bad(src, what + " is not supported (little-endian float32, float64, integers or bool)");
}

Status ReadNpyDict(ByteSource& src, std::string* dict) {
  unsigned char pre[8];
  if (Status s = ReadExact(src, pre, 8, "the NPY magic and version"); !s.ok()) return s;
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    return Bad(src, "not a NumPy .npy file (no \\x93NUMPY magic)");
  }
  const int major = pre[6];
  if (major < 1 || major > 3) {
    return Bad(src, "NPY format version " + std::to_string(major) + "." + std::to_string(pre[7]) +
                        " is not supported (1.0 to 3.0)");
  }
  unsigned char len[4] = {0, 0, 0, 0};
  const size_t width = major == 1 ? 2 : 4;
  if (Status s = ReadExact(src, len, width, "the NPY header length"); !s.ok()) return s;
  const uint32_t n = len[0] | len[1] << 8 | len[2] << 16 | static_cast<uint32_t>(len[3]) << 24;
  if (n > (1u << 24)) return Bad(src, "NPY header length " + std::to_string(n) + " is implausible");
  dict->assign(n, '\0');
  return ReadExact(src, dict->data(), n, "the NPY header");
}

// ---- elements ----

template <typename T>
T LoadElem(const unsigned char* p, bool swap) {
  T v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (sizeof(T) > 1) {
    if (swap) {
      unsigned char b[sizeof(T)];
      std::memcpy(b, p, sizeof b);
      std::reverse(b, b + sizeof b);
      std::memcpy(&v, b, sizeof v);
    }
  }
  return v;
}

// Converts n elements of type T to Out, checking what the target cannot hold.
template <typename T, typename Out>
Status Convert(const ByteSource& src, const unsigned char* raw, int64_t n, bool swap, Out* out,
               int64_t base, const ElementName& where) {
  static const double kFloatOverflow = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  for (int64_t i = 0; i < n; ++i) {
    const T v = LoadElem<T>(raw + i * sizeof(T), swap);
    if constexpr (std::is_floating_point_v<T>) {
      const std::string value = where(base + i) + ": value " + Fmt("%.9g", v);
      if (!std::isfinite(v)) return Bad(src, value + " is not finite");
      if (std::is_same_v<Out, float> && std::fabs(static_cast<double>(v)) >= kFloatOverflow) {
        return Bad(src, value + " is too large for a 32-bit float");
      }
    } else if constexpr (std::is_same_v<Out, double> && sizeof(T) == 8) {
      if (v > static_cast<T>(int64_t{1} << 53) ||
          (std::is_signed_v<T> && v < -(static_cast<T>(int64_t{1} << 53)))) {
        return Bad(src, where(base + i) + ": value " + std::to_string(v) +
                            " is too large to be a label (beyond 2^53)");
      }
    }
    out[i] = static_cast<Out>(static_cast<double>(v));
  }
  return Status::Ok();
}

template <typename Out>
Status ConvertAny(const ByteSource& src, ElemType t, const unsigned char* raw, int64_t n,
                  bool swap, Out* out, int64_t base, const ElementName& where) {
  switch (t) {
    case ElemType::kU8: case ElemType::kBool:
      return Convert<uint8_t>(src, raw, n, swap, out, base, where);
    case ElemType::kI8: return Convert<int8_t>(src, raw, n, swap, out, base, where);
    case ElemType::kU16: return Convert<uint16_t>(src, raw, n, swap, out, base, where);
    case ElemType::kI16: return Convert<int16_t>(src, raw, n, swap, out, base, where);
    case ElemType::kU32: return Convert<uint32_t>(src, raw, n, swap, out, base, where);
    case ElemType::kI32: return Convert<int32_t>(src, raw, n, swap, out, base, where);
    case ElemType::kU64: return Convert<uint64_t>(src, raw, n, swap, out, base, where);
    case ElemType::kI64: return Convert<int64_t>(src, raw, n, swap, out, base, where);
    case ElemType::kF32: return Convert<float>(src, raw, n, swap, out, base, where);
    case ElemType::kF64: return Convert<double>(src, raw, n, swap, out, base, where);
  }
  return Bad(src, "internal error: unknown element type");
}

// Room for the next elements as they arrive: sizes count / 2^k, each about twice the last and
// the last exactly count, so the final step copies half the array (a peak of 1.5 times it) and
// a file that declares more than it holds costs memory only for what it holds.
template <typename T>
void Grow(std::vector<T>* v, int64_t count, int64_t first) {
  const int64_t have = static_cast<int64_t>(v->size());
  int64_t next = count;
  while (next > 1 && (next + 1) / 2 > have && (next + 1) / 2 >= first) next = (next + 1) / 2;
  v->reserve(static_cast<size_t>(next));
  v->resize(static_cast<size_t>(next));
}

template <typename Out>
Status ReadAs(ArrayReader& r, int64_t count, std::vector<Out>* out, const ElementName& where) {
  if (Status s = CheckDataSize(r); !s.ok()) return s;
  const int size = r.header.ElemSize();
  const bool swap = r.header.big_endian != (std::endian::native == std::endian::big);
  std::vector<unsigned char> raw(
      std::min<size_t>(kBlockBytes, static_cast<size_t>(count) * size + 1));
  const int64_t per_block = static_cast<int64_t>(raw.size()) / size;
  out->clear();
  // A size known exactly is had up front; any other only as the bytes arrive.
  Grow(out, count, r.src->Left().exact ? count : per_block);
  for (int64_t done = 0; done < count;) {
    // A stop signal ends a load between two blocks (data/dataset.h).
    if (LoadStopSignal() != 0) return LoadStopped("reading " + r.src->name());
    if (done == static_cast<int64_t>(out->size())) Grow(out, count, per_block);
    const int64_t n = std::min({per_block, count - done, static_cast<int64_t>(out->size()) - done});
    const size_t want = static_cast<size_t>(n * size);
    size_t got = 0;
    if (Status s = r.src->Read(raw.data(), want, &got); !s.ok()) return s;
    if (got < want) {
      return Bad(*r.src, "truncated: " + r.header.Describe() + " needs " +
                             std::to_string(r.header.Count() * size) +
                             " bytes of data, the file ends before element " +
                             std::to_string(done + static_cast<int64_t>(got) / size + 1));
    }
    if (Status s =
            ConvertAny(*r.src, r.header.type, raw.data(), n, swap, out->data() + done, done, where);
        !s.ok()) {
      return s;
    }
    done += n;
  }
  return Status::Ok();
}

}  // namespace

int ArrayHeader::ElemSize() const {
  switch (type) {
    case ElemType::kU8: case ElemType::kI8: case ElemType::kBool: return 1;
    case ElemType::kU16: case ElemType::kI16: return 2;
    case ElemType::kU32: case ElemType::kI32: case ElemType::kF32: return 4;
    case ElemType::kU64: case ElemType::kI64: case ElemType::kF64: return 8;
  }
  return 1;
}

int64_t ArrayHeader::Count() const { return CountOf(shape, ElemSize()); }

std::string ArrayHeader::Describe() const {
  std::string s = std::string(TypeName(type)) + " array of shape (";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

Status ReadIdxHeader(std::unique_ptr<ByteSource> src, ArrayReader* out) {
  unsigned char m[4];
  if (Status s = ReadExact(*src, m, 4, "the IDX magic number"); !s.ok()) return s;
  static const struct { unsigned char code; ElemType type; } kTypes[] = {
      {0x08, ElemType::kU8},  {0x09, ElemType::kI8},  {0x0B, ElemType::kI16},
      {0x0C, ElemType::kI32}, {0x0D, ElemType::kF32}, {0x0E, ElemType::kF64}};
  const auto t = std::find_if(std::begin(kTypes), std::end(kTypes),
                              [&](const auto& k) { return k.code == m[2]; });
  if (m[0] != 0 || m[1] != 0 || t == std::end(kTypes) || m[3] == 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", m[0], m[1], m[2], m[3]);
    return Bad(*src, std::string("wrong magic number 0x") + hex +
                         " for an IDX file (expected 0x000008NN to 0x00000eNN: zero, zero, "
                         "a type, the number of dimensions)");
  }
  ArrayHeader h;
  h.type = t->type;
  h.big_endian = true;
  std::vector<unsigned char> dims(4u * m[3]);
  if (Status s = ReadExact(*src, dims.data(), dims.size(), "the IDX dimensions"); !s.ok()) return s;
  for (int d = 0; d < m[3]; ++d) {
    const unsigned char* p = &dims[4 * d];
    h.shape.push_back(
        static_cast<int64_t>(static_cast<uint32_t>(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3]));
  }
  if (h.Count() < 0) return Bad(*src, h.Describe() + " is too large");
  out->src = std::move(src);
  out->header = std::move(h);
  return Status::Ok();
}

Status ReadNpyHeader(std::unique_ptr<ByteSource> src, ArrayReader* out) {
  std::string dict;
  if (Status s = ReadNpyDict(*src, &dict); !s.ok()) return s;
  std::vector<std::pair<std::string, Literal>> items;
  if (Status s = DictParser(dict).Parse(&items); !s.ok()) {
    return Bad(*src, "the NPY header is not understood: " + s.message());
  }
  ArrayHeader h;
  bool have_descr = false, have_order = false, have_shape = false;
  for (const auto& [key, v] : items) {
    if (key == "descr") {
      if (v.kind != Literal::kString)
        return Bad(*src, "structured dtypes are not supported (a plain numeric array only)");
      if (Status s = ParseDescr(*src, v.text, &h); !s.ok()) return s;
      have_descr = true;
    } else if (key == "fortran_order" && v.kind == Literal::kBool) {
      if (v.flag) {
        return Bad(*src, "the array is in Fortran order, which is not supported (save it in C "
                         "order, e.g. np.save(f, np.ascontiguousarray(x)))");
      }
      have_order = true;
    } else if (key == "shape" && v.kind == Literal::kTuple) {
      h.shape = v.items;
      have_shape = true;
    }
  }
  if (!have_descr || !have_order || !have_shape) {
    return Bad(*src, "the NPY header lacks 'descr', 'fortran_order' or 'shape'");
  }
  if (h.Count() < 0) return Bad(*src, h.Describe() + " is too large");
  out->src = std::move(src);
  out->header = std::move(h);
  return Status::Ok();
}

Status CheckDataSize(const ArrayReader& r) {
  const uint64_t bytes = static_cast<uint64_t>(r.header.Count()) * r.header.ElemSize();
  return ExpectAtLeast(*r.src, bytes, "the data of a " + r.header.Describe());
}

Status ReadFloats(ArrayReader& r, int64_t count, std::vector<float>* out,
                  const ElementName& where) {
  return ReadAs(r, count, out, where);
}

Status ReadDoubles(ArrayReader& r, int64_t count, std::vector<double>* out,
                   const ElementName& where) {
  return ReadAs(r, count, out, where);
}

}  // namespace shmtrain::data
