#include "data/dataset.h"

#include "data/arrays.h"
#include "nn/rng.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <system_error>

namespace shmtrain::data {
namespace {

// Error prefixes: "<path>: ", "<path>:<line>: ", "<path>:<line>:<column>: ".
std::string At(const std::string& path) {
  return path + ": ";
}
std::string At(const std::string& path, int64_t line) {
  return path + ":" + std::to_string(line) + ": ";
}
std::string At(const std::string& path, int64_t line, int64_t col) {
  return path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
}

// A cell as shown in a message: quoted, cut to a readable length, control bytes escaped (a
// binary file fed by mistake must not put raw bytes on the terminal).
std::string Quote(std::string_view cell) {
  constexpr size_t kMaxShown = 40;
  std::string s = "'";
  for (size_t i = 0; i < cell.size() && i < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(cell[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      s += buf;
    } else {
      s += static_cast<char>(c);
    }
  }
  if (cell.size() > kMaxShown) s += "...";
  s += "'";
  return s;
}

std::string Plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), IsSpace);
}

// ---- CSV cells ----
//
// A cell is the text between two delimiters with its surrounding spaces and tabs trimmed (a
// tab delimiter is not trimmed). A cell whose text starts with '"' is quoted (RFC 4180): it
// runs to the next lone '"', `""` inside stands for one '"', a delimiter inside is text, the
// text between the quotes is trimmed like any cell, and only spaces may follow the closing
// quote. A quoted cell ends on its line. A '"' inside an unquoted cell is text.

constexpr char kDelimiters[] = {',', ';', '\t'};

bool IsPad(char c, char delim) {
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
// "" pairs (Unescape). No allocation: the hot path of loading.
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

// The delimiter of a CSV file from its first two non-blank lines (the header, if any, and
// the first data line): of ',', ';' and tab, the one found outside quotes on the first line
// as often as on the second (and at least once), the most often; ties go to ',' then ';'
// then tab. A one-line file takes the most frequent. When none fits (a ragged file), the most
// frequent on the first line; with none at all, ','.
char DetectDelimiter(std::string_view text) {
  std::string_view lines[2];
  int n = 0;
  while (!text.empty() && n < 2) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!IsBlank(line)) lines[n++] = Trim(line);  // edge tabs are padding, not delimiters
  }
  if (n == 0) return ',';  // only blank lines: the load reports that
  char best = 0, most = 0;
  int64_t best_n = 0, most_n = 0;
  for (char d : kDelimiters) {
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
    std::string dot(decimal);
    dot[dot.find(',')] = '.';
    return " (decimal commas are not supported: write " + Quote(dot) + " for " + Quote(decimal) +
           ")";
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

// For a numeral that from_chars reported out of double range: whether it is too small
// (underflow, read as zero) rather than too large. The numeral is valid from_chars syntax,
// [-]digits[.digits][(e|E)[+|-]digits]; out of range means a decimal magnitude beyond about
// +-308, so the sign of (position of the first significant digit + exponent) decides.
bool IsUnderflow(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  // Decimal position of the first nonzero digit relative to the point: the count of
  // significant integer digits, or minus the zeros after the point when there are none.
  int64_t lead = 0;
  bool found = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    if (found || s[i] != '0') {
      found = true;
      ++lead;
    }
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      if (!found) {
        if (s[i] != '0') {
          found = true;
        } else {
          --lead;
        }
      }
    }
  }
  int64_t exp = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      exp = std::min<int64_t>(exp * 10 + (s[i] - '0'), int64_t{1} << 40);  // saturate
    }
    if (neg) exp = -exp;
  }
  return lead + exp < 0;
}

enum class Cell { kOk, kEmpty, kNotNumber, kNotFinite, kTooLarge };

