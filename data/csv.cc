// The CSV loader. A file is read in blocks of whole lines (data/line_blocks.h); the first
// non-blank line fixes the shape and decides the header, and every later line is a row.
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
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "core/utf8.h"
#include "data/text_cells.h"
#include "data/text_load.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace shmtrain::data {
namespace {

using text::At;
using text::Cell;
using text::CellError;
using text::FastDecimal;
using text::IsBlank;
using text::LabelBook;
using text::ParseCell;
using text::Plural;
using text::Quote;
using text::Trim;

// ---- Cells ----
//
// A cell is the text between two delimiters with its surrounding spaces and tabs trimmed (a
// tab delimiter is not trimmed). A cell whose text starts with '"' is quoted (RFC 4180): it
// runs to the next lone '"', `""` inside stands for one '"', a delimiter inside is text, the
// text between the quotes is trimmed like any cell, and only spaces may follow the closing
// quote. A quoted cell ends on its line. A '"' inside an unquoted cell is text.

constexpr char kDelimiters[] = {',', ';', '\t'};

inline bool IsPad(char c, char delim) {
  return (c == ' ' || c == '\t') && c != delim;
}

// The delimiter as the --delimiter flag spells it.
std::string DelimiterName(char d) {
  return d == '\t' ? "tab" : "'" + std::string(1, d) + "'";
}

enum class QuoteError { kNone, kUnclosed, kTextAfter };

// The number of cells of `line` split at `delim`, quotes honoured. A line without '"' costs
// one memchr and one count. On a malformed quoted cell sets *err and *err_cell (1-based) and
// returns the cells up to it.
int64_t CountCells(std::string_view line, char delim, QuoteError* err, int64_t* err_cell) {
  *err = QuoteError::kNone;
  if (std::memchr(line.data(), '"', line.size()) == nullptr) {
    return std::count(line.begin(), line.end(), delim) + 1;
  }
  const char* p = line.data();
  const char* const e = p + line.size();
  for (int64_t n = 1;; ++n) {
    while (p < e && IsPad(*p, delim)) ++p;
    if (p < e && *p == '"') {
      ++p;
      for (;;) {
        const char* q = static_cast<const char*>(std::memchr(p, '"', e - p));
        if (q == nullptr) {
          *err = QuoteError::kUnclosed;
          *err_cell = n;
          return n;
        }
        p = q + 1;
        if (p < e && *p == '"') {
          ++p;  // "" inside a quoted cell
          continue;
        }
        break;
      }
      while (p < e && IsPad(*p, delim)) ++p;
      if (p == e) return n;
      if (*p != delim) {
        *err = QuoteError::kTextAfter;
        *err_cell = n;
        return n;
      }
      ++p;
    } else {
      const char* d = static_cast<const char*>(std::memchr(p, delim, e - p));
      if (d == nullptr) return n;
      p = d + 1;
    }
  }
}

std::string QuoteErrorText(QuoteError e) {
  return e == QuoteError::kUnclosed
             ? "quoted cell has no closing quote (a quoted cell must end on its line)"
             : "text after the closing quote of a quoted cell (write \"\" for a quote inside one)";
}

enum class CellKind { kPlain, kQuoted, kEscaped };  // kEscaped: quoted, with "" inside

// The trimmed, unquoted text of the cell at *p, and moves *p past its delimiter (to `e` after
// the last cell). The line must have passed CountCells. A kEscaped cell's text still has its
// "" pairs (Unescape). No allocation.
std::string_view NextCell(const char** p, const char* e, char delim, CellKind* kind) {
  const char* c = *p;
  while (c < e && IsPad(*c, delim)) ++c;
  if (c < e && *c == '"') {
    const char* const b = ++c;
    const char* q = e;
    *kind = CellKind::kQuoted;
    for (;;) {
      q = c < e ? static_cast<const char*>(std::memchr(c, '"', static_cast<size_t>(e - c)))
                : nullptr;
      if (q == nullptr) {
        q = e;
        break;
      }
      c = q + 1;
      if (c < e && *c == '"') {
        ++c;
        *kind = CellKind::kEscaped;
        continue;
      }
      break;
    }
    while (c < e && *c != delim) ++c;  // pads only, as CountCells checked
    *p = c < e ? c + 1 : e;
    return Trim(std::string_view(b, q - b));
  }
  *kind = CellKind::kPlain;
  // c <= e here; said again so that GCC does not see a negative length (-Wstringop-overread).
  const char* d =
      c < e ? static_cast<const char*>(std::memchr(c, delim, static_cast<size_t>(e - c))) : nullptr;
  const char* ce = d ? d : e;
  *p = d ? d + 1 : e;
  while (ce > c && IsPad(ce[-1], delim)) --ce;
  return std::string_view(c, ce - c);
}

// A quoted cell's text with each "" read as one '"'.
std::string Unescape(std::string_view cell) {
  std::string s;
  s.reserve(cell.size());
  for (size_t i = 0; i < cell.size(); ++i) {
    s += cell[i];
    if (cell[i] == '"' && i + 1 < cell.size() && cell[i + 1] == '"') ++i;
  }
  return s;
}

// Whether `cell` is a number written with a decimal comma: [+-]digits,digits.
bool IsDecimalComma(std::string_view cell) {
  if (!cell.empty() && (cell[0] == '+' || cell[0] == '-')) cell.remove_prefix(1);
  const size_t comma = cell.find(',');
  if (comma == 0 || comma == std::string_view::npos || comma + 1 == cell.size()) return false;
  for (size_t i = 0; i < cell.size(); ++i) {
    if (i != comma && (cell[i] < '0' || cell[i] > '9')) return false;
  }
  return true;
}

// Whether the n lines (trimmed, not blank) split at ';' hold a number with a decimal comma and
// no other ',' outside quotes: the decimal commas of a ';'-separated file (R's write.csv2,
// spreadsheets in many locales).
bool DecimalCommas(const std::string_view* lines, int n) {
  bool found = false;
  for (int i = 0; i < n; ++i) {
    QuoteError err;
    int64_t bad = 0;
    const int64_t cells = CountCells(lines[i], ';', &err, &bad);
    if (err != QuoteError::kNone || cells < 2) return false;
    const char* p = lines[i].data();
    const char* const e = p + lines[i].size();
    for (int64_t c = 0; c < cells; ++c) {
      CellKind kind;
      const std::string_view cell = NextCell(&p, e, ';', &kind);
      if (kind != CellKind::kPlain || cell.find(',') == std::string_view::npos) continue;
      if (!IsDecimalComma(cell)) return false;
      found = true;
    }
  }
  return found;
}

// The first two non-blank lines of `text`, trimmed, into lines; returns how many there are.
int HeadLines(std::string_view text, std::string_view lines[2]) {
  int n = 0;
  while (!text.empty() && n < 2) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    line = text::DropCr(line);
    if (!IsBlank(line)) lines[n++] = Trim(line);  // edge tabs are padding, not delimiters
  }
  return n;
}

