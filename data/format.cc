#include "data/format.h"

#include <sys/stat.h>

#include <algorithm>

#include "data/byte_stream.h"
#include "data/text_cells.h"

namespace shmtrain::data {

extern const DataFormatDef kCsvFormat;     // data/csv.cc
extern const DataFormatDef kLibsvmFormat;  // data/libsvm.cc
extern const DataFormatDef kIdxFormat;     // data/arrays.cc
extern const DataFormatDef kNpyFormat;
extern const DataFormatDef kNpzFormat;
extern const DataFormatDef kImagesFormat;  // data/image_folder.cc

namespace {

std::vector<const DataFormatDef*>& Registry() {
  static std::vector<const DataFormatDef*> all = {
      &kCsvFormat, &kLibsvmFormat, &kIdxFormat, &kNpyFormat, &kNpzFormat, &kImagesFormat,
  };
  return all;
}

bool FormatNameEndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string_view WithoutGz(std::string_view name) {
  if (FormatNameEndsWith(name, ".gz")) name.remove_suffix(3);
  return name;
}

const DataFormatDef* ByName(std::string_view path) {
  const std::string_view name = WithoutGz(path);
  for (const DataFormatDef* d : Formats()) {
    if (d->by_name && d->by_name(name)) return d;
  }
  return nullptr;
}

const DataFormatDef* ByBytes(const std::string& path) {
  const std::string head = PeekFile(path, kHeadBytes);
  for (const DataFormatDef* d : Formats()) {
    if (d->by_bytes && d->by_bytes(head)) return d;
  }
  if (head.rfind("\x1f\x8b", 0) != 0) return nullptr;
  // gzip: its inflated bytes tell the format as a plain file's do (text, CSV or LIBSVM, when
  // they start no array; a damaged stream is then refused by the text loader, at its byte).
  const std::string content = PeekContent(path, kHeadBytes);
  for (const DataFormatDef* d : Formats()) {
    if (d->gzip && d->by_bytes && d->by_bytes(content)) return d;
  }
  return nullptr;
}

// "IDX data", "NumPy data" -> "IDX and NumPy data": nouns of one last word share it.
std::string JoinNouns(const std::vector<std::string>& nouns) {
  if (nouns.empty()) return "no data";
  const auto last_word = [](const std::string& n) { return n.substr(n.rfind(' ') + 1); };
  const std::string word = last_word(nouns[0]);
  const bool shared = std::all_of(nouns.begin(), nouns.end(),
                                  [&](const std::string& n) { return last_word(n) == word; });
  std::string s;
  for (size_t i = 0; i < nouns.size(); ++i) {
    if (i > 0) s += i + 1 == nouns.size() ? " and " : ", ";
    s += shared ? nouns[i].substr(0, nouns[i].size() - word.size() - 1) : nouns[i];
  }
  return shared ? s + " " + word : s;
}

const char* HowFound(DetectedBy by) {
  switch (by) {
    case DetectedBy::kName: return " (by its name)";
    case DetectedBy::kContent: return " (by its content)";
    case DetectedBy::kFlag:
    case DetectedBy::kFallback: break;
  }
  return "";
}

}  // namespace

bool DataFormatDef::Takes(std::string_view flag) const {
  for (const char* f : flags) {
    if (f == nullptr) break;
    if (flag == f) return true;
  }
  return false;
}

const std::vector<const DataFormatDef*>& Formats() { return Registry(); }

const DataFormatDef* FindFormat(std::string_view name) {
  for (const DataFormatDef* d : Formats()) {
    if (name == d->name) return d;
    for (const char* a : d->aliases) {
      if (a != nullptr && name == a) return d;
    }
  }
  return nullptr;
}

std::optional<const DataFormatDef*> ParseFormat(std::string_view name) {
  if (name == "auto") return nullptr;
  const DataFormatDef* d = FindFormat(name);
  if (d == nullptr) return std::nullopt;
  return d;
}

std::optional<std::string> ParseFormatName(std::string_view name) {
  const std::optional<const DataFormatDef*> d = ParseFormat(name);
  if (!d.has_value()) return std::nullopt;
  return *d == nullptr ? std::string() : std::string((*d)->name);
}

const DataFormatDef* FormatNamed(const DataFileOptions& file) {
  return file.format.empty() ? nullptr : FindFormat(file.format);
}

std::string FormatNames(std::string_view sep) {
  std::string s = "auto";
  for (const DataFormatDef* d : Formats()) s += std::string(sep) + d->name;
  return s;
}

FormatRegistration::FormatRegistration(const DataFormatDef& def) : def_(&def) {
  Registry().push_back(def_);
}

FormatRegistration::~FormatRegistration() {
  std::vector<const DataFormatDef*>& all = Registry();
  all.erase(std::remove(all.begin(), all.end(), def_), all.end());
}

const std::vector<FormatFlag>& DataFormatFlags() {
  static const std::vector<FormatFlag> all = {
      {"--label-col", false,
       [](const DataFileOptions& f) { return f.label_col != -1 || !f.label_name.empty(); }},
      {"--header", false, [](const DataFileOptions& f) { return f.header != HeaderMode::kAuto; }},
      {"--delimiter", false, [](const DataFileOptions& f) { return f.delimiter != 0; }},
      {"--decimal", false, [](const DataFileOptions& f) { return f.decimal != 0; }},
      {"--labels", true, [](const DataFileOptions& f) { return !f.arrays.labels_path.empty(); }},
  };
  return all;
}

std::string AppliesTo(std::string_view flag) {
  std::vector<std::string> nouns;
  for (const DataFormatDef* d : Formats()) {
    if (d->Takes(flag) && std::find(nouns.begin(), nouns.end(), d->noun) == nouns.end()) {
      nouns.push_back(d->noun);
    }
  }
  return JoinNouns(nouns);
}

const DataFormatDef* TextFormatByName(std::string_view path) {
  const DataFormatDef* d = ByName(path);
  return d != nullptr && d->text() ? d : nullptr;
}

Detection DetectFormat(const std::string& path) {
  if (const DataFormatDef* d = ByName(path)) return {d, DetectedBy::kName};
  // Only a regular file is peeked at: a pipe's bytes would be gone for the loader.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  if (S_ISDIR(st.st_mode)) {
    for (const DataFormatDef* d : Formats()) {
      if (d->by_dir && d->by_dir(path)) return {d, DetectedBy::kContent};
    }
    return {};
  }
  if (!S_ISREG(st.st_mode)) return {};
  if (const DataFormatDef* d = ByBytes(path)) return {d, DetectedBy::kContent};
  return {};
}

