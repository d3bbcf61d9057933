// LIBSVM / SVMlight: "<label> <index>:<value> <index>:<value> ... [# comment]", indices from 1,
// ascending; absent features are 0. The file is read in blocks of whole lines; the values are
// kept sparse until the width is known, then laid out dense.
#include <algorithm>
#include <charconv>
#include <climits>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "data/format.h"
#include "data/text_cells.h"
#include "data/text_load.h"

namespace shmtrain::data {
namespace {

using text::At;
using text::Cell;
using text::Quote;
using text::Trim;

class LibsvmLoad {
 public:
  LibsvmLoad(const std::string& path, const LoadOptions& opts)
      : path_(path),
        opts_(opts),
        classify_(opts.task == Task::kClassification && !opts.no_labels),
        width_(opts.features > 0 ? opts.features : opts.libsvm_features) {}

  // One line of the file (without its '\n'); a blank or comment line adds no row.
  Status Line(std::string_view line, int64_t line_no);
  // The dense dataset of the rows read.
  Status Finish(Dataset* out);

 private:
  struct Entry {
    int64_t row;
    int64_t index;  // 1-based
    float value;
  };

  // An "<index>:<value>" token of the row being read, after index *prev.
  Status Feature(std::string_view tok, int64_t line_no, int64_t* prev);

  const std::string& path_;
  const LoadOptions& opts_;
  const bool classify_;
  const int width_;
  std::vector<Entry> entries_;
  text::LabelBook labels_;
  std::vector<float> y_;
  int64_t rows_ = 0;
  int64_t max_index_ = 0;
};

Status LibsvmLoad::Line(std::string_view line, int64_t line_no) {
  if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
    line = line.substr(0, hash);
  }
  line = Trim(text::DropCr(line));
  if (line.empty()) return Status::Ok();
  // A CSV line read as LIBSVM is one token, a label with no feature: refused, not loaded as
  // a row of zeros. No LIBSVM line has ',' or ';' without an "<index>:<value>" token.
  if (line.find(':') == std::string_view::npos &&
      line.find_first_of(",;") != std::string_view::npos) {
    return Status::Data(At(path_, line_no) + "line " + Quote(line) +
                        " is not LIBSVM (LIBSVM lines are '<label> <index>:<value> ...'); it "
                        "looks like CSV: try --format csv");
  }
  bool first = true;
  int64_t prev = 0;
  while (!line.empty()) {
    const size_t sp = line.find_first_of(" \t");
    const std::string_view tok = line.substr(0, sp);
    line = Trim(line.substr(sp == std::string_view::npos ? line.size() : sp));
    if (!first) {
      if (Status s = Feature(tok, line_no, &prev); !s.ok()) return s;
      continue;
    }
    first = false;
    if (tok.find(':') != std::string_view::npos) {
      return Status::Data(At(path_, line_no) + "line starts with " + Quote(tok) +
                          ", not a label (LIBSVM lines are '<label> <index>:<value> ...')");
    }
    if (opts_.no_labels) continue;
    if (Status s = text::TakeLabel(path_, {tok, line_no, 0}, classify_, &labels_, &y_); !s.ok()) {
      return s;
    }
  }
  ++rows_;
  return Status::Ok();
}

Status LibsvmLoad::Feature(std::string_view tok, int64_t line_no, int64_t* prev) {
  const size_t colon = tok.find(':');
  if (colon == std::string_view::npos) {
    return Status::Data(At(path_, line_no) + "token " + Quote(tok) + " is not '<index>:<value>'");
  }
  const std::string_view is = tok.substr(0, colon), vs = tok.substr(colon + 1);
  if (is == "qid") return Status::Ok();  // SVMlight ranking groups: not a feature
  int64_t index = 0;
  const auto [ip, iec] = std::from_chars(is.data(), is.data() + is.size(), index);
  if (is.empty() || iec != std::errc() || ip != is.data() + is.size() || index < 1) {
    return Status::Data(At(path_, line_no) + "feature index " + Quote(is) +
                        " is not an integer >= 1 (LIBSVM indices start at 1)");
  }
  if (index <= *prev) {
    return Status::Data(At(path_, line_no) + "feature index " + std::to_string(index) +
                        " follows " + std::to_string(*prev) +
                        " (indices must be ascending, each at most once)");
  }
  if (width_ > 0 && index > width_) {
    return Status::Data(At(path_, line_no) + "feature index " + std::to_string(index) +
                        " is beyond the model's " + std::to_string(width_) + " inputs");
  }
  if (index > INT_MAX) {
    return Status::Data(At(path_, line_no) + "feature index " + std::to_string(index) +
                        " is beyond the supported " + std::to_string(INT_MAX));
  }
  *prev = index;
  double v = 0;
  if (Cell r = text::ParseCell(vs, &v); r != Cell::kOk) {
    return Status::Data(At(path_, line_no) + "feature " + std::to_string(index) + ": " +
                        text::CellError(r, vs));
  }
  max_index_ = std::max(max_index_, index);
  entries_.push_back({rows_, index, static_cast<float>(v)});
  return Status::Ok();
}

Status LibsvmLoad::Finish(Dataset* out) {
  if (rows_ == 0)
    return Status::Data(At(path_) + "file is empty (it has only blank or comment lines)");
  Dataset ds;
  ds.rows = rows_;
  ds.features = width_ > 0 ? width_ : static_cast<int>(max_index_);
  if (ds.features < 1) return Status::Data(At(path_) + "no row has a feature");
  if (opts_.check_size) {
    if (Status s = opts_.check_size(ds.rows, ds.features); !s.ok()) return s;
  }
  ds.x.assign(static_cast<size_t>(ds.rows) * static_cast<size_t>(ds.features), 0.0f);
  for (const Entry& e : entries_) ds.x[e.row * ds.features + (e.index - 1)] = e.value;
  ds.y = std::move(y_);
  if (classify_) {
    if (Status s = labels_.MapClasses(path_, opts_, &ds); !s.ok()) return s;
  }
  *out = std::move(ds);
  return Status::Ok();
}

// Whether the first data line of `text` reads as LIBSVM: "<label> <int>:<...>".
bool LooksLikeLibsvm(std::string_view text) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    line = Trim(text::DropCr(line));
    if (line.empty() || line[0] == '#') continue;
    if (line.find_first_of(",;") != std::string_view::npos) return false;
    const size_t sp = line.find_first_of(" \t");
    if (sp == std::string_view::npos) return false;
    const std::string_view tok = Trim(line.substr(sp));
    const size_t colon = tok.find(':');
    if (colon == 0 || colon == std::string_view::npos) return false;
    return std::all_of(tok.begin(), tok.begin() + colon,
                       [](char c) { return c >= '0' && c <= '9'; }) ||
           tok.substr(0, colon) == "qid";
  }
  return false;
}

