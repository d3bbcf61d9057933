// The CSV loader's tokenizer (data/csv.cc reads its rows with it): cells, the delimiter and the
// decimal separator a file uses, the hints its messages give, and the fast path's readers of
// unquoted cells. Internal to data/.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "data/text_cells.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace shmtrain::data::csv {

// ---- Cells ----
//
// A cell is the text between two delimiters with its surrounding spaces and tabs trimmed (a
// tab delimiter is not trimmed). A cell whose text starts with '"' is quoted (RFC 4180): it
// runs to the next lone '"', `""` inside stands for one '"', a delimiter inside is text, the
// text between the quotes is trimmed like any cell, and only spaces may follow the closing
// quote. A quoted cell ends on its line. A '"' inside an unquoted cell is text.

inline bool IsPad(char c, char delim) {
  return (c == ' ' || c == '\t') && c != delim;
}

enum class QuoteError { kNone, kUnclosed, kTextAfter };

// The number of cells of `line` split at `delim`, quotes honoured. A line without '"' costs
// one memchr and one count. On a malformed quoted cell sets *err and *err_cell (1-based) and
// returns the cells up to it.
int64_t CountCells(std::string_view line, char delim, QuoteError* err, int64_t* err_cell);

std::string QuoteErrorText(QuoteError e);

enum class CellKind { kPlain, kQuoted, kEscaped };  // kEscaped: quoted, with "" inside

// The trimmed, unquoted text of the cell at *p, and moves *p past its delimiter (to `e` after
// the last cell). The line must have passed CountCells. A kEscaped cell's text still has its
// "" pairs (Unescape). No allocation.
std::string_view NextCell(const char** p, const char* e, char delim, CellKind* kind);

// A quoted cell's text with each "" read as one '"'.
std::string Unescape(std::string_view cell);

// ---- The delimiter and the decimal separator ----

// The decimal separator (DataFileOptions::decimal) of a file with this delimiter.
char DetectDecimal(std::string_view text, char delim, char decimal);

// The delimiter of a CSV file from its first two non-blank lines (the header, if any, and
// the first data line): of ',', ';' and tab, the one found outside quotes on the first line
// as often as on the second (and at least once), the most often; ties go to ',' then ';'
// then tab. A one-line file takes the most frequent. When none fits (a ragged file), the most
// frequent on the first line; with none at all, ','. With decimal commas (given, or ';' found
// steadily and every ',' in a number such as "1,5" of its cells) ',' is no delimiter.
char DetectDelimiter(std::string_view text, char decimal);

// For the message of a line that did not parse with `delim`: a hint when its unquoted cells
// hold another delimiter, " (the line looks ';'-separated: try --delimiter ';')", or decimal
// commas, else "". Only on the error path.
std::string DelimiterHint(std::string_view line, char delim);

// ---- The fast path's cells (data/csv.cc, FastRow) ----

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
  if (!(text::FastDecimal(&q, &v) && q == t.data() + t.size()) &&
      text::ParseCell(t, &v) != text::Cell::kOk) {
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

}  // namespace shmtrain::data::csv
