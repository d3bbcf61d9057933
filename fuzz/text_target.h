// The CSV and LIBSVM targets (data/csv.cc, data/csv_cells.cc, data/libsvm.cc,
// data/line_blocks.cc): the input is the file. The options of a load come from a hash of the
// input, so that one file always replays the same calls: the training path (features from the
// file, check_size refusing more than 2^22 floats, as the master refuses what does not fit) or
// the predict / held-out path (a model's width, no check_size), regression or classification,
// header auto, yes or no.
//
// A load in one block (LoadFile's text path, LoadText, with 64 KiB blocks) must give the same
// result as one with blocks of a few bytes, parsed by one thread or two: the same rows, or
// the same message. Block size and threads are tuning, never a change of result. (LoadFile
// itself always reads 8 MiB blocks, which would make every run fault in 8 MiB of pages: a
// TextTuning argument to LoadFile, or blocks no larger than the file, would let the target
// call it.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "data/dataset.h"
#include "data/format.h"
#include "data/text_load.h"
#include "fuzz/fuzz_util.h"

namespace shmtrain::fuzz {

inline bool SameRows(const data::Dataset& a, const data::Dataset& b) {
  return a.rows == b.rows && a.features == b.features && SameBits(a.x, b.x) &&
         SameBits(a.y, b.y) && a.classes.names == b.classes.names;
}

// `name`: the format's (data/format.h), "csv" or "libsvm".
inline int RunTextTarget(const uint8_t* data, size_t size, const char* name, const char* suffix) {
  const InputFile file(name, suffix, data, size);
  const uint64_t h = Hash(data, size);
  data::LoadOptions opts;
  // auto a quarter of the time: the content then decides between CSV and LIBSVM.
  opts.file.format = (h & 3) == 0 ? "" : name;
  opts.task = (h >> 2 & 1) ? Task::kClassification : Task::kRegression;
  opts.file.header = static_cast<HeaderMode>((h >> 3) % 3);
  if (h >> 5 & 1) {
    opts.features = static_cast<int>(1 + (h >> 6) % 8);
    opts.libsvm_features = opts.features;
    opts.no_labels = (h >> 9 & 1) != 0;
  } else {
    opts.check_size = [](int64_t rows, int features) {
      if (rows < 0 || features < 0) return Status::Data("check_size: a negative shape");
      if (rows * static_cast<int64_t>(features) > (int64_t{1} << 22)) {
        return Status::Resource("check_size: too large for this run");
      }
      return Status::Ok();
    };
  }
  if (h >> 10 & 1) opts.file.label_col = 0;

  // auto on an array file's magic: LoadFile would read an array, which LoadText never does.
  if (opts.file.format.empty() && data::DetectFormat(file.path()).def != nullptr &&
      !data::DetectFormat(file.path()).def->text()) {
    return 0;
  }
  // LoadFile's text path with 64 KiB blocks instead of its 8 MiB: the whole input is still one
  // block, and a run does not fault in 8 MiB of fresh pages (ASan maps large blocks anew).
  data::TextTuning one_block;
  one_block.block_bytes = size_t{64} << 10;
  one_block.threads = 1;
  data::Dataset whole;
  const Status a = data::LoadText(file.path(), opts, one_block, &whole);
  if (a.ok()) {
    SHMTRAIN_FUZZ_CHECK(whole.x.size() == static_cast<size_t>(whole.rows) * whole.features &&
                            (opts.no_labels || whole.y.size() == static_cast<size_t>(whole.rows)),
                        "%lld rows x %d features in %zu floats, %zu labels",
                        static_cast<long long>(whole.rows), whole.features, whole.x.size(),
                        whole.y.size());
  }
  // One thread on blocks of 1..64 bytes, or two threads, each on part of every block, on
  // blocks of 32..543 bytes (a thread per block of a few bytes would make every run slow).
  data::TextTuning tiny;
  tiny.threads = (h >> 11 & 1) ? 2 : 1;
  tiny.block_bytes = tiny.threads == 1 ? 1 + (h >> 12) % 64 : 32 + (h >> 12) % 512;
  tiny.min_split_bytes = 1;
  data::Dataset blocks;
  const Status b = data::LoadText(file.path(), opts, tiny, &blocks);
  SHMTRAIN_FUZZ_CHECK(a.ok() == b.ok() && a.message() == b.message(),
                      "block size %zu, %d thread(s), changed the result:\n  whole: %s\n  "
                      "blocks: %s",
                      tiny.block_bytes, tiny.threads, a.ok() ? "ok" : a.message().c_str(),
                      b.ok() ? "ok" : b.message().c_str());
  SHMTRAIN_FUZZ_CHECK(!a.ok() || SameRows(whole, blocks),
                      "block size %zu, %d thread(s): the same file gave other rows",
                      tiny.block_bytes, tiny.threads);
  return 0;
}

}  // namespace shmtrain::fuzz
