#include "shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <utility>

#include "shmtrain/model_spec.h"
#include "shmtrain/options.h"

namespace shmtrain::shm {
namespace {

namespace bip = boost::interprocess;

std::string Errno(int e) { return std::strerror(e); }

// Boost.Interprocess reports failures by throwing; at this seam they become the same reasons
// as the system calls' (strerror of the errno), or Boost's own text for its library errors.
std::string Reason(const bip::interprocess_exception& e) {
  return e.get_native_error() != 0 ? Errno(e.get_native_error()) : e.what();
}

// Names are passed to Boost exactly as shm_open takes them: Boost adds the leading '/' only
// when it is missing (ipcdetail::add_leading_slash), so /dev/shm sees the same name either way.
// kResource with the reason alone: callers name the segment.
Status OpenShm(const std::string& name, bip::mode_t mode,
               std::optional<bip::shared_memory_object>* out) {
  try {
    out->emplace(bip::open_only, name.c_str(), mode);
    return Status::Ok();
  } catch (const bip::interprocess_exception& e) {
    return Status::Resource(Reason(e));
  }
}

// Maps `size` bytes of shm (0: all of it). kResource with the reason alone, as OpenShm.
Status Map(const bip::shared_memory_object& shm, bip::mode_t mode, uint64_t size,
           std::unique_ptr<bip::mapped_region>* out) {
  try {
    *out = std::make_unique<bip::mapped_region>(shm, mode, 0, static_cast<std::size_t>(size));
    return Status::Ok();
  } catch (const bip::interprocess_exception& e) {
    return Status::Resource(Reason(e));
  }
}

// Size of the object behind shm; 0 if it cannot be read.
uint64_t SizeOf(const bip::shared_memory_object& shm) {
  bip::offset_t size = 0;
  return shm.get_size(size) && size > 0 ? static_cast<uint64_t>(size) : 0;
}

// Mappings given up by Segment::LeaveMapped. A detached thread may still read and write them,
// so they must never be unmapped: their owners live behind a pointer that is never deleted,
// which also keeps them reachable (a leak checker sees them in use, not lost). Never throws:
// it runs in a destructor's path (Combiner::Stop, ParamServer::Stop).
void KeepMappedUntilExit(std::unique_ptr<bip::mapped_region> region) noexcept {
  static std::mutex mu;
  static auto* const kept = new std::vector<std::unique_ptr<bip::mapped_region>>;
  std::lock_guard<std::mutex> lock(mu);
  try {
    kept->push_back(std::move(region));  // on bad_alloc, region still owns the mapping
  } catch (...) {
    region.release();  // unreachable then, but mapped all the same
  }
}

// Sizes in bytes, checked: a step that would pass 2^64 - 1 makes the result invalid (and every
// later step on it), so a header cannot wrap a sum into a small, plausible size.
class Size {
 public:
  Size() = default;
  explicit Size(uint64_t v) : v_(v) {}
  static Size Invalid() {
    Size s;
    s.ok_ = false;
    return s;
  }
  // A signed count from the header: negative is invalid.
  static Size Count(int64_t v) { return v < 0 ? Invalid() : Size(static_cast<uint64_t>(v)); }
  bool ok() const { return ok_; }
  uint64_t value() const { return ok_ ? v_ : 0; }
  Size operator+(Size o) const {
    Size r;
    r.ok_ = ok_ && o.ok_ && !__builtin_add_overflow(v_, o.v_, &r.v_);
    return r;
  }
  Size operator*(Size o) const {
    Size r;
    r.ok_ = ok_ && o.ok_ && !__builtin_mul_overflow(v_, o.v_, &r.v_);
    return r;
  }
  // Up to the next multiple of the cache line.
  Size AlignUp() const {
    const Size up = *this + Size(kCacheLine - 1);
    return up.ok() ? Size(up.v_ / kCacheLine * kCacheLine) : up;
  }

