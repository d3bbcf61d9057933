#include "master/model_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
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

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

std::string DirOf(const std::string& path) {
  const size_t p = path.rfind('/');
  if (p == std::string::npos) return ".";
  return p == 0 ? "/" : path.substr(0, p);
}

}  // namespace

std::string EncodeModel(const Model& m) {
  std::string s(kModelMagic, sizeof kModelMagic);
  AppendRaw<uint32_t>(&s, kModelVersion);
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.layers.size()));
  for (int l : m.spec.layers) AppendRaw<int32_t>(&s, l);
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.activation));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.loss));
  AppendRaw<uint64_t>(&s, m.params.size());
  s.append(reinterpret_cast<const char*>(m.params.data()), m.params.size() * sizeof(float));
  AppendRaw<uint32_t>(&s, Crc32(s.data(), s.size()));
  return s;
}

Status DecodeModel(const std::string& bytes, const std::string& path, Model* out) {
  auto bad = [&](const std::string& what) {
    return Status::Data(path + ": not a usable model file: " + what);
  };
  Reader r(bytes);
  char magic[8];
  for (char& c : magic) {
    if (!r.Get(&c)) return bad("too short to hold a header");
  }
  if (std::memcmp(magic, kModelMagic, sizeof magic) != 0) return bad("wrong magic number");
  uint32_t version = 0, layers = 0, act = 0, loss = 0;
  if (!r.Get(&version)) return bad("cut short in the header");
  if (version != kModelVersion) {
    return bad("format version " + std::to_string(version) + ", this build reads version " +
               std::to_string(kModelVersion));
  }
  if (!r.Get(&layers)) return bad("cut short in the header");
  if (layers < 2 || layers > 64) return bad("layer count " + std::to_string(layers));
  Model m;
  for (uint32_t i = 0; i < layers; ++i) {
    int32_t v = 0;
    if (!r.Get(&v)) return bad("cut short in the layer sizes");
    if (v < 1) return bad("layer size " + std::to_string(v));
    m.spec.layers.push_back(v);
  }
  uint64_t n = 0;
  if (!r.Get(&act) || !r.Get(&loss) || !r.Get(&n)) return bad("cut short in the header");
  if (act > static_cast<uint32_t>(Activation::kIdentity)) return bad("unknown activation");
  if (loss > static_cast<uint32_t>(Loss::kXent)) return bad("unknown loss");
  m.spec.activation = static_cast<Activation>(act);
  m.spec.loss = static_cast<Loss>(loss);
  if (n != m.spec.ParamCount()) {
    return bad("parameter count " + std::to_string(n) + " does not fit the layers");
  }
  if (r.left() != n * sizeof(float) + sizeof(uint32_t)) {
    return bad(r.left() < n * sizeof(float) + sizeof(uint32_t) ? "cut short (truncated)"
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