// Parses a trimmed cell strictly: the whole text must be one decimal number (an optional
// leading '+' is allowed; from_chars alone rejects it). Magnitudes below the smallest float
// become zero or subnormal; magnitudes that round to float infinity are kTooLarge.
Cell ParseCell(std::string_view cell, double* out) {
  if (cell.empty()) return Cell::kEmpty;
  std::string_view num = cell;
  if (num.size() >= 2 && num[0] == '+' && ((num[1] >= '0' && num[1] <= '9') || num[1] == '.')) {
    num.remove_prefix(1);
  }
  double v = 0;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ptr != num.data() + num.size()) return Cell::kNotNumber;
  if (ec == std::errc::result_out_of_range) {
    if (!IsUnderflow(num)) return Cell::kTooLarge;
    v = num[0] == '-' ? -0.0 : 0.0;
  } else if (ec != std::errc()) {
    return Cell::kNotNumber;
  }
  if (!std::isfinite(v)) return Cell::kNotFinite;
  // Round-to-nearest sends |v| >= 2^128 - 2^103 (half an ulp above FLT_MAX) to infinity.
  // Checked before the cast: converting an unrepresentable double to float is undefined.
  static const double kFloatOverflow = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  if (std::fabs(v) >= kFloatOverflow) return Cell::kTooLarge;
  *out = v;
  return Cell::kOk;
}

// The message for a cell that did not parse (r != kOk).
std::string CellError(Cell r, std::string_view cell) {
  switch (r) {
    case Cell::kEmpty:
      return "cell is empty";
    case Cell::kNotNumber:
      return "cell " + Quote(cell) + " is not a number";
    case Cell::kNotFinite:
      return "value " + Quote(cell) + " is not finite";
    case Cell::kTooLarge:
      return "value " + Quote(cell) + " is too large for a 32-bit float";
    case Cell::kOk:
      break;
  }
  return "internal error";
}

// Reads the whole file into *buf. Errors carry strerror(errno).
Status ReadFile(const std::string& path, std::string* buf) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Data(At(path) + "cannot open file: " + std::strerror(errno));
  struct stat st;
  size_t cap = 1 << 16;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    cap = static_cast<size_t>(st.st_size) + 1;  // +1: EOF is seen without another grow
  }
  buf->clear();
  size_t len = 0;
  for (;;) {
    if (len == buf->size()) buf->resize(std::max(cap, buf->size() * 2));
    ssize_t n = ::read(fd, buf->data() + len, buf->size() - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = Status::Data(At(path) + "cannot read file: " + std::strerror(errno));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  ::close(fd);
  buf->resize(len);
  return Status::Ok();
}

// The shortest text that reads back as v ("3", "2.5", "-1e+20").
std::string NumberName(double v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? p : buf);
}

// A label cell on its way to the class map, with where it was for messages.
struct PendingLabel {
  std::string_view text;
  int64_t line;
  int64_t col;  // 0: not a CSV cell (LIBSVM's first token)
};

std::string LabelAt(const std::string& path, const PendingLabel& l) {
  return l.col > 0 ? At(path, l.line, l.col) : At(path, l.line);
}

// Turns the labels into class indices in ds->y, through opts.classes or a map built here.
Status MapClasses(const std::string& path, const LoadOptions& opts,
                  const std::vector<PendingLabel>& labels, Dataset* ds) {
  ClassMap built;
  if (opts.classes == nullptr) {
    std::vector<std::string_view> texts;
    texts.reserve(labels.size());
    for (const PendingLabel& l : labels) texts.push_back(l.text);
    built = ClassMap::Build(texts);
    if (built.size() < 2) {
      return Status::Data(At(path) + "classification needs at least 2 classes, the labels have " +
                          std::to_string(built.size()) + " (" +
                          (built.size() == 1 ? "'" + built.names[0] + "'" : "none") + ")");
    }
  }
  const ClassMap& map = opts.classes ? *opts.classes : built;
  ds->y.resize(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    const int k = map.Find(labels[i].text);
    if (k < 0) {
      return Status::Data(LabelAt(path, labels[i]) + "label " + Quote(labels[i].text) +
                          " is not one of the model's " + std::to_string(map.size()) +
                          " classes (" + map.List() + ")");
    }
    ds->y[i] = static_cast<float>(k);
  }
  ds->classes = map;
  return Status::Ok();
}

// The label of a regression row: a number.
Status RegressionTarget(const std::string& path, const PendingLabel& l, float* out) {
  double v = 0;
  if (Cell r = ParseCell(l.text, &v); r != Cell::kOk) {
    std::string what = CellError(r, l.text);
    if (r == Cell::kNotNumber) what += " (regression needs numeric targets; use --task classification for class labels)";
    return Status::Data(LabelAt(path, l) + what);
  }
  *out = static_cast<float>(v);
  return Status::Ok();
}

