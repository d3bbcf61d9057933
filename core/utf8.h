// UTF-8 validity, for text from a data file on its way to a message or a JSON log: such text
// may hold any bytes, and what is printed must stay readable (and JSON must be valid UTF-8).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace shmtrain {

// The length (1 to 4) of the well-formed UTF-8 sequence at s[i], or 0 when the byte there
// does not start one: a stray continuation byte, an overlong form, a surrogate, a code point
// beyond U+10FFFF, or a sequence cut short. ASCII bytes (control bytes too) are sequences of 1.
inline size_t Utf8Length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - i < n || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

// A byte that a message cannot show as it is: "\x00" .. "\xff".
inline std::string EscapedByte(unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  return buf;
}

// Text from a file as a message shows it: control bytes (but those in `keep`) and bytes that
// are not part of well-formed UTF-8 written as \xNN, everything else as it is. A binary file
// fed by mistake then neither puts raw bytes on the terminal nor cuts a message at a NUL, and
// the message is valid UTF-8.
inline std::string Printable(std::string_view text, std::string_view keep = {}) {
  std::string s;
  s.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8Length(text, i);
    if (n == 0 || ((c < 0x20 || c == 0x7f) && keep.find(static_cast<char>(c)) == keep.npos)) {
      s += EscapedByte(c);
      ++i;
    } else {
      s.append(text, i, n);
      i += n;
    }
  }
  return s;
}

}  // namespace shmtrain
