#include "master/model_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/bytes.h"
#include "core/crc32.h"
#include "nn/layer.h"

namespace shmtrain {
namespace {

// Version 2, the releases before layers: an MLP's sizes and activation. The loss follows.
Status DecodeMlpSpec(ByteReader& r, ModelSpec* spec) {
  const std::string cut = "cut short (truncated) in the ";
  uint32_t layers = 0, act = 0;
  if (!r.Get(&layers)) return Status::Data(cut + "header");
  if (layers < 2 || layers > kMaxMlpSizes) return Status::Data("layer count " + std::to_string(layers));
  std::vector<int> sizes;
  for (uint32_t i = 0; i < layers; ++i) {
    int32_t v = 0;
    if (!r.Get(&v)) return Status::Data(cut + "layer sizes");
    if (v < 1 || v > kMaxWidth) return Status::Data("layer size " + std::to_string(v));
    sizes.push_back(v);
  }
  if (!r.Get(&act)) return Status::Data(cut + "header");
  if (act > static_cast<uint32_t>(Activation::kIdentity)) return Status::Data("unknown activation");
  *spec = ModelSpec::Mlp(sizes, static_cast<Activation>(act), Loss::kMse);
  return Status::Ok();
}

// Version 3: the input shape and the model text (nn/layer.h). The loss follows.
Status DecodeSpec(ByteReader& r, ModelSpec* spec) {
  const std::string cut = "cut short (truncated) in the ";
  uint32_t c = 0, h = 0, w = 0, len = 0;
  if (!r.Get(&c) || !r.Get(&h) || !r.Get(&w) || !r.Get(&len)) return Status::Data(cut + "header");
  if (c < 1 || h < 1 || w < 1 || static_cast<uint64_t>(c) * h * w > kMaxModelInputs) {
    return Status::Data("input shape " + std::to_string(c) + "x" + std::to_string(h) + "x" +
                        std::to_string(w));
  }
  std::string text;
  if (len >= kMaxModelText || !r.GetBytes(len, &text)) {
    return Status::Data(len >= kMaxModelText ? "model text of " + std::to_string(len) + " bytes"
                                            : cut + "model text");
  }
  spec->input = {c, h, w};
  if (Status s = nn::ParseStoredModelText(text, &spec->layers); !s.ok()) {
    return Status::Data(s.message());
  }
  std::vector<Shape> shapes;
  if (Status s = nn::ResolveShapes(spec->input, spec->layers, &shapes); !s.ok()) {
    return Status::Data(s.message());
  }
  return Status::Ok();
}

// kData describing the first non-finite value of the decoded model, if it has one.
Status CheckFinite(const Model& m) {
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (!std::isfinite(m.params[i])) {
      return Status::Data("parameter " + std::to_string(i) + " of " +
                          std::to_string(m.params.size()) + " is " + NonFiniteName(m.params[i]) +
                          ": " + ParamName(m.spec, i));
    }
  }
  for (size_t j = 0; j < m.norm.offset.size(); ++j) {
    if (!std::isfinite(m.norm.offset[j])) {
      return Status::Data("the input offset of feature " + std::to_string(j) + " is " +
                          NonFiniteName(m.norm.offset[j]));
    }
    if (!std::isfinite(m.norm.scale[j])) {
      return Status::Data("the input scale of feature " + std::to_string(j) + " is " +
                          NonFiniteName(m.norm.scale[j]));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string NonFiniteName(float v) {
  if (std::isnan(v)) return "NaN";
  return v > 0 ? "+Inf" : "-Inf";
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

std::string ParamName(const ModelSpec& spec, size_t index) {
  std::vector<int> sizes;
  Activation activation;
  if (spec.AsMlp(&sizes, &activation)) {
    // The names of the releases before layers, whose exports index modules 2l.
    size_t at = index;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      const size_t in = static_cast<size_t>(sizes[l]);
      const size_t out = static_cast<size_t>(sizes[l + 1]);
      const std::string layer = "layer " + std::to_string(l);
      const std::string module = std::to_string(2 * l);
      if (at < in * out) {  // W_l(i, j) at i + j*out
        const std::string row = std::to_string(at % out), col = std::to_string(at / out);
        return layer + " weight row " + row + ", column " + col + " (" + module + ".weight[" +
               row + ", " + col + "] in an export)";
      }
      at -= in * out;
      if (at < out) {
        return layer + " bias " + std::to_string(at) + " (" + module + ".bias[" +
               std::to_string(at) + "] in an export)";
      }
      at -= out;
    }
    return "past the last layer";
  }
  // Layered models: the block and the element within it (in this build's layout).
  std::vector<Shape> shapes;
  if (!nn::ResolveShapes(spec.input, spec.layers, &shapes).ok()) return "in a model that does not resolve";
  size_t at = index;
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const nn::LayerType& t = *nn::FindLayerType(spec.layers[i].kind);
    if (t.params != nullptr) {
      for (const nn::ParamBlock& b : t.params(spec.layers[i], in)) {
        const size_t size = static_cast<size_t>(b.Size());
        if (at < size) {
          return nn::LayerName(spec.layers, i) + " " + b.name + ", element " + std::to_string(at) +
                 " of " + std::to_string(size) + " (" + std::to_string(i) + "." + b.name +
                 " in an export)";
        }
        at -= size;
      }
    }
    in = shapes[i];
  }
  return "past the last layer";
}

std::string EncodeModel(const Model& m) {
  std::string s(kModelMagic, sizeof kModelMagic);
  AppendRaw<uint32_t>(&s, kModelVersion);
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(TaskOf(m.spec.loss)));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.input.c));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.input.h));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.input.w));
  const std::string text = m.spec.Text();
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(text.size()));
  s += text;
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
  ByteReader r(bytes);
  char magic[8];
  for (char& c : magic) {
    if (!r.Get(&c)) return bad("too short to hold a header (" + std::to_string(bytes.size()) + " bytes)");
  }
  if (std::memcmp(magic, kModelMagic, sizeof magic) != 0) {
    return bad("wrong magic number (not written by shmtrain --save)");
  }
  uint32_t version = 0, task = 0, loss = 0, norm = 0, nf = 0, k = 0, numeric = 0;
  if (!r.Get(&version)) return bad(cut + "header");
  if (version != kModelVersion && version != kModelVersionMlp) {
    return bad("format version " + std::to_string(version) + ", this build reads versions " +
               std::to_string(kModelVersionMlp) + " and " + std::to_string(kModelVersion) +
               " only (retrain, or use the build that wrote it)");
  }
  if (!r.Get(&task)) return bad(cut + "header");
  if (task > static_cast<uint32_t>(Task::kClassification)) return bad("unknown task " + std::to_string(task));
  Model m;
  Status spec_status =
      version == kModelVersionMlp ? DecodeMlpSpec(r, &m.spec) : DecodeSpec(r, &m.spec);
  if (!spec_status.ok()) return bad(spec_status.message());
  if (!r.Get(&loss)) return bad(cut + "header");
  if (loss > static_cast<uint32_t>(Loss::kXent)) return bad("unknown loss");
  m.spec.loss = static_cast<Loss>(loss);
  if (static_cast<uint32_t>(TaskOf(m.spec.loss)) != task) return bad("task and loss disagree");
  if (m.spec.loss == Loss::kMse ? m.spec.outputs() != 1 : m.spec.outputs() < 2) {
    return bad("loss " + std::string(ToString(m.spec.loss)) + " with " +
               std::to_string(m.spec.outputs()) + " outputs");
  }
  if (!r.Get(&norm) || !r.Get(&nf)) return bad(cut + "normalisation");
  if (norm > static_cast<uint32_t>(Normalize::kStandard)) return bad("unknown normalisation");
  m.norm.kind = static_cast<Normalize>(norm);
  const uint32_t want_nf = m.norm.kind == Normalize::kNone ? 0 : static_cast<uint32_t>(m.spec.inputs());
  if (nf != want_nf) return bad("normalisation has " + std::to_string(nf) + " features, expected " + std::to_string(want_nf));
  // Every count below is held to the bytes left before anything is allocated for it: a short
  // file may declare up to 2^24 features and 2^31 classes.
  if (r.left() < uint64_t{nf} * 2 * sizeof(float)) {
    return bad(cut + "normalisation: " + std::to_string(nf) + " features need " +
               std::to_string(uint64_t{nf} * 2 * sizeof(float)) +
               " bytes (an offset and a scale each), the file has only " +
               std::to_string(r.left()) + " more");
  }
  m.norm.offset.resize(nf);
  m.norm.scale.resize(nf);
  for (float& v : m.norm.offset) r.Get(&v);  // whole: the size is checked above
  for (float& v : m.norm.scale) r.Get(&v);
  if (!r.Get(&k) || !r.Get(&numeric)) return bad(cut + "class list");
  const uint32_t want_k = task == static_cast<uint32_t>(Task::kClassification) ? static_cast<uint32_t>(m.spec.outputs()) : 0;
  if (k != want_k) {
    return bad("class list of " + std::to_string(k) + " classes, expected " + std::to_string(want_k));
  }
  if (numeric > 1) return bad("class label kind " + std::to_string(numeric) + " (expected 0 or 1)");
  if (r.left() < uint64_t{k} * sizeof(uint32_t)) {
    return bad(cut + "class list: " + std::to_string(k) + " classes need at least " +
               std::to_string(uint64_t{k} * sizeof(uint32_t)) +
               " bytes (a length each), the file has only " + std::to_string(r.left()) + " more");
  }
  m.classes.numeric = numeric == 1;
  for (uint32_t i = 0; i < k; ++i) {
    uint32_t len = 0;
    std::string name;
    if (!r.Get(&len) || !r.GetBytes(len, &name)) return bad(cut + "class list");
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
    return bad("parameter count " + std::to_string(n) + " does not fit the layers (" +
               std::to_string(m.spec.ParamCount()) + ")");
  }
  // n fits the layers: fewer than 4096 of at most 65536 x 2^31 parameters, so n * 4 cannot wrap.
  if (r.left() < n * sizeof(float) + sizeof(uint32_t)) {
    return bad(cut + "parameters: the layers' " + std::to_string(n) + " parameters need " +
               std::to_string(n * sizeof(float)) + " bytes and the checksum " +
               std::to_string(sizeof(uint32_t)) + ", the file has only " +
               std::to_string(r.left()) + " more");
  }
  if (r.left() > n * sizeof(float) + sizeof(uint32_t)) return bad("trailing bytes");
  m.params.resize(n);
  if (n > 0) std::memcpy(m.params.data(), r.here(), n * sizeof(float));
  const size_t body = r.pos() + n * sizeof(float);
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + body, sizeof crc);
  if (crc != Crc32(bytes.data(), body)) return bad("checksum mismatch (the file is damaged)");
  // A valid checksum only says the bytes are the ones written: no shmtrain run saves a
  // non-finite model, and one would predict NaN for every row.
  if (Status s = CheckFinite(m); !s.ok()) return bad(s.message());
  *out = std::move(m);
  return Status::Ok();
}