// A row's label: kept for the class map (classification) or parsed as the target.
Status TakeLabel(const std::string& path, const PendingLabel& l, bool classify,
                 std::vector<PendingLabel>* labels, Dataset* ds) {
  if (!classify) {
    float v = 0;
    if (Status s = RegressionTarget(path, l, &v); !s.ok()) return s;
    ds->y.push_back(v);
    return Status::Ok();
  }
  if (l.text.empty()) return Status::Data(LabelAt(path, l) + "label cell is empty");
  // NaN or an infinity is a missing or broken value, not a class, as in regression. Only
  // text starting with n or i (after a sign) can be one, so the common label is not parsed.
  std::string_view t = l.text;
  if (t[0] == '+' || t[0] == '-') t.remove_prefix(1);
  if (!t.empty() && (t[0] == 'n' || t[0] == 'N' || t[0] == 'i' || t[0] == 'I')) {
    double v = 0;
    if (ParseCell(l.text, &v) == Cell::kNotFinite) {
      return Status::Data(LabelAt(path, l) + CellError(Cell::kNotFinite, l.text));
    }
  }
  labels->push_back(l);
  return Status::Ok();
}

// Whether the first data line of `text` reads as LIBSVM: "<label> <int>:<...>".
bool LooksLikeLibsvm(std::string_view text) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line = Trim(line.substr(0, line.size() - 1));
    if (line.empty() || line[0] == '#') continue;
    if (line.find_first_of(",;") != std::string_view::npos) return false;
    const size_t sp = line.find_first_of(" \t");
    if (sp == std::string_view::npos) return false;
    const std::string_view tok = Trim(line.substr(sp));
    const size_t colon = tok.find(':');
    if (colon == 0 || colon == std::string_view::npos) return false;
    return std::all_of(tok.begin(), tok.begin() + colon, [](char c) { return c >= '0' && c <= '9'; }) ||
           tok.substr(0, colon) == "qid";
  }
  return false;
}

