#include "master/files/init_from.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/decimal.h"
#include "data/array_file.h"
#include "data/byte_stream.h"
#include "master/files/export.h"
#include "master/files/model_file.h"
#include "nn/layer.h"

namespace shmtrain::master {
namespace {

// The names are distinct from other sources': master's sources compile in unity batches.

// How many names a message lists before "and N more".
constexpr size_t kInitFromListed = 8;

Status InitFromRefusal(const std::string& path, const std::string& what) {
  return Status::Data("--init-from " + path + ": " + what);
}

// The array reader's messages name the file and the member already ("w.npz (0.weight.npy)").
Status InitFromReaderRefusal(const Status& s) {
  return Status::Data("--init-from " + s.message());
}

// numpy's way: "(8, 5)", "(3,)", "()".
std::string InitFromShapeText(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// Element i of an array of `shape` as PyTorch indexes it: "0.weight[2, 3]", "x.bias[4]".
std::string InitFromElementText(const std::string& name, const std::vector<int64_t>& shape,
                                int64_t i) {
  if (shape.empty()) return name;
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] > 0 ? i % shape[d] : 0;
    i = shape[d] > 0 ? i / shape[d] : 0;
  }
  std::string s = name + "[";
  for (size_t d = 0; d < index.size(); ++d) s += (d ? ", " : "") + std::to_string(index[d]);
  return s + "]";
}

std::string InitFromNameList(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < kInitFromListed; ++i) {
    s += (i ? ", " : "") + names[i];
  }
  if (names.size() > kInitFromListed) {
    s += " and " + std::to_string(names.size() - kInitFromListed) + " more";
  }
  return names.empty() ? "none" : s;
}

// One array the model has: its block, its layer, and where its values start in the layer's
// PyTorch layout (the blocks one after another, as nn::FromTorch reads them).
struct WantedArray {
  const TorchLayer* layer;
  const nn::ParamBlock* block;
  int64_t at;
};

std::map<std::string, WantedArray> WantedArrays(const std::vector<TorchLayer>& layers) {
  std::map<std::string, WantedArray> wanted;
  for (const TorchLayer& l : layers) {
    int64_t at = 0;
    for (const nn::ParamBlock& b : l.blocks) {
      wanted.emplace(b.name, WantedArray{&l, &b, at});
      at += b.Size();
    }
  }
  return wanted;
}

// "float32 of shape (8, 5)" as the model has it.
std::string WantedText(const nn::ParamBlock& b) {
  return std::string(b.integer ? "int64" : "float32") + " of shape " +
         InitFromShapeText(b.torch_shape);
}

// Every member an array of the model or one the export writes beside them; every array of the
// model present. Names are the members' without ".npy", as numpy.load lists them.
Status CheckArrayNames(const std::string& path, const std::vector<TorchLayer>& layers,
                       const std::map<std::string, WantedArray>& wanted) {
  std::vector<std::string> members;
  if (Status s = data::ListZip(path, &members); !s.ok()) return InitFromReaderRefusal(s);
  std::vector<std::string> names, model_names;
  for (const std::string& m : members) {
    const bool npy = m.size() > 4 && m.compare(m.size() - 4, 4, ".npy") == 0;
    names.push_back(npy ? m.substr(0, m.size() - 4) : m);
  }
  for (const TorchLayer& l : layers) {
    for (const nn::ParamBlock& b : l.blocks) model_names.push_back(b.name);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const bool array = names[i] != members[i];
    if (array && (wanted.count(names[i]) != 0 || IsExportNonParameter(names[i]))) continue;
    return InitFromRefusal(path, "extra tensor '" + names[i] + "'" +
                                     (array ? "" : " (a member that is not an .npy array)") +
                                     ": not a parameter or buffer of the model (its tensors: " +
                                     InitFromNameList(model_names) + ")");
  }
  std::vector<std::string> missing;
  for (const std::string& n : model_names) {
    if (std::find(names.begin(), names.end(), n) == names.end()) missing.push_back(n);
  }
  if (missing.empty()) return Status::Ok();
  const WantedArray& first = wanted.at(missing[0]);
  return InitFromRefusal(path, "missing tensor '" + missing[0] + "' (" + WantedText(*first.block) +
                                   ", of " + first.layer->spec->kind + " on input " +
                                   first.layer->in.Text() + ")" +
                                   (missing.size() > 1 ? "; missing too: " : "") +
                                   (missing.size() > 1 ? InitFromNameList(std::vector<std::string>(
                                                             missing.begin() + 1, missing.end()))
                                                       : "") +
                                   " (the file's arrays: " + InitFromNameList(names) + ")");
}

