#include "master/model_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/bytes.h"
#include "core/crc32.h"

namespace shmtrain {
namespace {

// Reads little-endian values off a byte string, remembering whether it ran short.
class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}
  template <class T>
  bool Get(T* v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  void Skip(size_t n) { pos_ += n; }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

}  // namespace

std::string EncodeModel(const Model& m) {
  std::string s(kModelMagic, sizeof kModelMagic);
  AppendRaw<uint32_t>(&s, kModelVersion);
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(TaskOf(m.spec.loss)));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.layers.size()));
  for (int l : m.spec.layers) AppendRaw<int32_t>(&s, l);
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.activation));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.loss));
  const bool scaled = m.norm.kind != Normalize::kNone;
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.norm.kind));
  AppendRaw<uint32_t>(&s, scaled ? static_cast<uint32_t>(m.norm.offset.size()) : 0);
  if (scaled) {
    for (float v : m.norm.offset) AppendRaw<float>(&s, v);
    for (float v : m.norm.scale) AppendRaw<float>(&s, v);
  }
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.classes.size()));
  AppendRaw<uint32_t>(&s, m.classes.numeric ? 1 : 0);
  for (const std::string& name : m.classes.names) {
    AppendRaw<uint32_t>(&s, static_cast<uint32_t>(name.size()));
    s += name;
  }
  AppendRaw<uint64_t>(&s, m.params.size());
  s.append(reinterpret_cast<const char*>(m.params.data()), m.params.size() * sizeof(float));
  AppendRaw<uint32_t>(&s, Crc32(s.data(), s.size()));
  return s;
}