Status LoadCsv(const std::string& path, std::string_view text, const LoadOptions& opts,
               Dataset* out) {
  const bool classify = opts.task == Task::kClassification && !opts.no_labels;
  // Class labels may be text, so the label cell never marks a line as a header (predict
  // data too: a file with a label column holds the same kind of labels).
  const bool text_labels = opts.task == Task::kClassification;
  const char delim = opts.delimiter != 0 ? opts.delimiter : DetectDelimiter(text);
  Dataset ds;
  std::vector<PendingLabel> labels;
  // Class labels quoted with "" inside, unescaped; a deque, so the views into it stay valid.
  std::deque<std::string> unescaped;
  int64_t ncols = 0;     // cells per row, fixed by the first non-blank line
  int64_t ref_line = 0;  // that line
  int64_t label = -1;    // label column, 0-based; -1: none (predict data without labels)
  bool has_header = false;

  // Bound on the rows, for reserving: no more than the lines.
  const int64_t max_lines = std::count(text.begin(), text.end(), '\n') + 1;

  const char* p = text.data();
  const char* const end = text.data() + text.size();
  int64_t line_no = 0;
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    const char* le = nl ? nl : end;
    std::string_view line(p, le - p);
    p = nl ? nl + 1 : end;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (IsBlank(line)) continue;

    QuoteError qerr;
    int64_t qcell = 0;
    const int64_t cells = CountCells(line, delim, &qerr, &qcell);
    if (qerr != QuoteError::kNone) {
      return Status::Data(At(path, line_no, qcell) + QuoteErrorText(qerr));
    }
    const char* const lend = line.data() + line.size();
    if (ncols == 0) {
      // The first non-blank line fixes the shape and decides the header.
      ncols = cells;
      ref_line = line_no;
      if (ncols > INT_MAX) {
        return Status::Data(At(path, line_no) + "row has " + std::to_string(ncols) +
                            " cells, more than the supported " + std::to_string(INT_MAX));
      }
      switch (opts.header) {
        case HeaderMode::kYes:
          has_header = true;
          break;
        case HeaderMode::kNo:
          has_header = false;
          break;
        case HeaderMode::kAuto: {
          // A named label column implies a header line.
          has_header = !opts.label_name.empty();
          // A header has a cell that is not a number (quoted or not). Empty, NaN and
          // too-large cells do not count: such a first line is data, and its error is
          // reported as such. With text class labels the label cell does not count either.
          const char* c0 = line.data();
          for (int64_t c = 0; c < ncols && !has_header; ++c) {
            CellKind kind;
            const std::string_view cell = NextCell(&c0, lend, delim, &kind);
            double v;
            const bool label_column_present =
                !opts.no_labels || opts.features <= 0 || ncols != opts.features;
            const bool text_label =
                text_labels && label_column_present && opts.label_name.empty() &&
                c == (opts.label_col == -1 ? ncols - 1 : opts.label_col);
            has_header = !text_label && ParseCell(cell, &v) == Cell::kNotNumber;
          }
          break;
        }
      }
      if (!opts.label_name.empty()) {
        if (!has_header) {
          return Status::Data(At(path) + "label column '" + opts.label_name +
                              "' is named, but the file has no header line to find it in");
        }
        const char* c0 = line.data();
        std::string names;
        for (int64_t c = 0; c < ncols; ++c) {
          CellKind kind;
          std::string_view name = NextCell(&c0, lend, delim, &kind);
          std::string own;
          if (kind == CellKind::kEscaped) name = own = Unescape(name);
          if (name == opts.label_name && label < 0) label = c;
          if (c < 8) names += (c ? ", " : "") + std::string(name);
        }
        if (label < 0) {
          return Status::Data(At(path, line_no) + "label column '" + opts.label_name +
                              "' is not in the header (" + names + (ncols > 8 ? ", ..." : "") +
                              ")" + DelimiterHint(line, delim));
        }
      } else {
        label = opts.label_col == -1 ? ncols - 1 : opts.label_col;
        if (label >= ncols) {
          return Status::Data(At(path) + "label column " + std::to_string(opts.label_col) +
                              " does not exist (rows have " + Plural(ncols, "column") + ")" +
                              DelimiterHint(line, delim));
        }
      }
      if (opts.no_labels && opts.features > 0 && ncols == opts.features) label = -1;
      const int64_t nfeat = label < 0 ? ncols : ncols - 1;
      if (nfeat < 1) {
        return Status::Data(At(path) +
                            "rows have 1 column; need at least one feature column besides "
                            "the label" +
                            DelimiterHint(line, delim));
      }
      if (opts.features > 0 && nfeat != opts.features) {
        return Status::Data(At(path, line_no) + "rows have " + Plural(nfeat, "feature") +
                            " besides the label, the model takes " +
                            std::to_string(opts.features) + DelimiterHint(line, delim));
      }
      ds.features = static_cast<int>(nfeat);
      // A row of n cells takes at least 2n - 1 bytes, so this bounds the rows however many
      // lines are blank.
      const int64_t max_rows =
          std::min<int64_t>(max_lines, static_cast<int64_t>(text.size()) / (2 * ncols - 1) + 1);
      if (opts.check_size) {
        if (Status s = opts.check_size(max_rows, ds.features); !s.ok()) return s;
      }
      ds.x.reserve(static_cast<size_t>(max_rows) * static_cast<size_t>(ds.features));
      if (label >= 0 && !opts.no_labels) {
        (classify ? labels.reserve(static_cast<size_t>(max_rows))
                  : ds.y.reserve(static_cast<size_t>(max_rows)));
      }
      // A header line, detected or forced (even when all its cells are numbers), is never
      // a row.
      if (has_header) continue;
    } else if (cells != ncols) {
      return Status::Data(At(path, line_no) + "row has " + Plural(cells, "cell") + ", expected " +
                          std::to_string(ncols) + " (as on line " + std::to_string(ref_line) +
                          ")" + DelimiterHint(line, delim));
    }

    // A data row with exactly ncols cells.
    const char* c0 = line.data();
    for (int64_t c = 0; c < ncols; ++c) {
      CellKind kind;
      std::string_view cell = NextCell(&c0, lend, delim, &kind);
      if (c == label) {
        if (opts.no_labels) continue;
        if (classify && kind == CellKind::kEscaped) cell = unescaped.emplace_back(Unescape(cell));
        if (Status s = TakeLabel(path, {cell, line_no, c + 1}, classify, &labels, &ds); !s.ok()) {
          double v;
          if (classify || ParseCell(cell, &v) != Cell::kNotNumber) return s;
          return Status::Data(s.message() + DelimiterHint(line, delim));
        }
        continue;
      }
      double v = 0;
      if (Cell r = ParseCell(cell, &v); r != Cell::kOk) {
        return Status::Data(At(path, line_no, c + 1) + CellError(r, cell) +
                            (r == Cell::kNotNumber ? DelimiterHint(line, delim) : ""));
      }
      ds.x.push_back(static_cast<float>(v));
    }
    ++ds.rows;
  }

  if (ncols == 0) return Status::Data(At(path) + "file is empty (it has only blank lines)");
  if (ds.rows == 0) return Status::Data(At(path) + "file has a header line but no data rows");
  if (classify) {
    if (Status s = MapClasses(path, opts, labels, &ds); !s.ok()) return s;
  }
  *out = std::move(ds);
  return Status::Ok();
}

