// Numbers in messages and descriptions of settings, as the user would type them, each format
// written once: a printf format (Fmt), the shortest %g that reads back (ShortestDecimal),
// std::to_chars' shortest (ShortestText), and a count of things (Plural).
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace shmtrain {

// One number through a printf format, e.g. Fmt("%.4f", 0.97), Fmt("%gs", 1.5).
inline std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The shortest decimal that reads back as x: "0.01", not "0.010000000000000000208", yet
// 0.01 and 0.01000001 stay apart, so two different settings never describe alike.
inline std::string ShortestDecimal(double x) {
  char buf[32];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

// The shortest text that reads back as x, fixed or scientific as std::to_chars picks: "3",
// "2.5", "-1e+20", and "1e+05" where ShortestDecimal writes "100000".
inline std::string ShortestText(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

// "1 row", "3 rows": n and the word, with an s unless n is 1.
inline std::string Plural(int64_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

}  // namespace shmtrain