 private:
  uint64_t v_ = 0;
  bool ok_ = true;
};

std::string Hex(uint64_t v) {
  char s[19];
  std::snprintf(s, sizeof s, "0x%016llx", static_cast<unsigned long long>(v));
  return s;
}

// A refusal of the segment: the worker exit code that reports it, and why.
SegmentCheck Refuse(int worker_exit, std::string why) {
  return {Status::Data(std::move(why)), worker_exit};
}

}  // namespace

uint64_t ConfigFingerprint(const RunConfig& c) {
  const auto* p = reinterpret_cast<const unsigned char*>(&c);
  uint64_t x = 0xCBF29CE484222325ull;  // FNV-1a 64: offset basis and prime
  for (size_t i = 0; i < sizeof c; ++i) x = (x ^ p[i]) * 0x100000001B3ull;
  // FNV's last bytes reach only the low bits: splitmix64's finaliser spreads them over all 64.
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool ComputeLayout(Header* h) {
  const RunConfig& c = h->config;
  h->magic = kMagic;
  h->abi_version = kAbiVersion;
  h->header_size = sizeof(Header);
  h->worker_block_size = sizeof(WorkerBlock);
  h->slot_header_size = sizeof(SlotHeader);
  h->config_size = sizeof(RunConfig);
  h->dtype = kDtypeFloat32;
  h->config_fingerprint = ConfigFingerprint(c);

  const Size vec = (Size(c.param_count) * Size(sizeof(float))).AlignUp();
  const Size workers(c.workers);
  const Size rows = Size::Count(c.rows);
  Size off = Size(sizeof(Header)).AlignUp();
  h->blocks_offset = off.value();
  off = off + (Size(sizeof(WorkerBlock)) * workers).AlignUp();
  h->x_offset = off.value();
  off = off + (rows * Size::Count(c.features) * Size(sizeof(float))).AlignUp();
  h->y_offset = off.value();
  off = off + (rows * Size(sizeof(float))).AlignUp();
  for (int k = 0; k < 2; ++k) {
    h->params_offset[k] = off.value();
    off = off + vec;
  }
  for (uint32_t k = 0; k < kMaxStates; ++k) {
    for (int b = 0; b < 2; ++b) {
      h->state_offset[k][b] = k < c.optim.num_states ? off.value() : 0;
      if (k < c.optim.num_states) off = off + vec;
    }
  }
  h->slots_offset = off.value();
  const Size stats = (Size(c.stats_count) * Size(sizeof(double))).AlignUp();
  const Size slot_stride = Size(sizeof(SlotHeader)) + vec + stats;
  h->slot_stride = slot_stride.value();
  off = off + slot_stride * workers;
  h->snapshot_offset = c.eval_every > 0 ? off.value() : 0;
  h->snapshot_stride = vec.value();
  if (c.eval_every > 0) off = off + vec * Size::Count(c.snapshots);
  // With one worker per host the host's sum is that worker's gradient: HS is slot 0's.
  if (c.hosts > 1) {
    h->host_sum_offset =
        c.workers == 1 ? (Size(h->slots_offset) + Size(sizeof(SlotHeader))).value() : off.value();
    if (c.workers > 1) off = off + vec;
    h->global_sum_offset = off.value();
    off = off + vec;
  } else {
    h->host_sum_offset = 0;
    h->global_sum_offset = 0;
  }
  h->global_stats_offset = c.hosts > 1 && c.stats_count > 0 ? off.value() : 0;
  if (h->global_stats_offset != 0) off = off + stats;
  h->total_size = off.value();
  return off.ok();
}

std::string SegmentPrefixForUser() { return "shmtrain-" + std::to_string(getuid()) + "-"; }

std::string MakeSegmentName() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  return "/" + SegmentPrefixForUser() + std::to_string(getpid()) + "-" + hex;
}

uint64_t ProcessStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(in, s)) return 0;
  // The command name (field 2) may contain spaces and parentheses: fields resume after the
  // last ')'. Field 3 follows it; field 22 is 19 fields further.
  const size_t p = s.rfind(')');
  if (p == std::string::npos) return 0;
  std::istringstream rest(s.substr(p + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

namespace {

// Reads the size and, when the header is readable, the creator of segment info->name into
// *info. Returns whether *start_time was read too. Opens read-only and maps the header only.
bool ReadCreator(SegmentInfo* info, uint64_t* start_time) {
  // A segment that cannot be read is listed by its name alone: its Status is not wanted here.
  std::optional<bip::shared_memory_object> shm;
  if (!OpenShm("/" + info->name, bip::read_only, &shm).ok()) return false;
  info->bytes = SizeOf(*shm);
  if (info->bytes < sizeof(Header)) return false;
  std::unique_ptr<bip::mapped_region> region;
  if (!Map(*shm, bip::read_only, sizeof(Header), &region).ok()) return false;
  const auto* h = static_cast<const Header*>(region->get_address());
  if (h->magic != kMagic) return false;
  info->creator_pid = h->creator_pid;
  *start_time = h->creator_start_time;
  return true;
}

}  // namespace

std::vector<SegmentInfo> ListSegments() {
  std::vector<SegmentInfo> out;
  const std::string prefix = SegmentPrefixForUser();
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    SegmentInfo info;
    info.name = name;
    // The creator: from the header when it is readable, else from the name's pid field.
    info.creator_pid = std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
    uint64_t start_time = 0;
    const bool have_start = ReadCreator(&info, &start_time);
    const pid_t pid = static_cast<pid_t>(info.creator_pid);
    const bool exists = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
    if (!exists) {
      info.why = "its creator, pid " + std::to_string(info.creator_pid) + ", is gone";
    } else if (have_start && ProcessStartTime(pid) != start_time) {
      info.why = "pid " + std::to_string(info.creator_pid) + " now belongs to another process";
    } else {
      info.live = true;
    }
    out.push_back(std::move(info));
  }
  closedir(dir);
  return out;
}

std::vector<SegmentInfo> ReclaimStaleSegments() {
  std::vector<SegmentInfo> removed;
  for (SegmentInfo& s : ListSegments()) {
    if (!s.live && RemoveSegment(s.name)) removed.push_back(std::move(s));
  }
  return removed;
}

bool RemoveSegment(const std::string& name) {
  return bip::shared_memory_object::remove(name.c_str());
}

namespace {

// The config's model as far as the layout needs it: its text ends within its field, its
// input's dimensions are 1 to kMaxWidth. The text's layers, their shapes and counts are the
// worker's reading of its model (worker::ReadRunModel).
ConfigCheck CheckModelFields(const RunConfig& c) {
  auto bad = [](ConfigPart part, const std::string& what) {
    return ConfigCheck{Status::Data("model: " + what), part};
  };
  if (std::memchr(c.model, '\0', sizeof c.model) == nullptr) {
    return bad(ConfigPart::kModel, "a model text without its end");
  }
  for (int64_t d : c.input_shape) {
    if (d < 1 || d > kMaxWidth) {
      return bad(ConfigPart::kInput, "input " + std::to_string(c.input_shape[0]) + "x" +
                                         std::to_string(c.input_shape[1]) + "x" +
                                         std::to_string(c.input_shape[2]) + " has a dimension of " +
                                         std::to_string(d) + " (each must be 1 to " +
                                         std::to_string(kMaxWidth) + ")");
    }
  }
  return {};
}

// The products' inputs: a known precision (whether this CPU has its kernels is
// data::CheckRunOptions', which the master and each worker make on their own CPU).
ConfigCheck CheckPrecision(const RunConfig& c) {
  if (c.precision > static_cast<uint32_t>(ComputeType::kBf16)) {
    return {Status::Data("precision " + std::to_string(c.precision)), ConfigPart::kPrecision};
  }
  return {};
}

}  // namespace

ConfigCheck CheckRunConfig(const RunConfig& c) {
  auto bad = [](ConfigPart part, const std::string& what) {
    return ConfigCheck{Status::Data(what), part};
  };
  if (c.workers < 1 || c.workers > static_cast<uint32_t>(kMaxWorkers)) {
    return bad(ConfigPart::kProcesses,
               std::to_string(c.workers) + " workers (1 to " + std::to_string(kMaxWorkers) + ")");
  }
  if (c.hosts < 1 || c.host_index >= c.hosts) {
    return bad(ConfigPart::kProcesses,
               "host " + std::to_string(c.host_index) + " of " + std::to_string(c.hosts));
  }
  if (ConfigCheck m = CheckModelFields(c); !m.ok()) return m;
  if (c.rows < 0) return bad(ConfigPart::kData, std::to_string(c.rows) + " rows");
  if (ConfigCheck p = CheckPrecision(c); !p.ok()) return p;
  if (c.optim.num_states > static_cast<uint32_t>(kMaxStates)) {
    return bad(ConfigPart::kOptimizer, std::to_string(c.optim.num_states) +
                                           " optimizer states (at most " +
                                           std::to_string(kMaxStates) + ")");
  }
  if (c.eval_every < 0) {
    return bad(ConfigPart::kValidation,
               "validation every " + std::to_string(c.eval_every) + " steps");
  }
  if (c.eval_every > 0 && c.snapshots < 2) {
    return bad(ConfigPart::kValidation, "validation snapshots every " +
                                            std::to_string(c.eval_every) + " steps in a ring of " +
                                            std::to_string(c.snapshots) + " (at least 2)");
  }
  Header layout{};
  layout.config = c;
  if (!ComputeLayout(&layout)) {
    return bad(ConfigPart::kData, "its regions add up to more than 2^64 bytes (rows " +
                                      std::to_string(c.rows) + ", features " +
                                      std::to_string(c.features) + ", params " +
                                      std::to_string(c.param_count) + ", snapshots " +
                                      std::to_string(c.snapshots) + ")");
  }
  return {};
}

SegmentCheck Segment::Validate(const Header& h, uint64_t mapped_size) {
  if (mapped_size < sizeof(h.magic) || h.magic != kMagic) {
    return Refuse(kWorkerBadMagic, "not a shmtrain segment (wrong magic number)");
  }
  if (mapped_size < sizeof(Header)) {
    return Refuse(kWorkerBadLayout,
                  "segment is smaller than its header (" + std::to_string(mapped_size) + " bytes)");
  }
  if (h.abi_version != kAbiVersion) {
    return Refuse(kWorkerBadAbi, "segment ABI version " + std::to_string(h.abi_version) +
                                     ", this worker speaks " + std::to_string(kAbiVersion));
  }
  if (h.header_size != sizeof(Header) || h.worker_block_size != sizeof(WorkerBlock) ||
      h.slot_header_size != sizeof(SlotHeader) || h.config_size != sizeof(RunConfig) ||
      h.dtype != kDtypeFloat32) {
    return Refuse(kWorkerBadLayout, "struct sizes or dtype differ from this build");
  }
  // Before anything of the config is read: a config changed after Create is not the master's.
  if (const uint64_t f = ConfigFingerprint(h.config); f != h.config_fingerprint) {
    return Refuse(kWorkerBadLayout, "run configuration fingerprint " + Hex(h.config_fingerprint) +
                                        " does not match its bytes' (" + Hex(f) +
                                        "): the segment's configuration was changed or damaged "
                                        "after it was made");
  }
  if (ConfigCheck check = CheckRunConfig(h.config); !check.ok()) {
    return Refuse(kWorkerBadLayout, "run configuration: " + check.status.message());
  }
  Header expect = h;
  ComputeLayout(&expect);  // fits in 64 bits: CheckRunConfig has laid it out
  if (std::memcmp(&expect, &h, offsetof(Header, config)) != 0) {
    return Refuse(kWorkerBadLayout, "offsets differ from the layout this build computes");
  }
  if (h.total_size != mapped_size) {
    return Refuse(kWorkerBadLayout, "segment is " + std::to_string(mapped_size) +
                                        " bytes, its header says " + std::to_string(h.total_size));
  }
  return {};
}

Status Segment::Create(const std::string& name, const Header& proto, Segment* out) {
  const uint64_t size = proto.total_size;
  if (size < sizeof(Header)) {
    return Status::Resource("cannot create shared memory segment " + name +
                            ": its layout does not fit in 64 bits");
  }
  // create_only is O_CREAT | O_EXCL: never adopt someone else's segment, and on a clash leave
  // it alone. Mode 0600 is set again with fchmod because the umask may have cleared bits of
  // it, and nobody else may read our parameters.
  std::optional<bip::shared_memory_object> shm;
  try {
    shm.emplace(bip::create_only, name.c_str(), bip::read_write, bip::permissions(0600));
  } catch (const bip::interprocess_exception& e) {
    return Status::Resource("cannot create shared memory segment " + name + ": " + Reason(e));
  }
  // From here the name is ours: every failure removes it.
  auto fail = [&](const std::string& what, const std::string& reason) {
    RemoveSegment(name);
    return Status::Resource(what + " (segment " + name + ", " + std::to_string(size) +
                            " bytes): " + reason);
  };
  const int fd = shm->get_mapping_handle().handle;
  if (fchmod(fd, 0600) != 0) return fail("cannot set the segment's mode", Errno(errno));
  try {
    shm->truncate(static_cast<bip::offset_t>(size));
  } catch (const bip::interprocess_exception& e) {
    return fail("cannot size the segment", Reason(e));
  }
  // Reserve every page now: on tmpfs a later page fault past the free space is a SIGBUS.
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(size)); e != 0) {
    return fail("cannot reserve space in /dev/shm", Errno(e));
  }
  std::unique_ptr<bip::mapped_region> region;
  if (Status m = Map(*shm, bip::read_write, size, &region); !m.ok()) {
    return fail("cannot map the segment", m.message());
  }
  Segment s;
  s.Adopt(name, std::move(region), /*owner=*/true);
  std::memcpy(s.base_, &proto, sizeof(Header));
  s.mutable_header()->config_fingerprint = ConfigFingerprint(proto.config);
  for (uint32_t r = 0; r < proto.config.workers; ++r) {
    s.mutable_block(static_cast<int>(r))->grad_sq_step = -1;
    s.mutable_block(static_cast<int>(r))->host_sum_step = -1;
  }
  *out = std::move(s);
  return Status::Ok();
}

