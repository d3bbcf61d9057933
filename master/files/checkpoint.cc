#include "master/files/checkpoint.h"

#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/bytes.h"
#include "core/crc32.h"
#include "master/files/model_file.h"
#include "nn/schedule.h"

namespace shmtrain {
namespace {

// The bytes of OptimConfig that fingerprints hash whatever the schedule: all of it before
// multistep's milestones, as the releases before them hashed it.
constexpr size_t kOptimConfigBeforeMilestones = offsetof(OptimConfig, milestones);
static_assert(kOptimConfigBeforeMilestones == 144,
              "the OptimConfig of earlier releases: their checkpoints' fingerprints hash these");

// FNV-1a over the bytes of each field, in a fixed order.
class Hasher {
 public:
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * 0x100000001B3ull;
  }
  template <class T>
  void Add(T v) {
    Bytes(&v, sizeof v);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xCBF29CE484222325ull;
};

// The resolved optimizer. The run's length matters only to a schedule that spans it
// (ScheduleDef::spans_run, e.g. cosine): another --steps may otherwise extend a run from its
// checkpoint. The fields before the milestones are the whole OptimConfig of the releases before
// them, hashed as they were (their checkpoints keep their fingerprints); the milestones only
// when the schedule has some (multistep), as many as it has.
void HashOptim(const OptimConfig& optim, Hasher* h) {
  OptimConfig oc = optim;
  if (!nn::SpansRun(oc)) oc.total_steps = 0;
  h->Bytes(&oc, kOptimConfigBeforeMilestones);
  int milestones = 0;
  while (milestones < kMaxMilestones && oc.milestones[milestones] != 0) ++milestones;
  if (milestones > 0) {
    h->Add<uint32_t>(static_cast<uint32_t>(milestones));
    for (int i = 0; i < milestones; ++i) h->Add<int64_t>(oc.milestones[i]);
  }
}

// n floats from p, which need not be aligned. (memcpy into an empty vector would pass its
// null data(), which memcpy does not allow even for no bytes.)
std::vector<float> FloatsAt(const char* p, size_t n) {
  std::vector<float> v(n);
  if (n > 0) std::memcpy(v.data(), p, n * sizeof(float));
  return v;
}

// The index of the first non-finite value of v, or v.size().
size_t FirstNonFinite(const std::vector<float>& v) {
  size_t i = 0;
  while (i < v.size() && std::isfinite(v[i])) ++i;
  return i;
}

// kData describing the first non-finite float of the checkpoint, if it has one. The checkpoint
// holds no model spec, so parameters are named by their index (the layout is
// include/shmtrain/model_spec.h's).
Status CheckFinite(const Checkpoint& c) {
  const std::string of = " of " + std::to_string(c.params.size());
  if (const size_t i = FirstNonFinite(c.params); i < c.params.size()) {
    return Status::Data("parameter " + std::to_string(i) + of + " is " +
                        NonFiniteName(c.params[i]));
  }
  const std::string optimizer = c.optimizer.substr(0, c.optimizer.find(' '));
  for (size_t k = 0; k < c.states.size(); ++k) {
    if (const size_t i = FirstNonFinite(c.states[k]); i < c.states[k].size()) {
      return Status::Data("optimizer state " + std::to_string(k) + " of " +
                          std::to_string(c.states.size()) + " (" + optimizer + "), entry " +
                          std::to_string(i) + of + ", is " + NonFiniteName(c.states[k][i]));
    }
  }
  return Status::Ok();
}

}  // namespace

DataDigest DigestOf(const data::Dataset& d) {
  return {d.rows, d.features, Crc32(d.x.data(), d.x.size() * sizeof(float)),
          Crc32(d.y.data(), d.y.size() * sizeof(float))};
}

uint64_t RunFingerprint(const TrainOptions& o, const OptimConfig& optim, const data::Dataset& d) {
  return RunFingerprint(o, optim, DigestOf(d));
}

uint64_t RunFingerprint(const TrainOptions& o, const OptimConfig& optim, const DataDigest& d) {
  Hasher h;
  h.Add<uint32_t>(static_cast<uint32_t>(o.mode));
  // An MLP hashes as the releases before layered models did, so their checkpoints resume;
  // any other model hashes its input shape and canonical text.
  std::vector<int> sizes;
  Activation activation;
  if (o.model.AsMlp(&sizes, &activation)) {
    // A single linear layer has no activation: the flag it was trained with stands.
    if (sizes.size() == 2) activation = o.activation;
    h.Add<uint32_t>(static_cast<uint32_t>(sizes.size()));
    for (int l : sizes) h.Add<int32_t>(l);
    h.Add<uint32_t>(static_cast<uint32_t>(activation));
  } else {
    h.Add<uint32_t>(0);
    h.Add<int64_t>(o.model.input.c);
    h.Add<int64_t>(o.model.input.h);
    h.Add<int64_t>(o.model.input.w);
    const std::string text = o.model.Text();
    h.Bytes(text.data(), text.size());
  }
  h.Add<uint32_t>(static_cast<uint32_t>(o.model.loss));
  // bf16 products train another trajectory (hashed only then: float checkpoints keep their
  // fingerprints).
  if (o.precision != ComputeType::kFloat) h.Add<uint32_t>(static_cast<uint32_t>(o.precision));
  // Augmented rows train another trajectory (hashed only then, as its canonical text).
  if (!o.augment.empty()) {
    h.Add<uint64_t>(o.augment.size());
    h.Bytes(o.augment.data(), o.augment.size());
  }
  HashOptim(optim, &h);
  h.Add<int64_t>(o.batch);
  h.Add<uint64_t>(o.seed);
  h.Add<int32_t>(o.workers);
  // Several hosts split each batch over hosts x workers (hashed only then: single-host
  // checkpoints keep their fingerprints).
  if (o.host_count > 1) h.Add<int32_t>(o.host_count);
  h.Add<uint32_t>(static_cast<uint32_t>(o.rule));
  h.Add<double>(o.LambdaOrDefault());
  h.Add<double>(o.ms_decay);
  h.Add<double>(o.epsilon);
  h.Add<int64_t>(o.max_staleness);
  h.Add<int64_t>(d.rows);
  h.Add<int32_t>(d.features);
  h.Add<uint32_t>(d.x_crc);
  h.Add<uint32_t>(d.y_crc);
  return h.value();
}

std::string EncodeCheckpoint(const Checkpoint& c) {
  std::string s(kCheckpointMagic, sizeof kCheckpointMagic);
  s.reserve(CheckpointSize(static_cast<int64_t>(c.params.size()), static_cast<int>(c.states.size()),
                           c.optimizer));
  AppendRaw<uint32_t>(&s, kCheckpointVersion);
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(c.mode));
  AppendRaw<int64_t>(&s, c.step);
  AppendRaw<uint64_t>(&s, c.fingerprint);
  AppendRaw<uint64_t>(&s, c.params.size());
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(c.states.size()));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(c.optimizer.size()));
  s += c.optimizer;
  s.append(reinterpret_cast<const char*>(c.params.data()), c.params.size() * sizeof(float));
  for (const std::vector<float>& v : c.states) {
    s.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  AppendRaw<uint32_t>(&s, Crc32(s.data(), s.size()));
  return s;
}