// LIBSVM / SVMlight: "<label> <index>:<value> <index>:<value> ... [# comment]", indices from 1,
// ascending; absent features are 0.
Status LoadLibsvm(const std::string& path, std::string_view text, const LoadOptions& opts,
                  Dataset* out) {
  const bool classify = opts.task == Task::kClassification && !opts.no_labels;
  struct Entry {
    int64_t row;
    int64_t index;  // 1-based
    float value;
  };
  std::vector<Entry> entries;
  std::vector<PendingLabel> labels;
  Dataset ds;
  int64_t max_index = 0;
  const int width = opts.features > 0 ? opts.features : opts.libsvm_features;
  const char* p = text.data();
  const char* const end = text.data() + text.size();
  int64_t line_no = 0;
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    std::string_view line(p, (nl ? nl : end) - p);
    p = nl ? nl + 1 : end;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = Trim(line);
    if (line.empty()) continue;
    // A CSV line read as LIBSVM is one token, a label with no feature: refused, not loaded as
    // a row of zeros. No LIBSVM line has ',' or ';' without an "<index>:<value>" token.
    if (line.find(':') == std::string_view::npos &&
        line.find_first_of(",;") != std::string_view::npos) {
      return Status::Data(At(path, line_no) + "line " + Quote(line) +
                          " is not LIBSVM (LIBSVM lines are '<label> <index>:<value> ...'); it "
                          "looks like CSV: try --format csv");
    }
    bool first = true;
    int64_t prev = 0;
    while (!line.empty()) {
      const size_t sp = line.find_first_of(" \t");
      const std::string_view tok = line.substr(0, sp);
      line = Trim(line.substr(sp == std::string_view::npos ? line.size() : sp));
      if (first) {
        first = false;
        if (tok.find(':') != std::string_view::npos) {
          return Status::Data(At(path, line_no) + "line starts with " + Quote(tok) +
                              ", not a label (LIBSVM lines are '<label> <index>:<value> ...')");
        }
        if (opts.no_labels) continue;
        if (Status s = TakeLabel(path, {tok, line_no, 0}, classify, &labels, &ds); !s.ok()) {
          return s;
        }
        continue;
      }
      const size_t colon = tok.find(':');
      if (colon == std::string_view::npos) {
        return Status::Data(At(path, line_no) + "token " + Quote(tok) +
                            " is not '<index>:<value>'");
      }
      const std::string_view is = tok.substr(0, colon), vs = tok.substr(colon + 1);
      if (is == "qid") continue;  // SVMlight ranking groups: not a feature
      int64_t index = 0;
      const auto [ip, iec] = std::from_chars(is.data(), is.data() + is.size(), index);
      if (is.empty() || iec != std::errc() || ip != is.data() + is.size() || index < 1) {
        return Status::Data(At(path, line_no) + "feature index " + Quote(is) +
                            " is not an integer >= 1 (LIBSVM indices start at 1)");
      }
      if (index <= prev) {
        return Status::Data(At(path, line_no) + "feature index " + std::to_string(index) +
                            " follows " + std::to_string(prev) +
                            " (indices must be ascending, each at most once)");
      }
      if (width > 0 && index > width) {
        return Status::Data(At(path, line_no) + "feature index " + std::to_string(index) +
                            " is beyond the model's " + std::to_string(width) + " inputs");
      }
      if (index > INT_MAX) {
        return Status::Data(At(path, line_no) + "feature index " + std::to_string(index) +
                            " is beyond the supported " + std::to_string(INT_MAX));
      }
      prev = index;
      double v = 0;
      if (Cell r = ParseCell(vs, &v); r != Cell::kOk) {
        return Status::Data(At(path, line_no) + "feature " + std::to_string(index) + ": " +
                            CellError(r, vs));
      }
      max_index = std::max(max_index, index);
      entries.push_back({ds.rows, index, static_cast<float>(v)});
    }
    ++ds.rows;
  }
  if (ds.rows == 0) {
    return Status::Data(At(path) + "file is empty (it has only blank or comment lines)");
  }
  ds.features = width > 0 ? width : static_cast<int>(max_index);
  if (ds.features < 1) return Status::Data(At(path) + "no row has a feature");
  if (opts.check_size) {
    if (Status s = opts.check_size(ds.rows, ds.features); !s.ok()) return s;
  }
  ds.x.assign(static_cast<size_t>(ds.rows) * static_cast<size_t>(ds.features), 0.0f);
  for (const Entry& e : entries) ds.x[e.row * ds.features + (e.index - 1)] = e.value;
  if (classify) {
    if (Status s = MapClasses(path, opts, labels, &ds); !s.ok()) return s;
  }
  *out = std::move(ds);
  return Status::Ok();
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
  for (int k = 0; k < size() && k < most; ++k) s += (k ? ", " : "") + names[k];
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
    for (double v : m.values) m.names.push_back(NumberName(v));
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
  for (double v : values) m.names.push_back(NumberName(v));
  m.values = std::move(values);
  return m;
}