SegmentCheck Segment::Attach(const std::string& name, Segment* out) {
  auto cannot = [&](const std::string& what) -> SegmentCheck {
    return {Status::Resource("cannot " + what), kWorkerNoSegment};
  };
  std::optional<bip::shared_memory_object> shm;
  if (Status s = OpenShm(name, bip::read_write, &shm); !s.ok()) {
    return cannot("open segment " + name + ": " + s.message());
  }
  const uint64_t size = SizeOf(*shm);
  if (size == 0) return cannot("size segment " + name);
  std::unique_ptr<bip::mapped_region> region;
  if (Status s = Map(*shm, bip::read_write, size, &region); !s.ok()) {
    return cannot("map segment " + name + ": " + s.message());
  }
  // A header smaller than the mapping is read through a zero-filled copy, never out of bounds.
  // On a refusal the region's destructor unmaps.
  Header h{};
  std::memcpy(&h, region->get_address(), std::min<uint64_t>(size, sizeof(Header)));
  if (SegmentCheck check = Validate(h, size); !check.ok()) {
    check.status = Status::Data("segment " + name + ": " + check.status.message());
    return check;
  }
  Segment s;
  s.Adopt(name, std::move(region), /*owner=*/false);
  *out = std::move(s);
  return {};
}

void Segment::Adopt(const std::string& name, std::unique_ptr<bip::mapped_region> region,
                    bool owner) {
  name_ = name;
  base_ = static_cast<char*>(region->get_address());
  size_ = region->get_size();
  region_ = std::move(region);
  owner_ = owner;
}

void Segment::Unlink() {
  if (owner_ && !name_.empty()) RemoveSegment(name_);
  owner_ = false;
}

void Segment::LeaveMapped() {
  Unlink();
  if (region_ != nullptr) KeepMappedUntilExit(std::move(region_));
}

void Segment::Release() {
  region_.reset();  // unmaps, unless LeaveMapped gave the mapping away
  Unlink();
  base_ = nullptr;
  size_ = 0;
}

Segment::Segment() = default;

Segment::~Segment() { Release(); }

Segment::Segment(Segment&& o) noexcept { *this = std::move(o); }

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    Release();
    name_ = std::move(o.name_);
    region_ = std::move(o.region_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

}  // namespace shmtrain::shm