namespace {

constexpr int kMaxLinks = 40;  // as the kernel's own limit (ELOOP)

// `target` of a symlink at `link`, as a path: relative targets are relative to the link's
// directory.
std::string LinkTarget(const std::string& link, const std::string& target) {
  if (target.front() == '/') return target;
  const std::string dir = DirOf(link);
  if (dir == ".") return target;
  return dir == "/" ? "/" + target : dir + "/" + target;
}

OutputTarget FileTarget(const std::string& path) {
  OutputTarget t;
  t.kind = OutputTarget::Kind::kFile;
  t.path = path;
  return t;
}

OutputTarget StreamTarget(const std::string& path, bool fifo) {
  OutputTarget t;
  t.kind = OutputTarget::Kind::kStream;
  t.path = path;
  t.fifo = fifo;
  return t;
}

bool SameInode(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// A link in /proc (/proc/self/fd/1, what /dev/stdout and /dev/fd/1 lead to) names an open
// file, not a path: one of our descriptors is written as it is (at its offset, like any write
// to stdout); another process's FIFO or character device is opened through the link.
Status ResolveProcLink(const std::string& link, OutputTarget* out) {
  const std::string dir = DirOf(link), name = link.substr(link.rfind('/') + 1);
  int fd = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), fd);
  if (ec == std::errc() && end == name.data() + name.size() && SameInode(dir, "/proc/self/fd")) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0) return Status::Usage("is descriptor " + name + ", which is not open");
    if ((flags & O_ACCMODE) == O_RDONLY) {
      return Status::Usage("is descriptor " + name + ", which is open for reading only");
    }
    *out = OutputTarget{};
    out->kind = OutputTarget::Kind::kFd;
    out->fd = fd;
    return Status::Ok();
  }
  struct stat st {};
  if (::stat(link.c_str(), &st) != 0) {
    return Status::Usage("leads to " + link + ", which cannot be opened (" +
                         std::strerror(errno) + ")");
  }
  if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
    return Status::Usage("leads to " + link + " in /proc; name the file itself");
  }
  *out = StreamTarget(link, S_ISFIFO(st.st_mode));
  return Status::Ok();
}

