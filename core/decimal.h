// Numbers in messages and descriptions of settings, as the user would type them.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace shmtrain {

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

}  // namespace shmtrain
