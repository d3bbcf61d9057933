// Text helpers the parsers share: of the model text (nn/layer.cc) and of data files (data/).
#pragma once

#include <string_view>

namespace shmtrain {

// What may surround a cell, a layer or an argument: a space or a tab.
inline bool IsSpace(char c) {
  return c == ' ' || c == '\t';
}

// s without the spaces and tabs around it.
inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace shmtrain
