#include "data/dataset.h"

#include "core/decimal.h"
#include "core/signal_name.h"
#include "core/utf8.h"
#include "data/format.h"
#include "data/text_cells.h"
#include "data/text_load.h"
#include "nn/rng.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <string_view>

namespace shmtrain::data {
namespace {

using text::At;
using text::Cell;
using text::ParseCell;
using text::Quote;
using text::Trim;

// Whether `text` holds what the text formats' by_lines and the CSV delimiter detection look at: two
// non-blank lines, one of them neither blank nor a '#' comment.
bool HeadDecides(std::string_view text) {
  int nonblank = 0;
  bool data = false;
  while (!text.empty() && !(nonblank >= 2 && data)) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    line = Trim(text::DropCr(line));
    if (line.empty()) continue;
    ++nonblank;
    data = data || line[0] != '#';
  }
  return nonblank >= 2 && data;
}

}  // namespace

int ClassMap::Find(std::string_view cell) const {
  if (!numeric) {
    const auto it = std::lower_bound(names.begin(), names.end(), cell);
    return it != names.end() && *it == cell ? static_cast<int>(it - names.begin()) : -1;
  }
  double v = 0;
  if (ParseCell(cell, &v) != Cell::kOk) return -1;
  const auto it = std::lower_bound(values.begin(), values.end(), v);
  return it != values.end() && *it == v ? static_cast<int>(it - values.begin()) : -1;
}

std::string ClassMap::List(int most) const {
  std::string s;
  for (int k = 0; k < size() && k < most; ++k) s += (k ? ", " : "") + Printable(names[k]);
  if (size() > most) s += ", ...";
  return s;
}

ClassMap ClassMap::Build(const std::vector<std::string_view>& labels) {
  ClassMap m;
  for (std::string_view l : labels) {
    double v = 0;
    if (ParseCell(l, &v) != Cell::kOk) {
      m.numeric = false;
      break;
    }
    m.values.push_back(v == 0 ? 0.0 : v);  // -0 and 0 are one class
  }
  if (m.numeric) {
    std::sort(m.values.begin(), m.values.end());
    m.values.erase(std::unique(m.values.begin(), m.values.end()), m.values.end());
    for (double v : m.values) m.names.push_back(ShortestText(v));
  } else {
    m.values.clear();
    std::vector<std::string_view> t(labels);
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
    m.names.assign(t.begin(), t.end());
  }
  return m;
}

ClassMap ClassMap::FromValues(std::vector<double> values) {
  ClassMap m;
  for (double& v : values) v = v == 0 ? 0.0 : v;  // -0 and 0 are one class
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  for (double v : values) m.names.push_back(ShortestText(v));
  m.values = std::move(values);
  return m;
}

Status ClassMap::CheckName(std::string_view name) {
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c != 0x7f) continue;
    return Status::Data("holds a control byte (" + EscapedByte(c) + " at byte " +
                        std::to_string(i) + ")");
  }
  return Status::Ok();
}

int ClassMap::FindValue(double v) const {
  if (!numeric) return Find(ShortestText(v));
  const auto it = std::lower_bound(values.begin(), values.end(), v);
  return it != values.end() && *it == v ? static_cast<int>(it - values.begin()) : -1;
}

Status LoadFile(const std::string& path, const LoadOptions& opts, Dataset* out) {
  const DataFileOptions& f = opts.file;
  // Option errors first: they do not depend on the file.
  if (f.label_col < -1) {
    return Status::Data(At(path) + "label column " + std::to_string(f.label_col) +
                        " is invalid (use -1 for the last column)");
  }
  if (f.delimiter != 0 && f.delimiter != ',' && f.delimiter != ';' && f.delimiter != '\t') {
    return Status::Data(At(path) + "delimiter " + Quote(std::string_view(&f.delimiter, 1)) +
                        " is not supported (use ',', ';' or tab)");
  }
  if (f.decimal != 0 && f.decimal != '.' && f.decimal != ',') {
    return Status::Data(At(path) + "decimal separator " + Quote(std::string_view(&f.decimal, 1)) +
                        " is not supported (use '.' or ',')");
  }
  if (f.decimal == ',' && f.delimiter == ',') {
    return Status::Data(At(path) + "decimal separator ',' needs another delimiter than ',' (';' "
                        "or tab)");
  }
  const Detection d = FormatOf(path, opts);
  if (Status s = CheckFormatFlagsFor(path, d, opts); !s.ok()) return s;
  if (d.def != nullptr && !d.def->text()) return d.def->load(path, opts, out);
  return LoadText(path, opts, TextTuning{}, out);  // the lines decide, or as given or named
}

