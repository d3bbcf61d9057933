#include "data/arrays.h"

#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <new>

#include "data/array_file.h"
#include "data/byte_stream.h"
#include "data/format.h"

namespace shmtrain::data {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsIdxMagic(std::string_view b) {
  if (b.size() < 4 || b[0] != 0 || b[1] != 0 || b[3] < 1) return false;
  const unsigned char t = static_cast<unsigned char>(b[2]);
  return t == 0x08 || t == 0x09 || t == 0x0B || t == 0x0C || t == 0x0D || t == 0x0E;
}

// The three formats of arrays, which read alike.
enum class ArrayKind { kIdx, kNpy, kNpz };

std::optional<ArrayKind> KindOf(const DataFormatDef* d);

// An array of `path` in `format`: the file itself, or the .npz member `key`.
Status OpenArray(const std::string& path, ArrayKind format, const std::string& key,
                 ArrayReader* r) {
  std::unique_ptr<ByteSource> src;
  if (format != ArrayKind::kNpz) {
    if (Status s = OpenFile(path, &src); !s.ok()) return s;
    return format == ArrayKind::kIdx ? ReadIdxHeader(std::move(src), r)
                                           : ReadNpyHeader(std::move(src), r);
  }
  std::vector<std::string> members;
  if (Status s = ListZip(path, &members); !s.ok()) return s;
  if (std::find(members.begin(), members.end(), key + ".npy") == members.end()) {
    std::string have;
    for (const std::string& m : members) {
      have += (have.empty() ? "" : ", ") + (EndsWith(m, ".npy") ? m.substr(0, m.size() - 4) : m);
    }
    return Status::Data(path + ": the archive has no array '" + key + "' (its arrays: " +
                        (have.empty() ? "none" : have) + "; choose with --npz-x / --npz-y)");
  }
  if (Status s = OpenZipMember(path, key + ".npy", &src); !s.ok()) return s;
  Status header = ReadNpyHeader(std::move(src), r);
  if (!header.ok()) {
    // A damaged member reads as whatever its bytes became; its CRC says what really happened.
    if (Status s = CheckZipMember(path, key + ".npy"); !s.ok()) return s;
  }
  return header;
}

// The labels' array: their own file, or the .npz's y array.
Status OpenLabels(const std::string& path, ArrayKind format, const LoadOptions& opts,
                  ArrayReader* r, std::string* name) {
  const ArraySource& a = opts.file.arrays;
  if (a.labels_path.empty() && format != ArrayKind::kNpz) {
    return Status::Data(path + ": " + (format == ArrayKind::kIdx ? "IDX" : ".npy") +
                        " data keeps its labels in a file of their own: give it with --labels "
                        "(--val-labels for --val-data)");
  }
  *name = a.labels_path.empty() ? path : a.labels_path;
  const std::optional<ArrayKind> lf =
      a.labels_path.empty() ? format : KindOf(DetectFormat(a.labels_path).def);
  if (!lf.has_value()) {
    return Status::Data(*name + ": labels must be an IDX or NumPy (.npy, .npz) file");
  }
  return OpenArray(*name, *lf, a.y_key, r);
}

// Rows and features of the features array: the first dimension, and the product of the rest.
Status ShapeOf(const std::string& path, const ArrayHeader& h, int64_t* rows, int* features) {
  if (h.shape.empty())
    return Status::Data(path + ": " + h.Describe() + " has no rows (a 0-d array)");
  int64_t f = 1;
  bool overflow = false;
  for (size_t d = 1; d < h.shape.size(); ++d) overflow |= __builtin_mul_overflow(f, h.shape[d], &f);
  if (!overflow && (h.shape[0] < 1 || f < 1)) {
    return Status::Data(path + ": " + h.Describe() + " is empty");
  }
  if (overflow || f > INT_MAX) {
    return Status::Data(path + ": " + h.Describe() + " has " +
                        (overflow ? "more than 2^63" : std::to_string(f)) +
                        " features per row, more than the supported " + std::to_string(INT_MAX));
  }
  *rows = h.shape[0];
  *features = static_cast<int>(f);
  return Status::Ok();
}

Status CheckLabelShape(const std::string& name, const ArrayHeader& h, const std::string& path,
                       int64_t rows) {
  const bool column = h.shape.size() == 1 || (h.shape.size() == 2 && h.shape[1] == 1);
  if (!column) {
    return Status::Data(name + ": labels must be one per row, of shape (n,) or (n, 1); this is a " +
                        h.Describe());
  }
  if (h.shape[0] != rows) {
    return Status::Data(name + ": count mismatch: " + std::to_string(h.shape[0]) +
                        " labels, but " + path + " has " + std::to_string(rows) + " rows");
  }
  return Status::Ok();
}

// Classes (through opts.classes, or a map of these values) or regression targets into ds->y.
Status Targets(const std::string& name, const LoadOptions& opts, const std::vector<double>& v,
               Dataset* ds) {
  ds->y.resize(v.size());
  if (opts.task != Task::kClassification) {
    static const double kFloatOverflow = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::fabs(v[i]) >= kFloatOverflow) {
        return Status::Data(name + ": label " + std::to_string(i) +
                            ": value is too large for a 32-bit float");
      }
      ds->y[i] = static_cast<float>(v[i]);
    }
    return Status::Ok();
  }
  ClassMap built;
  if (opts.classes == nullptr) {
    built = ClassMap::FromValues(v);
    if (built.size() < 2) {
      return Status::Data(name + ": classification needs at least 2 classes, the labels have " +
                          std::to_string(built.size()) +
                          (built.size() == 1 ? " ('" + built.names[0] + "')" : ""));
    }
  }
  const ClassMap& map = opts.classes ? *opts.classes : built;
  for (size_t i = 0; i < v.size(); ++i) {
    const int k = map.FindValue(v[i]);
    if (k < 0) {
      return Status::Data(name + ": label " + std::to_string(i) + " (0-based) is " +
                          ClassMap::FromValues({v[i]}).names[0] + ", not one of the model's " +
                          std::to_string(map.size()) + " classes (" + map.List() + ")");
    }
    ds->y[i] = static_cast<float>(k);
  }
  ds->classes = map;
  return Status::Ok();
}

