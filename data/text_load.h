// The text formats' loaders (CSV in data/csv.cc, LIBSVM in data/libsvm.cc) and how a load reads
// its file. Internal to data/; LoadFile (data/dataset.h) is the entry point, and tests reach
// the block size and the threads through LoadText.
#pragma once

#include <cstddef>
#include <string>

#include "data/dataset.h"
#include "data/line_blocks.h"

namespace shmtrain::data {

struct TextTuning {
  // The file is read and parsed this many bytes at a time (more when a line is longer): a CSV
  // load's memory beyond its result is the block and the second thread's two parts of one,
  // at most three blocks (measured: Fashion-MNIST's CSV peaks at 1.3 x its float32 size).
  size_t block_bytes = size_t{8} << 20;
  // CSV rows are parsed by this many threads, each on whole lines of a block: 1 or 2; 0 = 2
  // when the machine has 2 cores or more, else 1.
  int threads = 0;
  // A block is shared between threads only from this size on: below, a thread costs more than
  // it saves.
  size_t min_split_bytes = size_t{1} << 20;
};

// The text path of LoadFile: a text format of data/format.h (opts.file.format; else the one
// the name says, else the first whose by_lines takes the first block, else CSV), read in
// blocks; the data-format flags are checked against it. The options LoadFile checks first
// (label column, delimiter) must be valid.
Status LoadText(const std::string& path, const LoadOptions& opts, const TextTuning& tuning,
                Dataset* out);

// The loaders, from an opened file whose first block holds the lines that decide its format
// and delimiter (or all of it).
Status LoadCsv(const std::string& path, LineBlocks* src, const LoadOptions& opts,
               const TextTuning& tuning, Dataset* out);
Status LoadLibsvm(const std::string& path, LineBlocks* src, const LoadOptions& opts,
                  Dataset* out);

}  // namespace shmtrain::data