int ClassMap::FindValue(double v) const {
  if (!numeric) return Find(NumberName(v));
  const auto it = std::lower_bound(values.begin(), values.end(), v);
  return it != values.end() && *it == v ? static_cast<int>(it - values.begin()) : -1;
}

Status LoadFile(const std::string& path, const LoadOptions& opts, Dataset* out) {
  // Option errors first: they do not depend on the file.
  if (opts.label_col < -1) {
    return Status::Data(At(path) + "label column " + std::to_string(opts.label_col) +
                        " is invalid (use -1 for the last column)");
  }
  if (opts.delimiter != 0 && opts.delimiter != ',' && opts.delimiter != ';' &&
      opts.delimiter != '\t') {
    return Status::Data(At(path) + "delimiter " + Quote(std::string_view(&opts.delimiter, 1)) +
                        " is not supported (use ',', ';' or tab)");
  }
  DataFormat format = opts.format == DataFormat::kAuto ? DetectFormat(path) : opts.format;
  if (IsArrayFormat(format)) {
    const char* csv_flag = opts.label_col != -1          ? "--label-col"
                           : !opts.label_name.empty()     ? "--label-col"
                           : opts.header != HeaderMode::kAuto ? "--header"
                           : opts.delimiter != 0          ? "--delimiter"
                                                          : nullptr;
    if (csv_flag != nullptr) {
      return Status::Data(At(path) + csv_flag + " applies to CSV files; this is " +
                          (format == DataFormat::kIdx ? "IDX" : "NumPy") +
                          " data, whose labels come from --labels or the .npz's --npz-y array");
    }
    return LoadArrays(path, format, opts, out);
  }
  if (!opts.labels_path.empty()) {
    return Status::Data(At(path) + "--labels applies to IDX and NumPy data; this file is " +
                        (format == DataFormat::kLibsvm ? "LIBSVM" : "CSV") +
                        ", whose labels are in the file");
  }
  std::string buf;
  if (Status s = ReadFile(path, &buf); !s.ok()) return s;
  if (buf.empty()) return Status::Data(At(path) + "file is empty");

  std::string_view text(buf);
  // A UTF-8 byte order mark (spreadsheet exports write one) is not part of the first cell.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  if (format == DataFormat::kAuto) {
    format = LooksLikeLibsvm(text) ? DataFormat::kLibsvm : DataFormat::kCsv;
  }
  return format == DataFormat::kLibsvm ? LoadLibsvm(path, text, opts, out)
                                       : LoadCsv(path, text, opts, out);
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

}  // namespace shmtrain::data