// Opens the labels' array and checks its shape against the rows and its size against its
// file, before any data is read.
Status OpenLabelsFor(const std::string& path, ArrayKind format, const LoadOptions& opts,
                     int64_t rows, ArrayReader* r) {
  std::string name;
  if (Status s = OpenLabels(path, format, opts, r, &name); !s.ok()) return s;
  if (Status s = CheckLabelShape(r->src->name(), r->header, path, rows); !s.ok()) return s;
  return CheckDataSize(*r);
}

Status ReadLabels(const LoadOptions& opts, ArrayReader& r, Dataset* ds) {
  std::vector<double> v;
  const ElementName where = [](int64_t i) { return "label " + std::to_string(i) + " (0-based)"; };
  if (Status s = ReadDoubles(r, ds->rows, &v, where); !s.ok()) return s;
  if (Status s = ExpectEnd(*r.src, "the labels"); !s.ok()) return s;
  return Targets(r.src->name(), opts, v, ds);
}

}  // namespace

namespace {

// LoadArrays: every header, shape and declared size is checked before a row is allocated.
Status Load(const std::string& path, ArrayKind format, const LoadOptions& opts, Dataset* out) {
  ArrayReader x;
  if (Status s = OpenArray(path, format, opts.file.arrays.x_key, &x); !s.ok()) return s;
  Dataset ds;
  if (Status s = ShapeOf(x.src->name(), x.header, &ds.rows, &ds.features); !s.ok()) return s;
  if (opts.features > 0 && ds.features != opts.features) {
    return Status::Data(x.src->name() + ": rows have " + std::to_string(ds.features) +
                        " features (" + x.header.Describe() + "), the model takes " +
                        std::to_string(opts.features));
  }
  if (Status s = CheckDataSize(x); !s.ok()) return s;
  if (opts.check_image && !x.header.shape.empty()) {
    const std::optional<Shape> image =
        SampleImage({x.header.shape.begin() + 1, x.header.shape.end()});
    if (image.has_value()) {
      if (Status s = opts.check_image(*image); !s.ok()) return s;
    }
  }
  ArrayReader y;
  if (!opts.no_labels) {
    if (Status s = OpenLabelsFor(path, format, opts, ds.rows, &y); !s.ok()) return s;
  }
  if (opts.check_size) {
    if (Status s = opts.check_size(ds.rows, ds.features); !s.ok()) return s;
  }
  const int64_t f = ds.features;
  const ElementName where = [f](int64_t i) {
    return "row " + std::to_string(i / f) + ", feature " + std::to_string(i % f) + " (0-based)";
  };
  if (Status s = ReadFloats(x, ds.rows * f, &ds.x, where); !s.ok()) return s;
  if (Status s = ExpectEnd(*x.src, "the " + x.header.Describe()); !s.ok()) return s;
  if (!opts.no_labels) {
    if (Status s = ReadLabels(opts, y, &ds); !s.ok()) return s;
  }
  *out = std::move(ds);
  return Status::Ok();
}

}  // namespace

