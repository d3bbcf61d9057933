#include "data/csv_cells.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "data/text_cells.h"

namespace shmtrain::data::csv {
namespace {

using text::IsBlank;
using text::Quote;
using text::Trim;

constexpr char kDelimiters[] = {',', ';', '\t'};

// The delimiter as the --delimiter flag spells it.
std::string DelimiterName(char d) {
  return d == '\t' ? "tab" : "'" + std::string(1, d) + "'";
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

}  // namespace

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

std::string Unescape(std::string_view cell) {
  std::string s;
  s.reserve(cell.size());
  for (size_t i = 0; i < cell.size(); ++i) {
    s += cell[i];
    if (cell[i] == '"' && i + 1 < cell.size() && cell[i + 1] == '"') ++i;
  }
  return s;
}

char DetectDecimal(std::string_view text, char delim, char decimal) {
  if (decimal != 0) return decimal;
  std::string_view lines[2];
  const int n = HeadLines(text, lines);
  return delim == ';' && DecimalCommas(lines, n) ? ',' : '.';
}

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

}  // namespace shmtrain::data::csv
