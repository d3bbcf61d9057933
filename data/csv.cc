// The CSV loader. A file is read in blocks of whole lines (data/line_blocks.h); the first
// non-blank line fixes the shape and decides the header, and every later line is a row. Cells,
// the delimiter and the decimal separator are the tokenizer's (data/csv_cells.h).
//
// Rows take one of two paths. The fast one (FastRow) finds the ends of the cells 64 bytes at a
// time and reads each cell on its own: a plain integer in a few instructions, another number
// through FastDecimal, and only then ParseCell. It gives up on anything unusual (a quote, a
// cell that does not parse, a count of cells other than the shape's, a blank line), and the
// general path (GeneralRow) reads that line as the loader always did: it alone writes error
// messages, so every message and its line:column are the same whichever path a line took
// first. A large block is split at a line between two threads; the first error by line
// number is the one reported, since the second thread's rows and error count only when the
// first thread's part has none.
#include <malloc.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "core/utf8.h"
#include "data/csv_cells.h"
#include "data/format.h"
#include "data/text_cells.h"
#include "data/text_load.h"

namespace shmtrain::data {
namespace {

using text::At;
using text::Cell;
using text::CellError;
using text::IsBlank;
using text::LabelBook;
using text::Plural;

using csv::CellEnds;
using csv::CellKind;
using csv::CellText;
using csv::CellValue;
using csv::CountCells;
using csv::DelimiterHint;
using csv::DetectDecimal;
using csv::DetectDelimiter;
using csv::NextCell;
using csv::PlainClassLabel;
using csv::QuoteError;
using csv::QuoteErrorText;
using csv::Unescape;

// ---- The shape: what the first non-blank line decides ----

struct Shape {
  char delim = ',';
  int64_t ncols = 0;     // cells per row
  int64_t ref_line = 0;  // the line that fixed it
  int64_t label = -1;    // label column, 0-based; -1: none (predict data without labels)
  char decimal = '.';    // the decimal separator
  int features = 0;
  bool classify = false;   // the label is a class, kept for the class map
  bool no_labels = false;  // the label column is skipped unread
};

// Whether the first line is a header when HeaderMode::kAuto: a header has a cell that is not a
// number (quoted or not). Empty, NaN and too-large cells do not count: such a first line is
// data, and its error is reported as such. With text class labels (classification, predict
// data too: a file with a label column holds the same kind of labels) the label cell does not
// count either. A named label column implies a header line.
bool AutoHeader(std::string_view line, int64_t ncols, char delim, char decimal,
                const LoadOptions& opts) {
  if (!opts.file.label_name.empty()) return true;
  const bool text_labels = opts.task == Task::kClassification;
  const bool label_column_present = !opts.no_labels || opts.features <= 0 || ncols != opts.features;
  const int64_t label = opts.file.label_col == -1 ? ncols - 1 : opts.file.label_col;
  const char* p = line.data();
  const char* const e = p + line.size();
  for (int64_t c = 0; c < ncols; ++c) {
    CellKind kind;
    const std::string_view cell = NextCell(&p, e, delim, &kind);
    double v;
    const bool text_label = text_labels && label_column_present && c == label;
    if (!text_label && text::ParseNumber(cell, decimal, &v) == Cell::kNotNumber) return true;
  }
  return false;
}

// The label column named opts.file.label_name in the header `line`.
Status NamedLabel(const std::string& path, std::string_view line, int64_t line_no, int64_t ncols,
                  char delim, const LoadOptions& opts, int64_t* label) {
  const char* p = line.data();
  const char* const e = p + line.size();
  std::string names;
  for (int64_t c = 0; c < ncols; ++c) {
    CellKind kind;
    std::string_view name = NextCell(&p, e, delim, &kind);
    std::string own;
    if (kind == CellKind::kEscaped) name = own = Unescape(name);
    if (name == opts.file.label_name && *label < 0) *label = c;
    if (c < 8) names += (c ? ", " : "") + Printable(name);
  }
  if (*label >= 0) return Status::Ok();
  return Status::Data(At(path, line_no) + "label column '" + opts.file.label_name +
                      "' is not in the header (" + names + (ncols > 8 ? ", ..." : "") + ")" +
                      DelimiterHint(line, delim));
}

// The label column, by name or by number, and the features it leaves.
Status LabelAndFeatures(const std::string& path, std::string_view line, int64_t line_no,
                        bool has_header, const LoadOptions& opts, Shape* sh) {
  const int64_t ncols = sh->ncols;
  if (!opts.file.label_name.empty()) {
    if (!has_header) {
      return Status::Data(At(path) + "label column '" + opts.file.label_name +
                          "' is named, but the file has no header line to find it in");
    }
    if (Status s = NamedLabel(path, line, line_no, ncols, sh->delim, opts, &sh->label); !s.ok()) {
      return s;
    }
  } else {
    sh->label = opts.file.label_col == -1 ? ncols - 1 : opts.file.label_col;
    if (sh->label >= ncols) {
      return Status::Data(At(path) + "label column " + std::to_string(opts.file.label_col) +
                          " does not exist (rows have " + Plural(ncols, "column") + ")" +
                          DelimiterHint(line, sh->delim));
    }
  }
  if (opts.no_labels && opts.features > 0 && ncols == opts.features) sh->label = -1;
  const int64_t nfeat = sh->label < 0 ? ncols : ncols - 1;
  if (nfeat < 1) {
    return Status::Data(At(path) +
                        "rows have 1 column; need at least one feature column besides the label" +
                        DelimiterHint(line, sh->delim));
  }
  if (opts.features > 0 && nfeat != opts.features) {
    return Status::Data(At(path, line_no) + "rows have " + Plural(nfeat, "feature") +
                        " besides the label, the model takes " + std::to_string(opts.features) +
                        DelimiterHint(line, sh->delim));
  }
  sh->features = static_cast<int>(nfeat);
  return Status::Ok();
}

// The shape from the first non-blank line, and whether that line is a header (detected or
// forced; a header line is never a row, even when all its cells are numbers).
Status MakeShape(const std::string& path, std::string_view line, int64_t line_no, char delim,
                 char decimal, const LoadOptions& opts, Shape* sh, bool* has_header) {
  QuoteError qerr;
  int64_t qcell = 0;
  sh->delim = delim;
  sh->decimal = decimal;
  sh->ncols = CountCells(line, delim, &qerr, &qcell);
  if (qerr != QuoteError::kNone)
    return Status::Data(At(path, line_no, qcell) + QuoteErrorText(qerr));
  sh->ref_line = line_no;
  if (sh->ncols > INT_MAX) {
    return Status::Data(At(path, line_no) + "row has " + std::to_string(sh->ncols) +
                        " cells, more than the supported " + std::to_string(INT_MAX));
  }
  *has_header =
      opts.file.header == HeaderMode::kYes ||
      (opts.file.header == HeaderMode::kAuto && AutoHeader(line, sh->ncols, delim, decimal, opts));
  if (Status s = LabelAndFeatures(path, line, line_no, *has_header, opts, sh); !s.ok()) return s;
  sh->no_labels = opts.no_labels;
  sh->classify = opts.task == Task::kClassification && !opts.no_labels && sh->label >= 0;
  return Status::Ok();
}

// Calls check_size with a bound of the rows and reserves room for them. Reserving touches no
// page, so an overestimate costs no memory.
Status CheckAndReserve(const LineBlocks& src, const LoadOptions& opts, const Shape& sh,
                       Dataset* ds, LabelBook* labels) {
  int64_t bytes = 0, newlines = 0;
  if (Status s = src.Measure(&bytes, &newlines); !s.ok()) return s;
  // No more rows than lines; and a row of n cells takes at least 2n - 1 bytes, so this bounds
  // the rows however many lines are blank.
  const int64_t max_rows = std::min<int64_t>(newlines + 1, bytes / (2 * sh.ncols - 1) + 1);
  if (opts.check_size) {
    if (Status s = opts.check_size(max_rows, sh.features); !s.ok()) return s;
  }
  ds->x.reserve(static_cast<size_t>(max_rows) * static_cast<size_t>(sh.features));
  if (sh.classify) {
    labels->Reserve(static_cast<size_t>(max_rows));
  } else if (sh.label >= 0 && !sh.no_labels) {
    ds->y.reserve(static_cast<size_t>(max_rows));
  }
  return Status::Ok();
}

// The floats of a file whose size is not known until its end (a pipe): what each block adds is
// set aside as it comes, and the pieces are put together once, at the end, each freed as it is
// copied. One vector grown instead would be copied at each doubling, twice its size at once.
class Pieces {
 public:
  // Sets aside the floats *x holds and leaves it empty, with room for as many.
  void Keep(std::vector<float>* x) {
    const size_t n = x->size();
    pieces_.push_back(std::move(*x));
    *x = std::vector<float>();
    x->reserve(n);
  }
  // The pieces, then what *x holds, into *x.
  void Join(std::vector<float>* x) {
    if (pieces_.empty()) return;
    size_t total = x->size();
    for (const std::vector<float>& p : pieces_) total += p.size();
    std::vector<float> all;
    all.reserve(total);  // touches no page: only the copies do, as the pieces go
    for (std::vector<float>& p : pieces_) {
      all.insert(all.end(), p.begin(), p.end());
      std::vector<float>().swap(p);
      malloc_trim(0);  // its pages back to the system now, whichever heap it came from
    }
    all.insert(all.end(), x->begin(), x->end());
    *x = std::move(all);
    pieces_.clear();
  }