Status DecodeModel(const std::string& bytes, const std::string& path, Model* out) {
  auto bad = [&](const std::string& what) {
    return Status::Data(path + ": not a usable model file: " + what);
  };
  const std::string cut = "cut short (truncated) in the ";
  Reader r(bytes);
  char magic[8];
  for (char& c : magic) {
    if (!r.Get(&c)) return bad("too short to hold a header (" + std::to_string(bytes.size()) + " bytes)");
  }
  if (std::memcmp(magic, kModelMagic, sizeof magic) != 0) {
    return bad("wrong magic number (not written by shmtrain --save)");
  }
  uint32_t version = 0, task = 0, layers = 0, act = 0, loss = 0, norm = 0, nf = 0, k = 0,
           numeric = 0;
  if (!r.Get(&version)) return bad(cut + "header");
  if (version != kModelVersion) {
    return bad("format version " + std::to_string(version) + ", this build reads version " +
               std::to_string(kModelVersion) + " only (retrain, or use the build that wrote it)");
  }
  if (!r.Get(&task) || !r.Get(&layers)) return bad(cut + "header");
  if (task > static_cast<uint32_t>(Task::kClassification)) return bad("unknown task " + std::to_string(task));
  if (layers < 2 || layers > 64) return bad("layer count " + std::to_string(layers));
  Model m;
  for (uint32_t i = 0; i < layers; ++i) {
    int32_t v = 0;
    if (!r.Get(&v)) return bad(cut + "layer sizes");
    if (v < 1 || v > 65536) return bad("layer size " + std::to_string(v));
    m.spec.layers.push_back(v);
  }
  if (!r.Get(&act) || !r.Get(&loss)) return bad(cut + "header");
  if (act > static_cast<uint32_t>(Activation::kIdentity)) return bad("unknown activation");
  if (loss > static_cast<uint32_t>(Loss::kXent)) return bad("unknown loss");
  m.spec.activation = static_cast<Activation>(act);
  m.spec.loss = static_cast<Loss>(loss);
  if (static_cast<uint32_t>(TaskOf(m.spec.loss)) != task) return bad("task and loss disagree");
  if (!r.Get(&norm) || !r.Get(&nf)) return bad(cut + "normalisation");
  if (norm > static_cast<uint32_t>(Normalize::kStandard)) return bad("unknown normalisation");
  m.norm.kind = static_cast<Normalize>(norm);
  const uint32_t want_nf = m.norm.kind == Normalize::kNone ? 0 : static_cast<uint32_t>(m.spec.inputs());
  if (nf != want_nf) return bad("normalisation has " + std::to_string(nf) + " features, expected " + std::to_string(want_nf));
  m.norm.offset.assign(m.spec.inputs(), 0.0f);
  m.norm.scale.assign(m.spec.inputs(), 1.0f);
  for (uint32_t j = 0; j < nf; ++j) {
    if (!r.Get(&m.norm.offset[j])) return bad(cut + "normalisation");
  }
  for (uint32_t j = 0; j < nf; ++j) {
    if (!r.Get(&m.norm.scale[j])) return bad(cut + "normalisation");
  }
  if (!r.Get(&k) || !r.Get(&numeric)) return bad(cut + "class list");
  const uint32_t want_k = task == static_cast<uint32_t>(Task::kClassification) ? static_cast<uint32_t>(m.spec.outputs()) : 0;
  if (k != want_k) {
    return bad("class list of " + std::to_string(k) + " classes, expected " + std::to_string(want_k));
  }
  if (numeric > 1) return bad("class label kind " + std::to_string(numeric) + " (expected 0 or 1)");
  m.classes.numeric = numeric == 1;
  for (uint32_t i = 0; i < k; ++i) {
    uint32_t len = 0;
    if (!r.Get(&len) || r.left() < len) return bad(cut + "class list");
    std::string name(bytes.data() + r.pos(), len);
    r.Skip(len);
    if (m.classes.numeric) {
      double v = 0;
      const auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), v);
      if (ec != std::errc() || p != name.data() + name.size()) return bad("class " + std::to_string(i) + " is not a number");
      if (!m.classes.values.empty() && !(v > m.classes.values.back())) return bad("class values out of order");
      m.classes.values.push_back(v);
    } else if (!m.classes.names.empty() && !(name > m.classes.names.back())) {
      return bad("class names out of order");
    }
    m.classes.names.push_back(std::move(name));
  }
  uint64_t n = 0;
  if (!r.Get(&n)) return bad(cut + "parameters");
  if (n != m.spec.ParamCount()) {
    return bad("parameter count " + std::to_string(n) + " does not fit the layers");
  }
  if (r.left() != n * sizeof(float) + sizeof(uint32_t)) {
    return bad(r.left() < n * sizeof(float) + sizeof(uint32_t) ? cut + "parameters"
                                                                 : "trailing bytes");
  }
  m.params.resize(n);
  std::memcpy(m.params.data(), bytes.data() + r.pos(), n * sizeof(float));
  const size_t body = r.pos() + n * sizeof(float);
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + body, sizeof crc);
  if (crc != Crc32(bytes.data(), body)) return bad("checksum mismatch (the file is damaged)");
  *out = std::move(m);
  return Status::Ok();
}

std::string DirOf(const std::string& path) {
  const size_t p = path.rfind('/');
  if (p == std::string::npos) return ".";
  return p == 0 ? "/" : path.substr(0, p);
}

Status WriteFileDurably(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  auto fail = [&](const std::string& what, int e) {
    unlink(tmp.c_str());
    return Status::Resource("cannot write " + path + ": " + what + ": " + std::strerror(e));
  };
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Resource("cannot write " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      close(fd);
      return fail("write", e);
    }
    done += static_cast<size_t>(w);
  }
  if (fsync(fd) != 0) {
    const int e = errno;
    close(fd);
    return fail("fsync", e);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) return fail("rename", errno);
  const int dfd = open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return Status::Ok();
}

Status SaveModel(const std::string& path, const Model& m) {
  return WriteFileDurably(path, EncodeModel(m));
}

Status LoadModel(const std::string& path, Model* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Data(path + ": cannot open model file: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return DecodeModel(ss.str(), path, out);
}

}  // namespace shmtrain
