#include "shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "shmtrain/model_spec.h"

namespace shmtrain::shm {
namespace {

uint64_t AlignUp(uint64_t v) { return (v + kCacheLine - 1) / kCacheLine * kCacheLine; }

std::string Errno(int e) { return std::strerror(e); }

uint64_t ParamCountOf(const RunConfig& c) {
  uint64_t n = 0;
  for (uint32_t l = 0; l + 1 < c.num_layers && l + 1 < static_cast<uint32_t>(kMaxLayers); ++l) {
    n += static_cast<uint64_t>(c.layers[l + 1]) * (static_cast<uint64_t>(c.layers[l]) + 1);
  }
  return n;
}

}  // namespace

void ComputeLayout(Header* h) {
  const RunConfig& c = h->config;
  h->magic = kMagic;
  h->abi_version = kAbiVersion;
  h->header_size = sizeof(Header);
  h->worker_block_size = sizeof(WorkerBlock);
  h->slot_header_size = sizeof(SlotHeader);
  h->config_size = sizeof(RunConfig);
  h->dtype = kDtypeFloat32;

  const uint64_t n = c.param_count;
  const uint64_t vec = AlignUp(n * sizeof(float));
  uint64_t off = AlignUp(sizeof(Header));
  h->blocks_offset = off;
  off += AlignUp(sizeof(WorkerBlock) * c.workers);
  h->x_offset = off;
  off += AlignUp(static_cast<uint64_t>(c.rows) * c.features * sizeof(float));
  h->y_offset = off;
  off += AlignUp(static_cast<uint64_t>(c.rows) * sizeof(float));
  for (int k = 0; k < 2; ++k) {
    h->params_offset[k] = off;
    off += vec;
  }
  for (uint32_t k = 0; k < kMaxStates; ++k) {
    for (int b = 0; b < 2; ++b) {
      h->state_offset[k][b] = k < c.optim.num_states ? off : 0;
      if (k < c.optim.num_states) off += vec;
    }
  }
  h->slots_offset = off;
  h->slot_stride = sizeof(SlotHeader) + vec;
  off += h->slot_stride * c.workers;
  h->snapshot_offset = c.eval_every > 0 ? off : 0;
  h->snapshot_stride = vec;
  if (c.eval_every > 0) off += vec * static_cast<uint64_t>(c.snapshots);
  // With one worker per host the host's sum is that worker's gradient: HS is slot 0's.
  if (c.hosts > 1) {
    h->host_sum_offset = c.workers == 1 ? h->slots_offset + sizeof(SlotHeader) : off;
    if (c.workers > 1) off += vec;
    h->global_sum_offset = off;
    off += vec;
  } else {
    h->host_sum_offset = 0;
    h->global_sum_offset = 0;
  }
  h->total_size = off;
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
    bool have_start = false;
    const int fd = shm_open(("/" + name).c_str(), O_RDONLY, 0);
    if (fd >= 0) {
      struct stat st {};
      if (fstat(fd, &st) == 0) info.bytes = static_cast<uint64_t>(st.st_size);
      if (info.bytes >= sizeof(Header)) {
        void* p = mmap(nullptr, sizeof(Header), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          const auto* h = static_cast<const Header*>(p);
          if (h->magic == kMagic) {
            info.creator_pid = h->creator_pid;
            start_time = h->creator_start_time;
            have_start = true;
          }
          munmap(p, sizeof(Header));
        }
      }
      close(fd);
    }
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
    if (!s.live && shm_unlink(("/" + s.name).c_str()) == 0) removed.push_back(std::move(s));
  }
  return removed;
}