uint64_t CheckpointSize(int64_t n, int states, const std::string& optimizer) {
  const uint64_t head = sizeof kCheckpointMagic + 4 + 4 + 8 + 8 + 8 + 4 + 4;
  return head + optimizer.size() + uint64_t(n) * sizeof(float) * (1 + uint64_t(states)) + 4;
}

Status LoadCheckpoint(const std::string& path, Checkpoint* out) {
  std::string bytes;
  if (Status s = ReadFileBytes(path, "checkpoint", &bytes); !s.ok()) return s;
  return DecodeCheckpoint(bytes, path, out);
}

Status DecodeCheckpoint(const std::string& b, const std::string& path, Checkpoint* out) {
  auto bad = [&](const std::string& what) {
    return Status::Data(path + ": not a usable checkpoint: " + what);
  };
  constexpr size_t kHead = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4;
  if (b.size() < kHead + 4) return bad("too short (truncated)");
  // Every read of the fixed head below succeeds: its length is checked above.
  ByteReader r(b);
  std::string magic;
  r.GetBytes(sizeof kCheckpointMagic, &magic);
  if (magic != std::string(kCheckpointMagic, sizeof kCheckpointMagic)) {
    return bad("wrong magic number");
  }
  uint32_t version = 0, mode = 0, k = 0, m = 0;
  int64_t step = 0;
  uint64_t fp = 0, n = 0;
  r.Get(&version);
  if (version != kCheckpointVersion) {
    return bad("format version " + std::to_string(version) + ", this build reads version " +
               std::to_string(kCheckpointVersion));
  }
  r.Get(&mode);
  r.Get(&step);
  r.Get(&fp);
  r.Get(&n);
  r.Get(&k);
  r.Get(&m);
  if (mode > 1 || step < 0 || k > static_cast<uint32_t>(kMaxStates) || n > (uint64_t{1} << 40) ||
      m > 4096) {
    return bad("header fields out of range");
  }
  // Checked before anything is allocated for them (n <= 2^40: no wrap).
  const size_t body = kHead + m + n * sizeof(float) * (1 + k);
  if (b.size() < body + 4) {
    return bad("cut short (truncated): its header declares " + std::to_string(n) + " parameters, " +
               std::to_string(k) + " optimizer state vector" + (k == 1 ? "" : "s") + " and a " +
               std::to_string(m) + "-byte optimizer name, " + std::to_string(body - kHead) +
               " bytes after the header; the file holds " + std::to_string(b.size() - kHead - 4));
  }
  if (b.size() > body + 4) return bad("trailing bytes");
  uint32_t crc;
  std::memcpy(&crc, b.data() + body, 4);
  if (crc != Crc32(b.data(), body)) return bad("checksum mismatch (the file is damaged)");
  Checkpoint c;
  c.mode = static_cast<Mode>(mode);
  c.step = step;
  c.fingerprint = fp;
  r.GetBytes(m, &c.optimizer);  // whole: the size is checked above
  const char* v = r.here();
  c.params = FloatsAt(v, n);
  for (uint32_t i = 0; i < k; ++i) {
    c.states.push_back(FloatsAt(v + (1 + i) * n * sizeof(float), n));
  }
  // No run writes a non-finite checkpoint (CheckpointPolicy refuses to); one with a valid
  // checksum was made by hand, and would only diverge at once after resuming.
  if (Status s = CheckFinite(c); !s.ok()) return bad(s.message());
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace shmtrain
