#include "monitoring/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/bytes.h"
#include "core/crc32.h"
#include "core/protobuf.h"

namespace shmtrain::monitoring {
namespace {

constexpr char kFileVersion[] = "brain.Event:2";

using protobuf::BytesField;
using protobuf::DoubleField;
using protobuf::FloatField;
using protobuf::IntField;

// Event's wall_time (1) and step (2), which every event starts with.
std::string EventHead(double wall_time, int64_t step) {
  std::string e;
  DoubleField(&e, 1, wall_time);
  if (step != 0) IntField(&e, 2, step);  // proto3 leaves a zero scalar out
  return e;
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t MaskedCrc32c(std::string_view bytes) {
  const uint32_t c = Crc32c(bytes.data(), bytes.size());
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string TfRecord(std::string_view data) {
  std::string r;
  r.reserve(data.size() + 16);
  AppendRaw<uint64_t>(&r, data.size());
  AppendRaw<uint32_t>(&r, MaskedCrc32c(r));
  r.append(data);
  AppendRaw<uint32_t>(&r, MaskedCrc32c(data));
  return r;
}

std::string FileVersionEvent(double wall_time) {
  std::string e = EventHead(wall_time, 0);
  BytesField(&e, 3, kFileVersion);
  return e;
}

std::string ScalarEvent(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  BytesField(&v, 1, tag);
  FloatField(&v, 2, value);
  std::string summary;
  BytesField(&summary, 1, v);
  std::string e = EventHead(wall_time, step);
  BytesField(&e, 5, summary);
  return e;
}

namespace {

// Makes dir and its missing parents, as create_directories does, and appends the ones this
// call made to *made, outermost first: what a refusal removes again, and nothing that was
// there before (nor a directory another process made meanwhile).
std::error_code MakeDirectories(const std::string& dir, std::vector<std::string>* made) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "a/b/" names "a/b"
  std::vector<std::filesystem::path> missing;
  for (; !p.empty(); p = p.parent_path()) {
    std::error_code ec;
    if (std::filesystem::symlink_status(p, ec).type() != std::filesystem::file_type::not_found) {
      break;
    }
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    std::error_code ec;
    const bool created = std::filesystem::create_directory(*it, ec);
    if (ec) return ec;
    if (created) made->push_back(it->string());
  }
  // What exists must be a directory (create_directories' own check of the last part).
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) && !ec) {
    ec = std::make_error_code(std::errc::not_a_directory);
  }
  return ec;
}

// Removes the directories of `made`, innermost first, each only while it is empty.
void RemoveMade(const std::vector<std::string>& made) {
  for (auto it = made.rbegin(); it != made.rend(); ++it) {
    if (rmdir(it->c_str()) != 0) return;
  }
}

}  // namespace

Status EventFile::Create(const std::string& dir, std::unique_ptr<EventFile>* out) {
  std::vector<std::string> made;
  auto bad = [&](const std::string& path, const std::string& why) {
    RemoveMade(made);
    return Status::Usage("--tensorboard " + dir + ": cannot create " + path + ": " + why);
  };
  if (std::error_code ec = MakeDirectories(dir, &made)) return bad("the directory", ec.message());
  const double now = UnixNow();
  const std::string base = (std::filesystem::path(dir) / "events.out.tfevents.").string() +
                           std::to_string(static_cast<int64_t>(now)) + "." + HostName();
  std::string path = base;
  int fd = -1;
  for (int n = 1; fd < 0; ++n) {
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || n > 1000)) return bad(path, std::strerror(errno));
    if (fd < 0) path = base + "." + std::to_string(n);
  }
  std::unique_ptr<EventFile> f(new EventFile(fd, path));
  f->made_dirs_ = made;
  f->pending_ = TfRecord(FileVersionEvent(now));
  f->pending_records_ = 1;
  if (Status s = f->Flush(); !s.ok()) {
    f->Remove();
    return bad(path, s.message());
  }
  *out = std::move(f);
  return Status::Ok();
}

EventFile::~EventFile() {
  if (fd_ >= 0) close(fd_);
}

void EventFile::Scalar(std::string_view tag, int64_t step, double value) {
  pending_ += TfRecord(ScalarEvent(UnixNow(), step, tag, static_cast<float>(value)));
  ++pending_records_;
}

Status EventFile::Flush() {
  if (pending_.empty() || fd_ < 0) return Status::Ok();
  const std::string data = std::move(pending_);
  const int64_t n = pending_records_;
  pending_.clear();
  pending_records_ = 0;
  // One write(2) of whole records: a regular file takes it whole or, on a full disk, a part
  // that is cut back below, so the file never ends in the middle of a record.
  const off_t before = lseek(fd_, 0, SEEK_END);
  ssize_t w;
  do {
    w = write(fd_, data.data(), data.size());
  } while (w < 0 && errno == EINTR);
  if (w == static_cast<ssize_t>(data.size())) {
    records_ += n;
    return Status::Ok();
  }
  const std::string why = w < 0 ? std::strerror(errno) : "short write (disk full?)";
  if (before >= 0 && ftruncate(fd_, before) != 0) {
    // the cut failed too: the reader stops at the torn record, as TensorBoard does
  }
  return Status::Resource("cannot write " + path_ + ": " + why);
}

void EventFile::Remove() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  unlink(path_.c_str());
  RemoveMade(made_dirs_);
}

}  // namespace shmtrain::monitoring