 private:
  std::vector<std::vector<float>> pieces_;
};

// ---- Rows ----

// Where the rows of a part of the file go.
struct Rows {
  std::vector<float>* x;
  std::vector<float>* y;  // regression targets
  LabelBook* labels;      // class labels
  int64_t count = 0;
};

// The hint for a cell of `line` that is not a number: a '.' where ',' is the decimal
// separator, else DelimiterHint.
std::string NumberHint(std::string_view line, std::string_view cell, const Shape& sh) {
  if (sh.decimal == ',' && cell.find('.') != std::string_view::npos) {
    return " (the decimal separator is ',' in this file: --decimal . reads '.')";
  }
  return DelimiterHint(line, sh.delim);
}

// A data line the fast path did not take: read as the loader always did, with every error
// message. Appends its row; a blank line is skipped.
Status GeneralRow(const std::string& path, const Shape& sh, std::string_view line, int64_t line_no,
                  Rows* out) {
  if (IsBlank(line)) return Status::Ok();
  QuoteError qerr;
  int64_t qcell = 0;
  const int64_t cells = CountCells(line, sh.delim, &qerr, &qcell);
  if (qerr != QuoteError::kNone)
    return Status::Data(At(path, line_no, qcell) + QuoteErrorText(qerr));
  if (cells != sh.ncols) {
    return Status::Data(At(path, line_no) + "row has " + Plural(cells, "cell") + ", expected " +
                        std::to_string(sh.ncols) + " (as on line " + std::to_string(sh.ref_line) +
                        ")" + DelimiterHint(line, sh.delim));
  }
  const char* p = line.data();
  const char* const e = p + line.size();
  for (int64_t c = 0; c < sh.ncols; ++c) {
    CellKind kind;
    std::string_view cell = NextCell(&p, e, sh.delim, &kind);
    if (c == sh.label) {
      if (sh.no_labels) continue;
      std::string own;
      if (sh.classify && kind == CellKind::kEscaped) cell = own = Unescape(cell);
      if (Status s = text::TakeLabel(path, {cell, line_no, c + 1}, sh.classify, out->labels, out->y,
                                     sh.decimal);
          !s.ok()) {
        double v;
        if (sh.classify || text::ParseNumber(cell, sh.decimal, &v) != Cell::kNotNumber) return s;
        return Status::Data(s.message() + NumberHint(line, cell, sh));
      }
      continue;
    }
    double v = 0;
    if (Cell r = text::ParseNumber(cell, sh.decimal, &v); r != Cell::kOk) {
      return Status::Data(At(path, line_no, c + 1) + CellError(r, cell) +
                          (r == Cell::kNotNumber ? NumberHint(line, cell, sh) : ""));
    }
    out->x->push_back(static_cast<float>(v));
  }
  ++out->count;
  return Status::Ok();
}

// The fast path: one line of unquoted cells at p that loads without error. Appends its row and
// returns the start of the next line; else appends nothing and returns null, and the general
// path reads the line. A '"' anywhere makes a cell fail here: quotes are the general path's.
const char* FastRow(const Shape& sh, const char* p, int64_t line_no, Rows* out) {
  // Copies: the loop keeps them in registers.
  const char delim = sh.delim;
  const int64_t last = sh.ncols - 1, label = sh.label;
  const bool text_label = sh.classify || sh.no_labels;
  const bool comma = sh.decimal == ',';
  std::vector<float>& x = *out->x;
  const size_t x0 = x.size();
  x.resize(x0 + static_cast<size_t>(sh.features));
  float* f = x.data() + x0;
  float target = 0;
  std::string_view label_text;
  const char* window = p;
  uint64_t ends = CellEnds(window, delim);
  for (int64_t c = 0;; ++c) {
    while (ends == 0) ends = CellEnds(window += 64, delim);
    const char* const e = window + std::countr_zero(ends);
    ends &= ends - 1;
    if (c != label) {
      if (!CellValue(p, e, delim, comma, f++)) break;
    } else if (!text_label) {
      if (!CellValue(p, e, delim, comma, &target)) break;
    } else {
      label_text = CellText(p, e, delim);
      if (std::memchr(p, '"', static_cast<size_t>(e - p)) != nullptr) break;
      if (sh.classify && !PlainClassLabel(label_text)) break;
    }
    if (*e == delim) {
      if (c == last) break;  // more cells than the shape's
      p = e + 1;
      continue;
    }
    if (c != last) break;  // fewer
    if (sh.classify) {
      out->labels->Add({label_text, line_no, label + 1});
    } else if (label >= 0 && !sh.no_labels) {
      out->y->push_back(target);
    }
    ++out->count;
    return e + 1;
  }
  x.resize(x0);
  return nullptr;
}

// Parses `text`, whole lines each ending in '\n', after line *line_no; *line_no is then the
// last line parsed (the failing one on an error).
Status ParseLines(const std::string& path, const Shape& sh, std::string_view text,
                  int64_t* line_no, Rows* out) {
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p < end) {
    ++*line_no;
    if (const char* next = FastRow(sh, p, *line_no, out)) {
      p = next;
      continue;
    }
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    const std::string_view line = text::DropCr(std::string_view(p, static_cast<size_t>(nl - p)));
    if (Status s = GeneralRow(path, sh, line, *line_no, out); !s.ok()) return s;
    p = nl + 1;
  }
  return Status::Ok();
}

// The second thread's part of a block, kept apart until the first thread's rows are in.
struct SidePart {
  std::vector<float> x, y;
  LabelBook labels;
  int64_t line_no = 0;
  Rows rows{&x, &y, &labels};
  Status status;
  double seconds = 0;