std::optional<Shape> SampleImage(const std::vector<int64_t>& dims) {
  if (dims.size() == 2) return Shape{1, dims[0], dims[1]};
  if (dims.size() == 3) return Shape{dims[0], dims[1], dims[2]};
  return std::nullopt;
}

namespace {

Status LoadArrays(const std::string& path, ArrayKind format, const LoadOptions& opts,
                  Dataset* out) {
  try {
    return Load(path, format, opts, out);
  } catch (const std::bad_alloc&) {
    // Only memory the file's own bytes justify is asked for; the machine may still lack it.
    return Status::Resource(path + ": not enough memory to load it");
  }
}

// The header's dimensions after the rows; only the header is read, its errors Load's own.
Status ArraySampleShape(const std::string& path, ArrayKind format, const LoadOptions& opts,
                        std::vector<int64_t>* dims) {
  ArrayReader x;
  if (Status s = OpenArray(path, format, opts.file.arrays.x_key, &x); !s.ok()) return s;
  if (!x.header.shape.empty()) dims->assign(x.header.shape.begin() + 1, x.header.shape.end());
  return Status::Ok();
}

template <ArrayKind K>
Status LoadKind(const std::string& path, const LoadOptions& opts, Dataset* out) {
  return LoadArrays(path, K, opts, out);
}

template <ArrayKind K>
Status ShapeOfKind(const std::string& path, const LoadOptions& opts, std::vector<int64_t>* dims) {
  return ArraySampleShape(path, K, opts, dims);
}

bool IdxByName(std::string_view name) {
  if (EndsWith(name, ".idx")) return true;
  // the MNIST family's names: train-images-idx3-ubyte
  return name.size() >= 10 && EndsWith(name, "-ubyte") && name.substr(name.size() - 10, 3) == "idx";
}

bool NpyByName(std::string_view name) { return EndsWith(name, ".npy"); }
bool NpzByName(std::string_view name) { return EndsWith(name, ".npz"); }
bool NpyMagic(std::string_view head) { return head.rfind("\x93NUMPY", 0) == 0; }
bool ZipMagic(std::string_view head) {
  return head.rfind("PK\x03\x04", 0) == 0 || head.rfind("PK\x05\x06", 0) == 0;
}

// IDX and NumPy data hold no labels: --labels or the .npz's y array give them.
constexpr const char* kArrayLabels = "come from --labels or the .npz's --npz-y array";

}  // namespace

extern constinit const DataFormatDef kIdxFormat = {
    .name = "idx", .noun = "IDX data", .what = "is IDX data", .labels = kArrayLabels,
    .flags = {"--labels"}, .by_name = IdxByName, .by_bytes = IsIdxMagic, .gzip = true,
    .load = LoadKind<ArrayKind::kIdx>, .sample_shape = ShapeOfKind<ArrayKind::kIdx>};

extern constinit const DataFormatDef kNpyFormat = {
    .name = "npy", .noun = "NumPy data", .what = "is NumPy data", .labels = kArrayLabels,
    .flags = {"--labels"}, .by_name = NpyByName, .by_bytes = NpyMagic, .gzip = true,
    .load = LoadKind<ArrayKind::kNpy>, .sample_shape = ShapeOfKind<ArrayKind::kNpy>};

// A zip archive: never gzip-compressed.
extern constinit const DataFormatDef kNpzFormat = {
    .name = "npz", .noun = "NumPy data", .what = "is NumPy data", .labels = kArrayLabels,
    .flags = {"--labels"}, .by_name = NpzByName, .by_bytes = ZipMagic, .gzip = false,
    .load = LoadKind<ArrayKind::kNpz>, .sample_shape = ShapeOfKind<ArrayKind::kNpz>};

namespace {

std::optional<ArrayKind> KindOf(const DataFormatDef* d) {
  if (d == &kIdxFormat) return ArrayKind::kIdx;
  if (d == &kNpyFormat) return ArrayKind::kNpy;
  if (d == &kNpzFormat) return ArrayKind::kNpz;
  return std::nullopt;
}

}  // namespace

}  // namespace shmtrain::data
