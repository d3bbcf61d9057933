// Model files (master/files/model_file.cc, DecodeModel): the input is the file's bytes. The CRC-32
// guards the body, and a fuzzer cannot forge one: for half of the inputs (by a hash of the
// bytes) the target writes the right CRC into the last four bytes, so that the decoder's
// success path is reached too.
//
// A model decoded from a version 3 file is re-encoded to exactly the bytes it came from: every
// byte of the format means something, and EncodeModel is the format's one writer. One decoded
// from a version 2 file (the releases before layered models) is re-encoded as version 3, and
// that file decodes to the same model.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/crc32.h"
#include "fuzz/fuzz_util.h"
#include "master/files/model_file.h"

using namespace shmtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = fuzz::WithValidCrcHalfTheTime(data, size);
  Model m;
  if (!DecodeModel(bytes, "model", &m).ok()) return 0;
  SHMTRAIN_FUZZ_CHECK(m.params.size() == m.spec.ParamCount(), "%zu parameters for layers of %zu",
                      m.params.size(), m.spec.ParamCount());
  const std::string again = EncodeModel(m);
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof kModelMagic, sizeof version);
  if (version == kModelVersion) {
    SHMTRAIN_FUZZ_CHECK(again == bytes, "the decoded model encodes to other bytes (%zu, not %zu)",
                        again.size(), bytes.size());
    return 0;
  }
  Model back;
  SHMTRAIN_FUZZ_CHECK(DecodeModel(again, "model", &back).ok(), "a version 2 model re-encoded does "
                      "not decode");
  SHMTRAIN_FUZZ_CHECK(back.spec == m.spec && back.params.size() == m.params.size() &&
                          std::memcmp(back.params.data(), m.params.data(),
                                      m.params.size() * sizeof(float)) == 0 &&
                          back.classes.names == m.classes.names && back.norm.kind == m.norm.kind,
                      "a version 2 model re-encoded decodes to another model");
  return 0;
}