bool LibsvmByName(std::string_view name) {
  return name.ends_with(".svm") || name.ends_with(".libsvm") || name.ends_with(".svmlight");
}

}  // namespace

Status LoadLibsvm(const std::string& path, LineBlocks* src, const LoadOptions& opts, Dataset* out) {
  LibsvmLoad load(path, opts);
  int64_t line_no = 0;
  for (std::string_view text = src->block(); !text.empty();) {
    // Every line of a block ends in '\n'.
    for (size_t pos = 0; pos < text.size();) {
      const size_t nl = text.find('\n', pos);
      if (Status s = load.Line(text.substr(pos, nl - pos), ++line_no); !s.ok()) return s;
      pos = nl + 1;
    }
    bool more = false;
    if (Status s = src->Next(&more); !s.ok()) return s;
    if (!more) break;
    text = src->block();
  }
  return load.Finish(out);
}

// The CSV flags describe CSV cells and --labels data without labels: none applies.
extern constinit const DataFormatDef kLibsvmFormat = {
    .name = "libsvm", .aliases = {"svmlight"}, .noun = "LIBSVM files", .what = "file is LIBSVM",
    .labels = "are in the file", .by_name = LibsvmByName, .by_lines = LooksLikeLibsvm,
    .load_lines = [](const std::string& path, LineBlocks* src, const LoadOptions& opts,
                     const TextTuning&, Dataset* out) { return LoadLibsvm(path, src, opts, out); }};

}  // namespace shmtrain::data
