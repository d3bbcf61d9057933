// Appending fixed-width values to a byte string, for the binary file formats (model files,
// checkpoints). The formats are little-endian, which is this machine's order
// (shm/layout.h asserts it).
#pragma once

#include <string>

namespace shmtrain {

template <class T>
void AppendRaw(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace shmtrain
