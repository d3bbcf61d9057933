// The data-format seam: one DataFormatDef per format, a registry, and what the rest of the
// program asks of a format through it: --format's names, detection, which data-format flags
// apply, the sample shape a header gives, and the loader.
//
// A format is recognised by its name (the path without ".gz"), then by its first bytes (after
// gunzip when it allows gzip), or, a directory, by the directory itself; a text format read in
// line blocks (CSV, LIBSVM) is told apart by its first lines once the text loader has them,
// and a text format without a test of its lines (CSV) takes any text. Adding one: its
// definition in its own file, one line in Formats() (data/format.cc), CMake, its test, its
// paragraph in docs/data.md.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

class LineBlocks;
struct TextTuning;

// The first bytes of a file that by_bytes sees: enough for every magic number.
inline constexpr size_t kHeadBytes = 6;

// Every definition is constinit (no member needs code to run): the registry is whole even
// for what reads it while the program's statics are initialised (the flag table).
struct DataFormatDef {
  const char* name;                  // --format NAME (also in messages: "--format idx")
  // Accepted by --format, never printed ("svmlight"); up to the first nullptr.
  std::array<const char*, 2> aliases = {};
  // How messages name it: what its flags apply to ("CSV files", "NumPy data": flags taken by
  // several formats list them as "IDX and NumPy data"), what it is ("this " + what: "file is
  // CSV", "is IDX data") and where its labels are ("whose labels " + labels: "are in the
  // file").
  const char* noun;
  const char* what;
  const char* labels;
  // The data-format flags (DataFormatFlags()) that apply to it, up to the first nullptr.
  std::array<const char*, 8> flags = {};
  // Recognition; null: never this way. by_name sees the path without a final ".gz"; by_bytes
  // the first kHeadBytes bytes of a regular file, and of its inflated bytes when gzip is set.
  bool (*by_name)(std::string_view name) = nullptr;
  bool (*by_bytes)(std::string_view head) = nullptr;
  bool gzip = false;
  bool (*by_dir)(const std::string& path) = nullptr;
  // A text format (load is null): read in line blocks by LoadText (data/text_load.h), which
  // gives it the first block of the file to tell it by by_lines (null: any text, which CSV
  // alone takes) and then to load it with load_lines.
  bool (*by_lines)(std::string_view head) = nullptr;
  Status (*load_lines)(const std::string& path, LineBlocks* src, const LoadOptions& opts,
                       const TextTuning& tuning, Dataset* out) = nullptr;
  // Any other format: the whole load. Errors as LoadFile (data/dataset.h) states them.
  Status (*load)(const std::string& path, const LoadOptions& opts, Dataset* out) = nullptr;
  // The shape of one sample (the dimensions after the rows) from the file's header without
  // loading it; null: flat data, whose width its rows give.
  Status (*sample_shape)(const std::string& path, const LoadOptions& opts,
                         std::vector<int64_t>* dims) = nullptr;

  bool text() const { return load == nullptr; }
  bool Takes(std::string_view flag) const;
};

// Every format, in --help order.
const std::vector<const DataFormatDef*>& Formats();
// The format of this name or alias; nullptr when unknown.
const DataFormatDef* FindFormat(std::string_view name);
// --format's value: "auto" is nullptr (by name, then by content), else FindFormat's; nullopt
// when unknown.
std::optional<const DataFormatDef*> ParseFormat(std::string_view name);
// --format's value as the options hold it (DataFileOptions::format): "" for "auto", else the
// format's own name (an alias's too); nullopt when unknown.
std::optional<std::string> ParseFormatName(std::string_view name);
// The format the options name (DataFileOptions::format); nullptr for auto (or a name no format
// has).
const DataFormatDef* FormatNamed(const DataFileOptions& file);
// "auto" and every format's name, joined by sep: "auto|csv|libsvm|idx|npy|npz".
std::string FormatNames(std::string_view sep);

// Registers a format after the others for the object's lifetime (tests of the seam).
class FormatRegistration {
 public:
  explicit FormatRegistration(const DataFormatDef& def);
  ~FormatRegistration();
  FormatRegistration(const FormatRegistration&) = delete;
  FormatRegistration& operator=(const FormatRegistration&) = delete;

 private:
  const DataFormatDef* def_;
};

// The data-format flags, in checking order, and how LoadOptions holds each when given (a
// value other than its default). labels: the flag says where the labels are (--labels), which
// a format holding its labels takes not.
struct FormatFlag {
  const char* name;
  bool labels;
  bool (*given)(const DataFileOptions& f);
};
const std::vector<FormatFlag>& DataFormatFlags();
// What `flag` applies to, from the formats that take it: "CSV files", "IDX and NumPy data".
std::string AppliesTo(std::string_view flag);

// How a file's format became known.
enum class DetectedBy { kFlag, kName, kContent, kFallback };
struct Detection {
  const DataFormatDef* def = nullptr;  // nullptr: text, which its first lines tell apart
  DetectedBy by = DetectedBy::kFlag;
};
// The text format the name says, else nullptr.
const DataFormatDef* TextFormatByName(std::string_view path);
// The format by the path's name, then (a regular file only: a pipe is never read ahead) by
// its first bytes, or by the directory it is; def nullptr when neither tells (text).
Detection DetectFormat(const std::string& path);
// opts.file.format when given, else DetectFormat(path).
Detection FormatOf(const std::string& path, const LoadOptions& opts);

// The data-format flags given in opts against d's format: Status::Data naming the first that
// does not apply, the file, its format and how that was found ("x.svm: --header applies to CSV
// files; this file is LIBSVM (by its name), whose labels are in the file").
Status CheckFormatFlagsFor(const std::string& path, const Detection& d, const LoadOptions& opts);

// The shape of one sample of the data at `path` from its header (DataFormatDef::sample_shape):
// {28, 28} for IDX images of 28 x 28, {784} for an (n, 784) array. Empty for flat data and for
// what is neither a regular file nor a directory (a pipe is read once, by its loader).
Status SampleShape(const std::string& path, const LoadOptions& opts, std::vector<int64_t>* dims);

// The data-format flags given against --format (the formats' flags above): kUsage naming the
// first that does not apply. The run's options check it (master/plan/validate.h), as do eval and
// predict.
Status CheckFormatFlags(const TrainOptions& o);

}  // namespace shmtrain::data