Status LoadText(const std::string& path, const LoadOptions& opts, const TextTuning& tuning,
                Dataset* out) {
  LineBlocks src(path, tuning.block_bytes);
  if (Status s = src.Open(); !s.ok()) return s;
  if (src.file_empty()) return Status::Data(At(path) + "file is empty");
  // The format and the delimiter are decided on the first lines: the first block must hold
  // them (a block is far longer, unless the file starts with a very long run of lines).
  while (!HeadDecides(src.block()) && !src.at_eof()) {
    if (Status s = src.Extend(); !s.ok()) return s;
  }
  Detection d = {FormatNamed(opts.file), DetectedBy::kFlag};
  if (d.def == nullptr) d = {TextFormatByName(path), DetectedBy::kName};  // .svm, .libsvm, ...
  for (const DataFormatDef* f : Formats()) {
    if (d.def == nullptr && f->text() && f->by_lines && f->by_lines(src.block())) {
      d = {f, DetectedBy::kContent};
    }
  }
  for (const DataFormatDef* f : Formats()) {
    if (d.def == nullptr && f->text() && f->by_lines == nullptr) d = {f, DetectedBy::kFallback};
  }
  if (Status s = CheckFormatFlagsFor(path, d, opts); !s.ok()) return s;
  if (!d.def->text()) return d.def->load(path, opts, out);
  return d.def->load_lines(path, &src, opts, tuning, out);
}

Dataset MakeParabola(int64_t n) {
  Dataset ds;
  ds.features = 1;
  if (n <= 0) return ds;
  ds.rows = n;
  ds.x.resize(n);
  ds.y.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    // In double, so the end points are exactly -2 and 2 and y is x^2 rounded once.
    double x = n == 1 ? 0.0 : -2.0 + 4.0 * static_cast<double>(i) / static_cast<double>(n - 1);
    ds.x[i] = static_cast<float>(x);
    ds.y[i] = static_cast<float>(x * x);
  }
  return ds;
}

Dataset MakeBlobs(int64_t n, int features, int classes, uint64_t seed) {
  nn::Rng rng(nn::MixSeed(seed, 0x424C4F4253ull));  // "BLOBS"
  std::vector<double> centres(static_cast<size_t>(classes) * features);
  for (double& c : centres) c = rng.Normal();
  Dataset d;
  d.rows = n;
  d.features = features;
  d.x.resize(static_cast<size_t>(n * features));
  d.y.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i % classes);
    for (int j = 0; j < features; ++j) {
      d.x[i * features + j] = static_cast<float>(centres[k * features + j] + 0.5 * rng.Normal());
    }
    d.y[i] = static_cast<float>(k);
  }
  return d;
}

namespace {
// SetLoadStop's function, or null.
std::atomic<int (*)()> g_load_stop{nullptr};
}  // namespace

void SetLoadStop(int (*stop_signal)()) { g_load_stop.store(stop_signal); }

int LoadStopSignal() {
  int (*const stop)() = g_load_stop.load();
  return stop != nullptr ? stop() : 0;
}

Status LoadStopped(const std::string& what) {
  const int sig = LoadStopSignal();
  return sig == 0 ? Status::Ok() : StoppedLoading(sig, what);
}

Status StoppedLoading(int sig, const std::string& what) {
  return Status::Interrupted("stopped by " + SignalName(sig) + " while " + what);
}

}  // namespace shmtrain::data