// What a non-link node at `node` is as an output.
Status ResolveNode(const std::string& node, const struct stat& st, OutputTarget* out) {
  const std::string never =
      ": shmtrain writes regular files (replaced atomically), FIFOs and character devices "
      "(written in place) only";
  if (S_ISREG(st.st_mode)) {
    *out = FileTarget(node);
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    *out = StreamTarget(node, S_ISFIFO(st.st_mode));
  } else if (S_ISDIR(st.st_mode)) {
    return Status::Usage("is a directory; give a file name");
  } else if (S_ISBLK(st.st_mode)) {
    return Status::Usage("is a block device" + never);
  } else if (S_ISSOCK(st.st_mode)) {
    return Status::Usage("is a socket" + never);
  } else {
    return Status::Usage("is neither a regular file nor a FIFO nor a character device" + never);
  }
  return Status::Ok();
}

// Writes all of `bytes` to fd; 0 or the errno of the failure.
int WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(w);
  }
  return 0;
}

// In nanoseconds: a deadline in whole milliseconds could end up to 1 ms short of the wait.
int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Opens a FIFO or character device for writing. Opening a FIFO blocks until a reader opens
// it, possibly forever: it is opened non-blocking instead (ENXIO while there is no reader),
// retried every 10 ms up to fifo_wait_ms. The descriptor is then made blocking again, so the
// writes wait for a slow reader.
int OpenStream(const OutputTarget& t, int fifo_wait_ms, int* err) {
  const int64_t deadline = NowNs() + int64_t{fifo_wait_ms} * 1'000'000;
  for (;;) {
    const int fd = ::open(t.path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    *err = errno;
    if (*err == EINTR) continue;
    if (!t.fifo || *err != ENXIO || NowNs() >= deadline) return -1;
    const timespec tick{0, 10'000'000};
    nanosleep(&tick, nullptr);
  }
}

Status WriteStream(const std::string& path, const OutputTarget& t, const std::string& bytes,
                   int fifo_wait_ms) {
  int e = 0;
  const int fd = OpenStream(t, fifo_wait_ms, &e);
  if (fd < 0) {
    if (t.fifo && e == ENXIO) {
      char wait[32];
      std::snprintf(wait, sizeof wait, "%g s", fifo_wait_ms / 1000.0);
      return Status::Resource("cannot write " + path + ": no process opened the FIFO " + t.path +
                              " for reading within " + wait + "; start its reader first");
    }
    return Status::Resource("cannot write " + path + ": " + std::strerror(e));
  }
  e = WriteAll(fd, bytes);
  ::close(fd);
  if (e != 0) return Status::Resource("cannot write " + path + ": write: " + std::strerror(e));
  return Status::Ok();
}

// Temporary file in the target's directory, fsync, rename over the target, fsync of the
// directory.
Status ReplaceFile(const std::string& path, const std::string& target, const std::string& bytes) {
  const std::string tmp = target + ".tmp." + std::to_string(getpid());
  auto fail = [&](const std::string& what, int e) {
    unlink(tmp.c_str());
    return Status::Resource("cannot write " + path + ": " + what + ": " + std::strerror(e));
  };
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Resource("cannot write " + path + ": " + std::strerror(errno));
  if (const int e = WriteAll(fd, bytes); e != 0) {
    close(fd);
    return fail("write", e);
  }
  if (fsync(fd) != 0) {
    const int e = errno;
    close(fd);
    return fail("fsync", e);
  }
  close(fd);
  if (rename(tmp.c_str(), target.c_str()) != 0) return fail("rename", errno);
  const int dfd = open(DirOf(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return Status::Ok();
}

}  // namespace

std::string DirOf(const std::string& path) {
  const size_t p = path.rfind('/');
  if (p == std::string::npos) return ".";
  return p == 0 ? "/" : path.substr(0, p);
}

Status ResolveOutput(const std::string& path, OutputTarget* out) {
  std::string node = path;
  for (int hops = 0; hops <= kMaxLinks; ++hops) {
    struct stat st {};
    if (::lstat(node.c_str(), &st) != 0) {
      if (errno != ENOENT) {
        return Status::Usage("cannot be inspected" +
                             (node == path ? "" : " (it leads to " + node + ")") + ": " +
                             std::strerror(errno));
      }
      *out = FileTarget(node);
      return Status::Ok();
    }
    if (!S_ISLNK(st.st_mode)) return ResolveNode(node, st, out);
    struct statfs fs {};
    if (::statfs(DirOf(node).c_str(), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC) {
      return ResolveProcLink(node, out);
    }
    std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(node.c_str(), target.data(), target.size());
    if (n <= 0 || static_cast<size_t>(n) >= target.size()) {
      return Status::Usage("leads to the symbolic link " + node + ", which cannot be read");
    }
    target.resize(static_cast<size_t>(n));
    node = LinkTarget(node, target);
  }
  return Status::Usage("has more than " + std::to_string(kMaxLinks) +
                       " levels of symbolic links (a loop?)");
}

Status WriteFileDurably(const std::string& path, const std::string& bytes, int fifo_wait_ms) {
  OutputTarget t;
  if (Status s = ResolveOutput(path, &t); !s.ok()) {
    return Status::Resource("cannot write " + path + ": it " + s.message());
  }
  switch (t.kind) {
    case OutputTarget::Kind::kFile:
      return ReplaceFile(path, t.path, bytes);
    case OutputTarget::Kind::kStream:
      return WriteStream(path, t, bytes, fifo_wait_ms);
    case OutputTarget::Kind::kFd:
      if (const int e = WriteAll(t.fd, bytes); e != 0) {
        return Status::Resource("cannot write " + path + ": write: " + std::strerror(e));
      }
      return Status::Ok();
  }
  return Status::Internal("unknown output kind");
}

Status SaveModel(const std::string& path, const Model& m) {
  return WriteFileDurably(path, EncodeModel(m));
}

Status ReadFileBytes(const std::string& path, const std::string& what, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Data(path + ": cannot open " + what + ": " + std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return Status::Data(path + ": cannot read " + what + ": " + std::strerror(e));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  *out = std::move(bytes);
  return Status::Ok();
}

Status LoadModel(const std::string& path, Model* out) {
  std::string bytes;
  if (Status s = ReadFileBytes(path, "model file", &bytes); !s.ok()) return s;
  return DecodeModel(bytes, path, out);
}

}  // namespace shmtrain