  void Clear() {
    x.clear();
    y.clear();
    labels.Clear();
    rows.count = 0;
  }
  void AppendTo(Rows* out) const {
    out->x->insert(out->x->end(), x.begin(), x.end());
    out->y->insert(out->y->end(), y.begin(), y.end());
    out->labels->Append(labels);
    out->count += rows.count;
  }
};

// Parses the blocks of a file in order, each in two threads when it is large enough. The
// second thread parses the block's end into a side part, which the first thread appends to the
// rows while the second parses the next block's end: the copy overlaps the parsing, in a
// second side part. The split moves so that both threads take as long.
class BlockParser {
 public:
  BlockParser(const std::string& path, const Shape& sh, const TextTuning& tuning, Rows* out)
      : path_(path), sh_(sh), tuning_(tuning), out_(out) {}

  // Parses `text`, whole lines after line *line_no; *line_no is then its last line.
  Status Parse(std::string_view text, int64_t* line_no);
  // Appends what is pending: after the last block.
  void Finish() {
    if (pending_ != nullptr) pending_->AppendTo(out_);
    pending_ = nullptr;
  }

 private:
  Status ParseSplit(std::string_view first, std::string_view second, int64_t* line_no);

  const std::string& path_;
  const Shape& sh_;
  const TextTuning& tuning_;
  Rows* out_;
  SidePart sides_[2];
  SidePart* pending_ = nullptr;  // parsed and checked, not yet appended
  double share_ = 0.5;           // of a block, the first thread's
};

Status BlockParser::Parse(std::string_view text, int64_t* line_no) {
  const bool split = tuning_.threads >= 2 && text.size() >= tuning_.min_split_bytes;
  const size_t mid = split ? text.find('\n', static_cast<size_t>(share_ * text.size()))
                           : std::string_view::npos;
  if (mid == std::string_view::npos || mid + 1 == text.size()) {
    Finish();
    return ParseLines(path_, sh_, text, line_no, out_);
  }
  return ParseSplit(text.substr(0, mid + 1), text.substr(mid + 1), line_no);
}

Status BlockParser::ParseSplit(std::string_view first, std::string_view second,
                               int64_t* line_no) {
  using Clock = std::chrono::steady_clock;
  SidePart* side = pending_ == &sides_[0] ? &sides_[1] : &sides_[0];
  side->Clear();
  const int64_t start = *line_no;
  // An exception on either thread (std::bad_alloc) is rethrown on this one once both are
  // done, to the command's one catch site (docs/errors.md): escaping the second thread, or
  // leaving it unjoined, would end the process in std::terminate.
  std::exception_ptr second_error, first_error;
  auto parse_second = [&] {
    const Clock::time_point t0 = Clock::now();
    side->line_no = start + CountNewlines(first.data(), first.size());
    try {
      side->status = ParseLines(path_, sh_, second, &side->line_no, &side->rows);
    } catch (...) {
      second_error = std::current_exception();
    }
    side->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::thread thread;
  try {
    thread = std::thread(parse_second);
  } catch (const std::system_error&) {
    parse_second();  // no thread to be had: one after the other
  }
  const Clock::time_point t0 = Clock::now();
  Status s;
  try {
    Finish();  // the previous block's side part, now that its rows come next
    s = ParseLines(path_, sh_, first, line_no, out_);
  } catch (...) {
    first_error = std::current_exception();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (thread.joinable()) thread.join();
  if (first_error) std::rethrow_exception(first_error);
  if (second_error) std::rethrow_exception(second_error);
  if (!s.ok()) return s;
  if (!side->status.ok()) return side->status;
  pending_ = side;
  *line_no = side->line_no;
  // Halfway to the share that would have made both take as long, at a rate per byte each.
  const double total = seconds + side->seconds;
  if (total > 0)
    share_ = std::clamp(share_ * (1 - 0.5 * (seconds - side->seconds) / total), 0.2, 0.8);
  return Status::Ok();
}

// The first non-blank line of the block, after *pos, and its number; *pos moves past it.
// Empty data when there is none.
std::string_view FirstLine(std::string_view text, size_t* pos, int64_t* line_no) {
  while (*pos < text.size()) {
    const size_t nl = text.find('\n', *pos);  // every line of a block ends in '\n'
    const std::string_view line = text::DropCr(text.substr(*pos, nl - *pos));
    *pos = nl + 1;
    ++*line_no;
    if (!IsBlank(line)) return line;
  }
  return {};
}

}  // namespace

Status LoadCsv(const std::string& path, LineBlocks* src, const LoadOptions& opts,
               const TextTuning& tuning, Dataset* out) {
  std::string_view text = src->block();
  const DataFileOptions& f = opts.file;
  const char delim = f.delimiter != 0 ? f.delimiter : DetectDelimiter(text, f.decimal);
  const char decimal = DetectDecimal(text, delim, f.decimal);
  size_t pos = 0;
  int64_t line_no = 0;
  const std::string_view first = FirstLine(text, &pos, &line_no);
  if (first.data() == nullptr)
    return Status::Data(At(path) + "file is empty (it has only blank lines)");
  Shape sh;
  bool has_header = false;
  if (Status s = MakeShape(path, first, line_no, delim, decimal, opts, &sh, &has_header); !s.ok())
    return s;
  Dataset ds;
  ds.features = sh.features;
  LabelBook labels;
  // A pipe longer than a block is read once: its rows are not known before they are read.
  // check_size sees the rows read so far after each block, and all of them at the end.
  const bool sized = src->sized();
  if (sized) {
    if (Status s = CheckAndReserve(*src, opts, sh, &ds, &labels); !s.ok()) return s;
  }
  Rows rows{&ds.x, &ds.y, &labels};
  if (!has_header) {
    if (Status s = GeneralRow(path, sh, first, line_no, &rows); !s.ok()) return s;
  }
  TextTuning t = tuning;
  if (t.threads <= 0) t.threads = std::thread::hardware_concurrency() >= 2 ? 2 : 1;
  BlockParser parser(path, sh, t, &rows);
  Pieces pieces;
  for (text.remove_prefix(pos);;) {
    if (Status s = parser.Parse(text, &line_no); !s.ok()) return s;
    if (!sized) {
      if (opts.check_size) {
        if (Status s = opts.check_size(rows.count, sh.features); !s.ok()) return s;
      }
      pieces.Keep(&ds.x);
    }
    bool more = false;
    if (Status s = src->Next(&more); !s.ok()) return s;
    if (!more) break;
    text = src->block();
  }
  parser.Finish();
  if (!sized) {
    if (opts.check_size) {
      if (Status s = opts.check_size(rows.count, sh.features); !s.ok()) return s;
    }
    pieces.Join(&ds.x);
  }
  ds.rows = rows.count;
  if (ds.rows == 0) return Status::Data(At(path) + "file has a header line but no data rows");
  if (sh.classify) {
    if (Status s = labels.MapClasses(path, opts, &ds); !s.ok()) return s;
  }
  *out = std::move(ds);
  return Status::Ok();
}

// The text every other format leaves (no by_lines): detected last, never by name.
extern constinit const DataFormatDef kCsvFormat = {
    .name = "csv", .noun = "CSV files", .what = "file is CSV", .labels = "are in the file",
    .flags = {"--label-col", "--header", "--delimiter", "--decimal"}, .load_lines = LoadCsv};

}  // namespace shmtrain::data
