// Datasets in memory: the CSV and LIBSVM loaders and the built-in examples.
//
// A Dataset is dense float32, row-major (sample i's features at x[i*features]), one target per
// row. The master loads it once and copies it into the segment; workers read it there.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

// Class labels and class indices. Classification files may label their classes with any
// distinct values: integers 0..K-1, other numbers ("1", "2.5", "-3"), or text ("cat"). The
// map lists the classes in a fixed order (by value when every label is a number, else by the
// bytes of the text) and index k is the model's output k. It is saved with the model, so the
// same label means the same output in eval and predict.
struct ClassMap {
  bool numeric = true;             // compared by value ("3" and "3.0" are one class)
  std::vector<std::string> names;  // class k as written out: the shortest text of its value
  std::vector<double> values;      // numeric: class k's value, ascending

  int size() const { return static_cast<int>(names.size()); }
  // The class of a trimmed label cell, or -1 if it is not one of them.
  int Find(std::string_view cell) const;
  // "a, b, c" for messages: the first `most` names (made Printable, core/utf8.h: a label may hold
  // any bytes), then ", ..." if there are more.
  std::string List(int most = 12) const;
  // The map of these labels (each a trimmed cell): numeric if every one is a finite number.
  static ClassMap Build(const std::vector<std::string_view>& labels);
  // The numeric map of these finite values: the same map as Build() of their texts.
  static ClassMap FromValues(std::vector<double> values);
  // The class of a finite value, or -1 (a text map compares the value's shortest text).
  int FindValue(double v) const;
  // Class names are printable text: they go into predict's CSV, messages and JSON logs, where
  // a control byte (a NUL, a tab, a line break: bytes below 0x20, and 0x7f) would be written
  // raw and cut or break what reads them, and an escaped form would be another name. Ok when
  // `name` is one; else kData saying what is wrong ("holds a control byte (\x00 at byte 1)"),
  // which the loaders and model files prefix with where the name is.
  static Status CheckName(std::string_view name);
};

struct Dataset {
  int64_t rows = 0;
  int features = 0;
  // LIBSVM with features == 0: the width if > 0 (an index beyond it is an error), else the
  // largest index in the file.
  int libsvm_features = 0;
  std::vector<float> x;  // rows * features
  std::vector<float> y;  // rows: the target, or the class index (float) when classifying
  ClassMap classes;      // classification: the map the labels went through; else empty
  // Image folders (data/image_folder.h): each row's file, and the files that were not rows.
  std::vector<std::string> row_names;
  int64_t skipped_files = 0;
  std::string first_skipped;
};

// How LoadFile reads a file: the file's own options (shmtrain/options.h), and what the caller
// knows of the data beforehand.
struct LoadOptions {
  DataFileOptions file;
  Task task = Task::kRegression;
  // Classification: map the labels through this map (a label not in it is an error). Null:
  // build the map from this file's labels.
  const ClassMap* classes = nullptr;
  // > 0: the number of features rows must have (CSV: exactly; LIBSVM: indices 1..features,
  // missing ones are 0). 0: CSV takes it from the columns, LIBSVM from the largest index.
  int features = 0;
  // LIBSVM with features == 0: the width if > 0 (an index beyond it is an error), else the
  // largest index in the file.
  int libsvm_features = 0;
  // predict: labels are not needed. A CSV row may then have `features` cells (no label
  // column) or `features` + 1 (the label column is skipped unread); y stays empty.
  bool no_labels = false;
  // Called once the shape is known and before the rows are stored, with an upper bound of
  // the rows and the features: a non-OK status ends the load with it (big-data refusal). A
  // CSV pipe longer than a block cannot be measured first: it is called after each block with
  // the rows read so far, and at the end with all of them, so the load stops once they would
  // not fit.
  std::function<Status(int64_t rows, int features)> check_size;
  // IDX and NumPy: called with the image shape the features array gives one sample (SampleImage,
  // data/arrays.h), when it gives one, before check_size and before a row is read: a non-OK
  // status ends the load with it (an image of another shape than the model's).
  std::function<Status(const Shape& image)> check_image;
  // Image folders: the decoding threads; 0: the machine's cores, at most 8.
  int threads = 0;
};

// Loads a CSV file (cells separated by ',', ';' or tab, see DataFileOptions::delimiter; RFC 4180
// quotes: a cell in "..." may hold the delimiter, "" stands for '"', and it ends on its line;
// blank lines skipped; surrounding spaces allowed; "\r\n" and a UTF-8 byte order mark
// accepted; header detected or forced, and a header line is never a row) or a LIBSVM/SVMlight
// file ("<label> <index>:<value> ...", indices from 1 and ascending, "#" comments, "qid:"
// tokens ignored; a line with ',' or ';' and no "<index>:<value>" is refused as not LIBSVM)
// into dense float32. A quoted cell reads as its text: a file quoted or not gives the same
// Dataset. Classification labels that are NaN or infinite are refused, as regression targets
// are. Every failure is Status::Data with a message of the form
// "<path>:<line>:<column>: <what>" (line and column 1-based, the column counted in cells;
// column omitted when not about a cell), except check_size's own status. A CSV line that does
// not parse and holds another delimiter (or decimal commas) adds a hint to the message:
// " (the line looks ';'-separated: try --delimiter ';')".
Status LoadFile(const std::string& path, const LoadOptions& opts, Dataset* out);

// The seed's example: n points evenly spaced on [-2, 2] (x_i = -2 + 4i/(n-1); n = 1 gives
// x = 0), y = x^2. One feature.
Dataset MakeParabola(int64_t n);

// A synthetic classification set: `classes` Gaussian clusters in `features` dimensions
// (centres ~ N(0, 1) per coordinate, points = centre + N(0, 0.5^2)), n rows with labels
// i mod classes. Deterministic in seed (nn::Rng). For benchmarks and tests at any size.
Dataset MakeBlobs(int64_t n, int features, int classes, uint64_t seed);

// What tells a load to stop: a function that gives the stop signal's number, 0 while there is
// none: the master's (master/run/signals.h), so that a stop signal ends a run's start within a
// block of its data, not after all of it. It is called from the loaders' threads, so it must
// be thread-safe; null (the default): nothing stops a load.
void SetLoadStop(int (*stop_signal)());
// The stop signal asked for meanwhile, 0 when none.
int LoadStopSignal();
// Ok while no stop is asked for; else kInterrupted, "stopped by SIGTERM while <what>" (the
// master exits 128 + n). Every loader asks between two blocks of its input: the text loaders
// between blocks of lines (data/line_blocks.h), the array readers between blocks of elements
// (data/array_file.h), the image loader between two images.
Status LoadStopped(const std::string& what);
// That kInterrupted for a signal already taken (the image loader's threads keep the one they
// saw).
Status StoppedLoading(int sig, const std::string& what);

}  // namespace shmtrain::data
