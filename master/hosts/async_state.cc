#include "master/hosts/async_state.h"

#include <algorithm>
#include <cstring>

#include "core/bytes.h"
#include "core/crc32.h"
#include "data/batch_plan.h"

namespace shmtrain::master {
namespace {

constexpr char kStateMagic[8] = {'S', 'H', 'M', 'T', 'A', 'S', 'Y', 'N'};
constexpr uint32_t kStateVersion = 1;
constexpr uint32_t kStateMaxHosts = 1 << 16;
constexpr uint64_t kStateMaxParams = uint64_t{1} << 40;

void AppendStateFloats(std::string* s, const std::vector<float>& v) {
  s->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

void AppendStatePart(std::string* s, const AsyncPartState& p) {
  AppendRaw<uint64_t>(s, p.version);
  AppendRaw<uint64_t>(s, p.pending_at);
  AppendRaw<uint64_t>(s, p.base.size());
  AppendRaw<uint64_t>(s, p.snap.size());
  for (uint64_t v : p.settled) AppendRaw<uint64_t>(s, v);
  AppendStateFloats(s, p.base);
  AppendStateFloats(s, p.snap);
}

bool GetStateFloats(ByteReader& r, uint64_t n, std::vector<float>* v) {
  if (r.left() / sizeof(float) < n) return false;
  v->resize(n);
  if (n > 0) std::memcpy(v->data(), r.here(), n * sizeof(float));
  std::string skip;
  return r.GetBytes(n * sizeof(float), &skip);
}

// One part of `len` floats for H hosts; false naming what is wrong in *why.
bool GetStatePart(ByteReader& r, int hosts, uint64_t len, AsyncPartState* p, std::string* why) {
  uint64_t base = 0, snap = 0;
  if (!r.Get(&p->version) || !r.Get(&p->pending_at) || !r.Get(&base) || !r.Get(&snap)) {
    *why = "cut short (truncated)";
    return false;
  }
  if (base != len || (snap != 0 && snap != len) || (snap != 0) != (p->pending_at != 0)) {
    *why =
        "a part of " + std::to_string(base) + " values where the run's has " + std::to_string(len);
    return false;
  }
  p->settled.resize(static_cast<size_t>(hosts));
  for (uint64_t& v : p->settled) {
    if (!r.Get(&v)) {
      *why = "cut short (truncated)";
      return false;
    }
  }
  if (!GetStateFloats(r, base, &p->base) || !GetStateFloats(r, snap, &p->snap)) {
    *why = "cut short (truncated)";
    return false;
  }
  return true;
}

uint64_t StatePartLen(uint64_t n, int j, int hosts) {
  const data::BatchPlan::Range r = data::BatchPlan::ShareOf(static_cast<int64_t>(n), j, hosts);
  return static_cast<uint64_t>(r.end - r.begin);
}

}  // namespace

std::string EncodeAsyncState(const AsyncStopState& s) {
  std::string out(kStateMagic, sizeof kStateMagic);
  AppendRaw<uint32_t>(&out, kStateVersion);
  AppendRaw<uint32_t>(&out, static_cast<uint32_t>(s.hosts));
  AppendRaw<uint32_t>(&out, static_cast<uint32_t>(s.host));
  AppendRaw<uint32_t>(&out, 0);
  AppendRaw<uint64_t>(&out, s.checkpoint.params.size());
  AppendRaw<uint64_t>(&out, s.updates);
  for (uint64_t v : s.known) AppendRaw<uint64_t>(&out, v);
  AppendStatePart(&out, s.owned);
  for (const AsyncPartState& p : s.parts) AppendStatePart(&out, p);
  const std::string ck = EncodeCheckpoint(s.checkpoint);
  AppendRaw<uint64_t>(&out, ck.size());
  out += ck;
  AppendRaw<uint32_t>(&out, Crc32(out.data(), out.size()));
  return out;
}

Status DecodeAsyncState(const std::string& b, const std::string& path, AsyncStopState* out) {
  auto bad = [&](const std::string& what) {
    return Status::Data(path + ": not a usable async stop state: " + what);
  };
  if (b.size() < sizeof kStateMagic + 4 * 4 + 8 * 2 + 4) return bad("too short (truncated)");
  if (std::memcmp(b.data(), kStateMagic, sizeof kStateMagic) != 0) return bad("wrong magic number");
  uint32_t crc = 0;
  std::memcpy(&crc, b.data() + b.size() - 4, 4);
  if (crc != Crc32(b.data(), b.size() - 4)) return bad("checksum mismatch (the file is damaged)");
  const std::string body = b.substr(0, b.size() - 4);
  ByteReader r(body);
  std::string magic;
  r.GetBytes(sizeof kStateMagic, &magic);
  uint32_t version = 0, hosts = 0, host = 0, reserved = 0;
  uint64_t n = 0;
  AsyncStopState s;
  r.Get(&version);
  r.Get(&hosts);
  r.Get(&host);
  r.Get(&reserved);
  r.Get(&n);
  r.Get(&s.updates);
  if (version != kStateVersion) return bad("format version " + std::to_string(version));
  if (hosts < 2 || hosts > kStateMaxHosts || host >= hosts || reserved != 0 ||
      n > kStateMaxParams || n < hosts) {
    return bad("header fields out of range");
  }
  s.hosts = static_cast<int>(hosts);
  s.host = static_cast<int>(host);
  s.known.resize(hosts);
  for (uint64_t& v : s.known) {
    if (!r.Get(&v)) return bad("cut short (truncated)");
  }
  std::string why;
  if (!GetStatePart(r, s.hosts, StatePartLen(n, s.host, s.hosts), &s.owned, &why)) return bad(why);
  s.parts.resize(hosts);
  for (int j = 0; j < s.hosts; ++j) {
    if (!GetStatePart(r, s.hosts, StatePartLen(n, j, s.hosts), &s.parts[static_cast<size_t>(j)],
                      &why)) {
      return bad("part " + std::to_string(j) + ": " + why);
    }
  }
  uint64_t len = 0;
  std::string ck;
  if (!r.Get(&len) || len != r.left() || !r.GetBytes(len, &ck)) return bad("cut short (truncated)");
  if (Status st = DecodeCheckpoint(ck, path + " (its parameters)", &s.checkpoint); !st.ok()) {
    return st;
  }
  if (s.checkpoint.params.size() != n) return bad("its parameters are not the parts' count");
  *out = std::move(s);
  return Status::Ok();
}

namespace {

// The states' run must be one: the first state's H, parameters and fingerprint in all.
Status StatesOfOneRun(const std::vector<AsyncStopState>& states,
                      const std::vector<std::string>& names, std::vector<int>* by_host) {
  if (states.empty()) return Status::Data("no async stop state to merge");
  const AsyncStopState& a = states[0];
  by_host->assign(static_cast<size_t>(a.hosts), -1);
  for (size_t i = 0; i < states.size(); ++i) {
    const AsyncStopState& s = states[i];
    if (s.hosts != a.hosts || s.checkpoint.params.size() != a.checkpoint.params.size() ||
        s.checkpoint.fingerprint != a.checkpoint.fingerprint) {
      return Status::Data(names[i] + " is not of the run of " + names[0] +
                          " (its hosts, parameters or fingerprint differ)");
    }
    int& slot = (*by_host)[static_cast<size_t>(s.host)];
    if (slot >= 0) {
      return Status::Data(names[i] + " and " + names[static_cast<size_t>(slot)] +
                          " are both host " + std::to_string(s.host) + "'s");
    }
    slot = static_cast<int>(i);
  }
  return Status::Ok();
}

// Where part j starts from: its owner's G, else the survivors' newest base.
const AsyncPartState& StartOf(const std::vector<AsyncStopState>& states,
                              const std::vector<int>& by_host, int j) {
  if (const int o = by_host[static_cast<size_t>(j)]; o >= 0) {
    return states[static_cast<size_t>(o)].owned;
  }
  const AsyncPartState* best = &states[0].parts[static_cast<size_t>(j)];
  for (const AsyncStopState& s : states) {
    const AsyncPartState& p = s.parts[static_cast<size_t>(j)];
    if (p.version > best->version) best = &p;
  }
  return *best;
}

}  // namespace

Status MergeAsyncStates(const std::vector<AsyncStopState>& states,
                        const std::vector<std::string>& names, MergedAsync* out) {
  std::vector<int> by_host;
  if (Status s = StatesOfOneRun(states, names, &by_host); !s.ok()) return s;
  const int H = states[0].hosts;
  const int64_t n = static_cast<int64_t>(states[0].checkpoint.params.size());
  MergedAsync m;
  m.checkpoint = states[0].checkpoint;
  std::vector<uint64_t> least(static_cast<size_t>(H), UINT64_MAX);  // lost hosts' in every part
  std::vector<uint64_t> most(static_cast<size_t>(H), 0);            // and in some part
  for (int j = 0; j < H; ++j) {
    const AsyncPartState& start = StartOf(states, by_host, j);
    const data::BatchPlan::Range r = data::BatchPlan::ShareOf(n, j, H);
    float* g = m.checkpoint.params.data() + r.begin;
    std::copy(start.base.begin(), start.base.end(), g);
    for (const AsyncStopState& s : states) {
      const AsyncPartState& p = s.parts[static_cast<size_t>(j)];  // as a pusher, even of its own
      const bool in =
          p.pending_at != 0 && start.settled[static_cast<size_t>(s.host)] >= p.pending_at;
      const std::vector<float>& x = in ? p.snap : p.base;
      const float* w = s.checkpoint.params.data() + r.begin;
      for (int64_t i = 0; i < r.end - r.begin; ++i) g[i] += w[i] - x[static_cast<size_t>(i)];
    }
    for (int h = 0; h < H; ++h) {
      least[static_cast<size_t>(h)] =
          std::min(least[static_cast<size_t>(h)], start.settled[static_cast<size_t>(h)]);
      most[static_cast<size_t>(h)] =
          std::max(most[static_cast<size_t>(h)], start.settled[static_cast<size_t>(h)]);
    }
  }
  for (int h = 0; h < H; ++h) {
    if (const int i = by_host[static_cast<size_t>(h)]; i >= 0) {
      m.kept += static_cast<int64_t>(states[static_cast<size_t>(i)].updates);
      continue;
    }
    m.missing.push_back(h);
    uint64_t said = most[static_cast<size_t>(h)];  // it had done at least these
    for (const AsyncStopState& s : states) said = std::max(said, s.known[static_cast<size_t>(h)]);
    m.kept += static_cast<int64_t>(least[static_cast<size_t>(h)]);
    m.lost += static_cast<int64_t>(said - least[static_cast<size_t>(h)]);
  }
  m.checkpoint.step = m.kept - m.kept % H;
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace shmtrain::master
