// TensorBoard event files: what `--tensorboard DIR` writes.
//
// A file is a sequence of TFRecords, each one protobuf `tensorboard.Event` (TensorBoard's
// tensorboard/compat/proto/event.proto and summary.proto), encoded here by hand: the few
// fields a scalar needs do not justify libprotobuf. The framing of one record:
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data |
//   uint32 masked CRC-32C of data
// where mask(c) = ((c >> 15) | (c << 17)) + 0xA282EAD8. The first event carries
// file_version "brain.Event:2"; each later one a Summary with one Value {tag, simple_value} at
// the run's step, which TensorBoard shows as a scalar plot (and Weights & Biases and Aim
// import). Fields used (number, wire type):
//   Event    wall_time 1 (double), step 2 (varint), file_version 3 (bytes), summary 5 (bytes)
//   Summary  value 1 (bytes, repeated)
//   Value    tag 1 (bytes), simple_value 2 (float, 32-bit)
//
// Durability: Scalar() only buffers; Flush() writes every buffered record with one write(2)
// to a file opened O_APPEND, so a reader (or a run killed at any moment) sees whole records up
// to the last flush and nothing after it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shmtrain/status.h"

namespace shmtrain::monitoring {

// The masked CRC-32C of TFRecord framing.
uint32_t MaskedCrc32c(std::string_view bytes);
// One record: data framed as above.
std::string TfRecord(std::string_view data);
// The serialized Event that opens a file: wall_time and file_version "brain.Event:2".
std::string FileVersionEvent(double wall_time);
// The serialized Event of one scalar.
std::string ScalarEvent(double wall_time, int64_t step, std::string_view tag, float value);

class EventFile {
 public:
  // Makes dir (and its parents) if missing, then creates in it
  // "events.out.tfevents.<unix seconds>.<hostname>" (".1", ".2", ... appended when that name is
  // taken: a file is never appended to or replaced) and writes the file_version event.
  // kUsage naming --tensorboard and the path when the directory or file cannot be made; the
  // directories this call made are removed again then (those that were there stay).
  static Status Create(const std::string& dir, std::unique_ptr<EventFile>* out);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // Buffers a scalar at step, stamped with the wall clock now.
  void Scalar(std::string_view tag, int64_t step, double value);
  // Writes the buffered records. kResource naming the file when the write fails (what was
  // buffered is dropped; the file keeps its whole records).
  Status Flush();
  // Records written to the file so far, the file_version event included.
  int64_t records() const { return records_; }
  const std::string& path() const { return path_; }
  // Removes the file (a run that ended before it had anything to show), and the directories
  // Create made for it while they are empty.
  void Remove();

 private:
  EventFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
  std::vector<std::string> made_dirs_;  // by Create, outermost first
  std::string pending_;
  int64_t pending_records_ = 0;
  int64_t records_ = 0;
};

}  // namespace shmtrain::monitoring