// The decimal separator (LoadOptions::decimal) of a file with this delimiter.
char DetectDecimal(std::string_view text, char delim, char decimal) {
  if (decimal != 0) return decimal;
  std::string_view lines[2];
  const int n = HeadLines(text, lines);
  return delim == ';' && DecimalCommas(lines, n) ? ',' : '.';
}

// The delimiter of a CSV file from its first two non-blank lines (the header, if any, and
// the first data line): of ',', ';' and tab, the one found outside quotes on the first line
// as often as on the second (and at least once), the most often; ties go to ',' then ';'
// then tab. A one-line file takes the most frequent. When none fits (a ragged file), the most
// frequent on the first line; with none at all, ','. With decimal commas (given, or ';' found
// steadily and every ',' in a number such as "1,5" of its cells) ',' is no delimiter.
char DetectDelimiter(std::string_view text, char decimal) {
  std::string_view lines[2];
  const int n = HeadLines(text, lines);
  if (n == 0) return ',';  // only blank lines: the load reports that
  char best = 0, most = 0;
  int64_t best_n = 0, most_n = 0;
  for (char d : kDelimiters) {
    if (d == ',' && (decimal == ',' || (decimal == 0 && DecimalCommas(lines, n)))) continue;
    QuoteError err;
    int64_t cell = 0;
    const int64_t first = CountCells(lines[0], d, &err, &cell) - 1;
    if (first > most_n) {
      most = d;
      most_n = first;
    }
    const bool steady = n < 2 || CountCells(lines[1], d, &err, &cell) - 1 == first;
    if (first > best_n && steady) {
      best = d;
      best_n = first;
    }
  }
  return best ? best : most ? most : ',';
}