int Segment::Validate(const Header& h, uint64_t mapped_size, std::string* why) {
  if (mapped_size < sizeof(h.magic) || h.magic != kMagic) {
    *why = "not a shmtrain segment (wrong magic number)";
    return kWorkerBadMagic;
  }
  if (mapped_size < sizeof(Header)) {
    *why = "segment is smaller than its header (" + std::to_string(mapped_size) + " bytes)";
    return kWorkerBadLayout;
  }
  if (h.abi_version != kAbiVersion) {
    *why = "segment ABI version " + std::to_string(h.abi_version) + ", this worker speaks " +
           std::to_string(kAbiVersion);
    return kWorkerBadAbi;
  }
  if (h.header_size != sizeof(Header) || h.worker_block_size != sizeof(WorkerBlock) ||
      h.slot_header_size != sizeof(SlotHeader) || h.config_size != sizeof(RunConfig) ||
      h.dtype != kDtypeFloat32) {
    *why = "struct sizes or dtype differ from this build";
    return kWorkerBadLayout;
  }
  const RunConfig& c = h.config;
  if (c.workers < 1 || c.workers > static_cast<uint32_t>(kMaxWorkers) || c.num_layers < 2 ||
      c.num_layers > static_cast<uint32_t>(kMaxLayers) || c.rows < 0 || c.features < 1 ||
      c.param_count != ParamCountOf(c) || c.optim.num_states > static_cast<uint32_t>(kMaxStates) ||
      c.hosts < 1 || c.host_index >= c.hosts) {
    *why = "run configuration is inconsistent";
    return kWorkerBadLayout;
  }
  Header expect = h;
  ComputeLayout(&expect);
  if (std::memcmp(&expect, &h, offsetof(Header, config)) != 0) {
    *why = "offsets differ from the layout this build computes";
    return kWorkerBadLayout;
  }
  if (h.total_size != mapped_size) {
    *why = "segment is " + std::to_string(mapped_size) + " bytes, its header says " +
           std::to_string(h.total_size);
    return kWorkerBadLayout;
  }
  return kWorkerOk;
}

Status Segment::Create(const std::string& name, const Header& proto, Segment* out) {
  const uint64_t size = proto.total_size;
  // O_EXCL: never adopt someone else's segment. Mode 0600 is set again with fchmod because
  // the umask may have cleared bits of it, and nobody else may read our parameters.
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    const int e = errno;
    return Status::Resource("cannot create shared memory segment " + name + ": " + Errno(e));
  }
  auto fail = [&](const std::string& what, int e) {
    close(fd);
    shm_unlink(name.c_str());
    return Status::Resource(what + " (segment " + name + ", " + std::to_string(size) +
                            " bytes): " + Errno(e));
  };
  if (fchmod(fd, 0600) != 0) return fail("cannot set the segment's mode", errno);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) return fail("cannot size the segment", errno);
  // Reserve every page now: on tmpfs a later page fault past the free space is a SIGBUS.
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(size)); e != 0) {
    return fail("cannot reserve space in /dev/shm", e);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("cannot map the segment", errno);
  close(fd);
  Segment s;
  s.name_ = name;
  s.base_ = static_cast<char*>(p);
  s.size_ = size;
  s.owner_ = true;
  std::memcpy(s.base_, &proto, sizeof(Header));
  for (uint32_t r = 0; r < proto.config.workers; ++r) {
    s.block(static_cast<int>(r))->grad_sq_step = -1;
    s.block(static_cast<int>(r))->host_sum_step = -1;
  }
  *out = std::move(s);
  return Status::Ok();
}

int Segment::Attach(const std::string& name, Segment* out, std::string* why) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    *why = "cannot open segment " + name + ": " + Errno(errno);
    return kWorkerNoSegment;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    *why = "cannot size segment " + name;
    close(fd);
    return kWorkerNoSegment;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    *why = "cannot map segment " + name + ": " + Errno(errno);
    return kWorkerNoSegment;
  }
  // A header smaller than the mapping is read through a zero-filled copy, never out of bounds.
  Header h{};
  std::memcpy(&h, p, std::min<uint64_t>(size, sizeof(Header)));
  const int code = Validate(h, size, why);
  if (code != kWorkerOk) {
    munmap(p, size);
    return code;
  }
  Segment s;
  s.name_ = name;
  s.base_ = static_cast<char*>(p);
  s.size_ = size;
  s.owner_ = false;
  *out = std::move(s);
  return kWorkerOk;
}

void Segment::Unlink() {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

void Segment::LeaveMapped() {
  Unlink();
  base_ = nullptr;
  size_ = 0;
}

void Segment::Release() {
  if (base_ != nullptr) munmap(base_, size_);
  Unlink();
  base_ = nullptr;
  size_ = 0;
}

Segment::~Segment() { Release(); }

Segment::Segment(Segment&& o) noexcept { *this = std::move(o); }

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    Release();
    name_ = std::move(o.name_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

}  // namespace shmtrain::shm