Detection FormatOf(const std::string& path, const LoadOptions& opts) {
  if (const DataFormatDef* d = FormatNamed(opts.file)) return {d, DetectedBy::kFlag};
  return DetectFormat(path);
}

Status CheckFormatFlagsFor(const std::string& path, const Detection& d, const LoadOptions& opts) {
  // Text whose lines decide yet: the flags no text format takes, against the one taking any
  // text (CSV); LoadText checks the rest once the lines have told the format.
  Detection as = d;
  bool any_text = false;
  if (as.def == nullptr) {
    for (const DataFormatDef* f : Formats()) {
      if (f->text() && f->by_lines == nullptr) as = {f, DetectedBy::kFallback};
    }
    any_text = true;
  }
  if (as.def == nullptr) return Status::Ok();
  for (const FormatFlag& flag : DataFormatFlags()) {
    if (!flag.given(opts.file) || as.def->Takes(flag.name)) continue;
    if (any_text && std::any_of(Formats().begin(), Formats().end(), [&](const DataFormatDef* f) {
          return f->text() && f->Takes(flag.name);
        })) {
      continue;
    }
    return Status::Data(text::At(path) + flag.name + " applies to " + AppliesTo(flag.name) +
                        "; this " + as.def->what + HowFound(as.by) + ", whose labels " +
                        as.def->labels);
  }
  return Status::Ok();
}

Status SampleShape(const std::string& path, const LoadOptions& opts, std::vector<int64_t>* dims) {
  dims->clear();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
    return Status::Ok();
  }
  const Detection d = FormatOf(path, opts);
  if (d.def == nullptr || d.def->sample_shape == nullptr) return Status::Ok();
  // A directory is read by a format of directories only (any other refuses it as it loads).
  if (S_ISDIR(st.st_mode) && d.def->by_dir == nullptr) return Status::Ok();
  return d.def->sample_shape(path, opts, dims);
}

Status CheckFormatFlags(const TrainOptions& o) {
  const DataFormatDef* d = FormatNamed(o.file);
  if (d == nullptr) return Status::Ok();  // auto: the loader checks the format it finds
  for (const FormatFlag& f : DataFormatFlags()) {
    if (!o.Given(f.name) || d->Takes(f.name)) continue;
    const std::string format = d->name;
    return Status::Usage(std::string(f.name) + ": applies to " + AppliesTo(f.name) +
                         (f.labels ? ", not to --format " + format + " (whose labels " +
                                         d->labels + ")"
                                   : " only, not to --format " + format));
  }
  return Status::Ok();
}

}  // namespace shmtrain::data