// For the message of a line that did not parse with `delim`: a hint when its unquoted cells
// hold another delimiter, " (the line looks ';'-separated: try --delimiter ';')", or decimal
// commas, else "". Only on the error path.
std::string DelimiterHint(std::string_view line, char delim) {
  QuoteError err;
  int64_t bad = 0;
  const int64_t cells = CountCells(line, delim, &err, &bad);
  if (err != QuoteError::kNone) return "";
  int64_t found[3] = {0, 0, 0};
  std::string_view decimal;  // the first decimal-comma cell
  bool all_decimal = true;   // every unquoted cell holding ',' is a decimal comma
  const char* p = line.data();
  const char* const e = p + line.size();
  for (int64_t c = 0; c < cells; ++c) {
    CellKind kind;
    const std::string_view cell = NextCell(&p, e, delim, &kind);
    if (kind != CellKind::kPlain) continue;
    for (int i = 0; i < 3; ++i) {
      if (kDelimiters[i] != delim) found[i] += std::count(cell.begin(), cell.end(), kDelimiters[i]);
    }
    if (cell.find(',') != std::string_view::npos) {
      if (IsDecimalComma(cell)) {
        if (decimal.empty()) decimal = cell;
      } else {
        all_decimal = false;
      }
    }
  }
  if (delim != ',' && cells > 1 && !decimal.empty() && all_decimal) {
    return " (a decimal comma? --decimal , reads " + Quote(decimal) + " as a number)";
  }
  int best = -1;
  for (int i = 0; i < 3; ++i) {
    if (found[i] > 0 && (best < 0 || found[i] > found[best])) best = i;
  }
  if (best < 0) return "";
  const char d = kDelimiters[best];
  return " (the line looks " + DelimiterName(d) + "-separated: try --delimiter " +
         DelimiterName(d) + ")";
}

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
  if (!opts.label_name.empty()) return true;
  const bool text_labels = opts.task == Task::kClassification;
  const bool label_column_present = !opts.no_labels || opts.features <= 0 || ncols != opts.features;
  const int64_t label = opts.label_col == -1 ? ncols - 1 : opts.label_col;
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

// The label column named opts.label_name in the header `line`.
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
    if (name == opts.label_name && *label < 0) *label = c;
    if (c < 8) names += (c ? ", " : "") + Printable(name);
  }
  if (*label >= 0) return Status::Ok();
  return Status::Data(At(path, line_no) + "label column '" + opts.label_name +
                      "' is not in the header (" + names + (ncols > 8 ? ", ..." : "") + ")" +
                      DelimiterHint(line, delim));
}

// The label column, by name or by number, and the features it leaves.
Status LabelAndFeatures(const std::string& path, std::string_view line, int64_t line_no,
                        bool has_header, const LoadOptions& opts, Shape* sh) {
  const int64_t ncols = sh->ncols;
  if (!opts.label_name.empty()) {
    if (!has_header) {
      return Status::Data(At(path) + "label column '" + opts.label_name +
                          "' is named, but the file has no header line to find it in");
    }
    if (Status s = NamedLabel(path, line, line_no, ncols, sh->delim, opts, &sh->label); !s.ok()) {
      return s;
    }
  } else {
    sh->label = opts.label_col == -1 ? ncols - 1 : opts.label_col;
    if (sh->label >= ncols) {
      return Status::Data(At(path) + "label column " + std::to_string(opts.label_col) +
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
  if (qerr != QuoteError::kNone) return Status::Data(At(path, line_no, qcell) + QuoteErrorText(qerr));
  sh->ref_line = line_no;
  if (sh->ncols > INT_MAX) {
    return Status::Data(At(path, line_no) + "row has " + std::to_string(sh->ncols) +
                        " cells, more than the supported " + std::to_string(INT_MAX));
  }
  *has_header =
      opts.header == HeaderMode::kYes ||
      (opts.header == HeaderMode::kAuto && AutoHeader(line, sh->ncols, delim, decimal, opts));
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
  if (qerr != QuoteError::kNone) return Status::Data(At(path, line_no, qcell) + QuoteErrorText(qerr));
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

// Bit i set when p[i] ends a cell: the delimiter or '\n'. Reads 64 bytes at p. Finding the
// ends of many cells at once keeps the cells apart: the next cell's start does not wait for
// this one's digits.
inline uint64_t CellEnds(const char* p, char delim) {
#if defined(__AVX2__)
  const __m256i d = _mm256_set1_epi8(delim), nl = _mm256_set1_epi8('\n');
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  const uint32_t ml = static_cast<uint32_t>(
      _mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(lo, d), _mm256_cmpeq_epi8(lo, nl))));
  const uint32_t mh = static_cast<uint32_t>(
      _mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(hi, d), _mm256_cmpeq_epi8(hi, nl))));
  return uint64_t{mh} << 32 | ml;
#elif defined(__SSE2__)
  const __m128i d = _mm_set1_epi8(delim), nl = _mm_set1_epi8('\n');
  uint64_t m = 0;
  for (int i = 0; i < 4; ++i) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
    const uint32_t b = static_cast<uint32_t>(
        _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, d), _mm_cmpeq_epi8(v, nl))));
    m |= uint64_t{b} << (16 * i);
  }
  return m;