// The member `name`.npy with its header read. A member whose header does not read may be a
// damaged one: its CRC-32 then says so (as data/arrays.cc does).
Status OpenWantedArray(const std::string& path, const std::string& name, data::ArrayReader* r) {
  std::unique_ptr<data::ByteSource> src;
  if (Status s = data::OpenZipMember(path, name + ".npy", &src); !s.ok()) {
    return InitFromReaderRefusal(s);
  }
  const Status header = data::ReadNpyHeader(std::move(src), r);
  if (header.ok()) return header;
  if (Status s = data::CheckZipMember(path, name + ".npy"); !s.ok()) {
    return InitFromReaderRefusal(s);
  }
  return InitFromReaderRefusal(header);
}

// The array's type and shape against its block's, from its header alone.
Status CheckWantedHeader(const std::string& path, const std::string& name, const WantedArray& w,
                         const data::ArrayHeader& h) {
  const nn::ParamBlock& b = *w.block;
  const std::string where =
      "tensor '" + name + "' (of " + w.layer->spec->kind + " on input " + w.layer->in.Text() + ")";
  const data::ElemType type = b.integer ? data::ElemType::kI64 : data::ElemType::kF32;
  if (h.type != type) {
    return InitFromRefusal(path, where + ": the file's is a " + h.Describe() + ", the model's is " +
                                     WantedText(b) +
                                     (b.integer ? " (PyTorch's int64 count)"
                                                : " (save float32: v.numpy().astype('float32'))"));
  }
  if (h.shape != b.torch_shape) {
    return InitFromRefusal(path, where + ": shape " + InitFromShapeText(h.shape) +
                                     " in the file, the model wants " +
                                     InitFromShapeText(b.torch_shape));
  }
  return Status::Ok();
}

// The values of a checked array into its place in the layer's PyTorch layout, then the member's
// end (its CRC-32 and length).
Status ReadWantedArray(const std::string& path, const std::string& name, const WantedArray& w,
                       float* torch) {
  data::ArrayReader r;
  if (Status s = OpenWantedArray(path, name, &r); !s.ok()) return s;
  // Again: the file may have changed since the first pass read the headers.
  if (Status s = CheckWantedHeader(path, name, w, r.header); !s.ok()) return s;
  const std::vector<int64_t>& shape = w.block->torch_shape;
  const data::ElementName where = [&](int64_t i) { return InitFromElementText(name, shape, i); };
  const int64_t count = w.block->Size();
  if (w.block->integer) {
    std::vector<double> v;
    if (Status s = data::ReadDoubles(r, count, &v, where); !s.ok()) {
      return InitFromReaderRefusal(s);
    }
    for (int64_t i = 0; i < count; ++i) {
      // The reader refuses integers past 2^53, so the float exports as the same int64.
      if (v[i] < 0) {
        return InitFromRefusal(path, "tensor '" + where(i) + "' is " + Fmt("%.0f", v[i]) +
                                         ", a count of batches (never negative)");
      }
      torch[w.at + i] = static_cast<float>(v[i]);
    }
  } else {
    std::vector<float> v;
    if (Status s = data::ReadFloats(r, count, &v, where); !s.ok()) {
      return InitFromReaderRefusal(s);
    }
    std::copy(v.begin(), v.end(), torch + w.at);
  }
  if (Status s = data::ExpectEnd(*r.src, "tensor '" + name + "'"); !s.ok()) {
    return InitFromReaderRefusal(s);
  }
  return Status::Ok();
}

}  // namespace

Status ReadInitFrom(const std::string& path, const ModelSpec& spec, std::vector<float>* params) {
  const std::vector<TorchLayer> layers = TorchLayers(spec);
  const std::map<std::string, WantedArray> wanted = WantedArrays(layers);
  if (Status s = CheckArrayNames(path, layers, wanted); !s.ok()) return s;
  // Every header before any value: a misshapen array late in the file is refused before the
  // bulk of the others is read.
  for (const auto& [name, w] : wanted) {
    data::ArrayReader r;
    if (Status s = OpenWantedArray(path, name, &r); !s.ok()) return s;
    if (Status s = CheckWantedHeader(path, name, w, r.header); !s.ok()) return s;
  }
  std::vector<float> p(spec.ParamCount());
  for (const TorchLayer& l : layers) {
    std::vector<float> torch(static_cast<size_t>(l.size));
    for (const nn::ParamBlock& b : l.blocks) {
      if (Status s = ReadWantedArray(path, b.name, wanted.at(b.name), torch.data()); !s.ok()) {
        return s;
      }
    }
    nn::FromTorch(*l.type, *l.spec, l.in, torch.data(), p.data() + l.offset);
  }
  if (Status s = CheckRunningVariances(spec, p); !s.ok()) {
    return InitFromRefusal(path, s.message());
  }
  *params = std::move(p);
  return Status::Ok();
}

}  // namespace shmtrain::master
