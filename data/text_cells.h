// What the text loaders (data/csv.cc, data/libsvm.cc) share: error prefixes, cells as messages
// show them, the strict number parser and its fast path, and the class labels of a load.
// Internal to data/.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/decimal.h"
#include "core/text.h"
#include "data/dataset.h"

namespace shmtrain::data::text {

// Error prefixes: "<path>: ", "<path>:<line>: ", "<path>:<line>:<column>: ".
std::string At(const std::string& path);
std::string At(const std::string& path, int64_t line);
std::string At(const std::string& path, int64_t line, int64_t col);

// A cell as shown in a message: quoted, cut to a readable length, made Printable (core/utf8.h).
std::string Quote(std::string_view cell);

using shmtrain::Plural;  // core/decimal.h

using shmtrain::IsSpace;  // core/text.h
using shmtrain::Trim;
// A line without the '\r's that end it ("\r\n" and "\r\r\n" line ends alike).
inline std::string_view DropCr(std::string_view line) {
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}
bool IsBlank(std::string_view line);

enum class Cell { kOk, kEmpty, kNotNumber, kNotFinite, kTooLarge };

// Parses a trimmed cell strictly: the whole text must be one decimal number (an optional
// leading '+' is allowed; from_chars alone rejects it). Magnitudes below the smallest float
// become zero or subnormal; magnitudes that round to float infinity are kTooLarge.
Cell ParseCell(std::string_view cell, double* out);

// ParseCell with `decimal` ('.' or ',') as the decimal separator: with ',', a cell holding
// '.' is not a number, and one with ',' reads as the same text with '.' would.
Cell ParseNumber(std::string_view cell, char decimal, double* out);

// The message for a cell that did not parse (r != kOk).
std::string CellError(Cell r, std::string_view cell);

// The value of the 1 to 7 digits at s (the text's first byte that is not a digit at n, 0 < n < 8)
// from the 8 bytes w loaded there: every digit in one multiply-add tree, without a branch per
// digit (the byte after a digit is unpredictable in data of mixed lengths). Little-endian.
inline uint64_t SwarDigits(uint64_t w, int n) {
  // Subtracting '0' borrows only upwards from the first non-digit; the shift drops it and
  // what follows, and the digits become the low end of 8 with leading zeros.
  uint64_t d = (w - 0x3030303030303030) << (64 - 8 * n);
  d = d * 10 + (d >> 8);  // pairs
  return (((d & 0x000000FF000000FF) * 0x000F424000000064) +            // 100, 1000000 << 32
          (((d >> 16) & 0x000000FF000000FF) * 0x0000271000000001)) >>  // 1, 10000 << 32
         32;
}

// The index of the first byte of w that is not an ASCII digit, or 8. A byte's carry in the
// addition reaches only bytes after a non-digit, which cannot come first.
inline int FirstNonDigit(uint64_t w) {
  const uint64_t hi = w & 0xF0F0F0F0F0F0F0F0;
  const uint64_t hi6 = (w + 0x0606060606060606) & 0xF0F0F0F0F0F0F0F0;
  const uint64_t other = (hi ^ 0x3030303030303030) | (hi6 ^ 0x3030303030303030);
  return other == 0 ? 8 : std::countr_zero(other) >> 3;
}

// The fast path of ParseCell for the numbers data files are made of: [+|-]digits[.digits]
// [(e|E)[+|-]digits], at least one digit in the mantissa, at most 19 digits in all. It reads
// from *p and stops at the first byte that cannot continue the number (the caller checks that
// byte ends the cell); true with *p moved there and *out set, or false when the text is
// anything else or the value needs more care: a mantissa above 2^53, or a power of ten beyond
// 10^22. What it reads then is exact: the mantissa and 10^k are exact doubles and one
// multiplication or division rounds once, so *out is the correctly rounded value, the double
// std::from_chars gives, bit for bit (Clinger's fast path). Its magnitude is below
// 2^53 * 10^22, far inside float range. The number must not end the text: the line's '\n'
// follows it, and 8 readable bytes follow every position up to that '\n'.
inline bool FastDecimal(const char** p, double* out) {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                      1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                      1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const char* s = *p;
  const bool neg = *s == '-';
  if (*s == '-' || *s == '+') ++s;
  if constexpr (std::endian::native == std::endian::little) {
    uint64_t w;
    std::memcpy(&w, s, 8);
    const int n = FirstNonDigit(w);
    if (n > 0 && n < 8 && s[n] != '.' && s[n] != 'e' && s[n] != 'E') {
      const double v = static_cast<double>(SwarDigits(w, n));
      *out = neg ? -v : v;
      *p = s + n;
      return true;
    }
  }
  uint64_t m = 0;
  const char* const d0 = s;
  for (unsigned d; (d = static_cast<unsigned>(*s - '0')) <= 9; ++s) m = m * 10 + d;
  int64_t digits = s - d0, frac = 0;
  if (*s == '.') {
    const char* const f0 = ++s;
    for (unsigned d; (d = static_cast<unsigned>(*s - '0')) <= 9; ++s) m = m * 10 + d;
    frac = s - f0;
    digits += frac;
  }
  // Beyond 19 digits m may have wrapped; it is not used then.
  if (digits == 0 || digits > 19 || m > (uint64_t{1} << 53)) return false;
  int64_t exp = -frac;
  if (*s == 'e' || *s == 'E') {
    const char* e = s + 1;
    const bool eneg = *e == '-';
    if (*e == '-' || *e == '+') ++e;
    int64_t ev = 0;
    const char* const e0 = e;
    for (unsigned d; (d = static_cast<unsigned>(*e - '0')) <= 9 && e - e0 < 4; ++e)
      ev = ev * 10 + d;
    if (e == e0 || static_cast<unsigned>(*e - '0') <= 9) return false;  // none, or too many
    exp += eneg ? -ev : ev;
    s = e;
  }
  double v = static_cast<double>(m);
  if (m != 0) {
    if (exp < -22 || exp > 22) return false;
    v = exp < 0 ? v / kPow10[-exp] : v * kPow10[exp];
  }
  *out = neg ? -v : v;
  *p = s;
  return true;
}

// A label cell on its way to the class map, with where it was for messages.
struct PendingLabel {
  std::string_view text;
  int64_t line;
  int64_t col;  // 0: not a CSV cell (LIBSVM's first token)
};

// Class labels in row order. Each distinct text is kept once, with where it first appeared;
// a row holds the index of its text. The texts are copies: the loaders' blocks of the file
// are gone by the time the classes are known.
class LabelBook {
 public:
  LabelBook() = default;
  LabelBook(const LabelBook&) = delete;
  LabelBook& operator=(const LabelBook&) = delete;

  void Add(const PendingLabel& l);
  // Appends the rows of `later`, which come after these in the file.
  void Append(const LabelBook& later);
  void Clear();
  void Reserve(size_t rows) { rows_.reserve(rows); }
  size_t rows() const { return rows_.size(); }

  // Turns the labels into class indices in ds->y, through opts.classes or a map built here.
  Status MapClasses(const std::string& path, const LoadOptions& opts, Dataset* ds) const;

 private:
  int32_t Intern(std::string_view text, int64_t line, int64_t col);

  std::deque<std::string> texts_;  // a deque: the views in index_ stay valid
  std::vector<int64_t> line_, col_;
  std::unordered_map<std::string_view, int32_t> index_;
  std::vector<int32_t> rows_;
};

// A row's label: kept for the class map (classification) or parsed as the target into *y,
// with `decimal` as its decimal separator.
Status TakeLabel(const std::string& path, const PendingLabel& l, bool classify, LabelBook* labels,
                 std::vector<float>* y, char decimal = '.');

}  // namespace shmtrain::data::text