#else
  uint64_t m = 0;
  for (int i = 0; i < 64; ++i) m |= uint64_t{p[i] == delim || p[i] == '\n'} << i;
  return m;
#endif
}

// The text of the unquoted cell [b, e) as NextCell gives it, where e is at its delimiter or
// the line's '\n': without surrounding pads, nor the '\r's that end the line.
inline std::string_view CellText(const char* b, const char* e, char delim) {
  while (b < e && IsPad(*b, delim)) ++b;
  if (*e == '\n') {
    while (e > b && e[-1] == '\r') --e;
  }
  while (e > b && IsPad(e[-1], delim)) --e;
  return {b, static_cast<size_t>(e - b)};
}

// The number in the unquoted cell [b, e) as a float: 1 to 7 digits alone (most cells of many
// files) in a few instructions and converted once (exact below 2^24, so the same float as
// through a double), else FastDecimal on its text, else ParseCell. False when it is not a
// number that parses.
inline bool CellValue(const char* b, const char* e, char delim, bool comma, float* out) {
  const size_t len = static_cast<size_t>(e - b);
  if constexpr (std::endian::native == std::endian::little) {
    if (len - 1 < 7) {
      uint64_t w;
      std::memcpy(&w, b, 8);
      if (text::FirstNonDigit(w) == static_cast<int>(len)) {
        *out = static_cast<float>(static_cast<int32_t>(text::SwarDigits(w, static_cast<int>(len))));
        return true;
      }
    }
  }
  const std::string_view t = CellText(b, e, delim);
  // Decimal commas: numbers with a separator are the general path's.
  if (comma && t.find_first_of(".,") != std::string_view::npos) return false;
  const char* q = t.data();
  double v;
  if (!(FastDecimal(&q, &v) && q == t.data() + t.size()) && ParseCell(t, &v) != Cell::kOk) {
    return false;
  }
  *out = static_cast<float>(v);
  return true;
}

// Whether a class label takes the fast path: not empty, and not text that could be NaN or an
// infinity (the general path refuses those).
inline bool PlainClassLabel(std::string_view t) {
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) t.remove_prefix(1);
  return !t.empty() && t[0] != 'n' && t[0] != 'N' && t[0] != 'i' && t[0] != 'I';
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
  auto parse_second = [&] {
    const Clock::time_point t0 = Clock::now();
    side->line_no = start + CountNewlines(first.data(), first.size());
    side->status = ParseLines(path_, sh_, second, &side->line_no, &side->rows);
    side->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::thread thread;
  try {
    thread = std::thread(parse_second);
  } catch (const std::system_error&) {
    parse_second();  // no thread to be had: one after the other
  }
  const Clock::time_point t0 = Clock::now();
  Finish();  // the previous block's side part, now that its rows come next
  const Status s = ParseLines(path_, sh_, first, line_no, out_);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (thread.joinable()) thread.join();
  if (!s.ok()) return s;
  if (!side->status.ok()) return side->status;
  pending_ = side;
  *line_no = side->line_no;
  // Halfway to the share that would have made both take as long, at a rate per byte each.
  const double total = seconds + side->seconds;
  if (total > 0) share_ = std::clamp(share_ * (1 - 0.5 * (seconds - side->seconds) / total), 0.2, 0.8);
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
  const char delim = opts.delimiter != 0 ? opts.delimiter : DetectDelimiter(text, opts.decimal);
  const char decimal = DetectDecimal(text, delim, opts.decimal);
  size_t pos = 0;
  int64_t line_no = 0;
  const std::string_view first = FirstLine(text, &pos, &line_no);
  if (first.data() == nullptr) return Status::Data(At(path) + "file is empty (it has only blank lines)");
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

}  // namespace shmtrain::data
