// .npz archives (data/byte_stream.cc's zip directory and members, stored and deflated, zip64;
// the members' NPY headers): the input is the archive. Every member listed is read to its end
// (the CRC-32 and size check), then the archive is loaded as features alone (array 'x'), then
// with its labels (array 'y') as classification.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/format.h"
#include "data/byte_stream.h"
#include "fuzz/fuzz_util.h"

using namespace shmtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::InputFile file("npz", ".npz", data, size);
  std::vector<std::string> members;
  if (!data::ListZip(file.path(), &members).ok()) return 0;
  // Every member could be read: at most a few, so that an archive of thousands of tiny
  // members does not turn one input into thousands of opens.
  for (size_t i = 0; i < members.size() && i < 8; ++i) {
    (void)data::CheckZipMember(file.path(), members[i]);
  }
  data::LoadOptions opts;
  opts.no_labels = true;
  data::Dataset ds;
  if (!data::FindFormat("npz")->load(file.path(), opts, &ds).ok()) return 0;
  SHMTRAIN_FUZZ_CHECK(ds.x.size() == static_cast<size_t>(ds.rows) * ds.features,
                      "%lld rows x %d features in %zu floats", static_cast<long long>(ds.rows),
                      ds.features, ds.x.size());
  opts.no_labels = false;
  opts.task = Task::kClassification;
  data::Dataset labelled;
  if (data::FindFormat("npz")->load(file.path(), opts, &labelled).ok()) {
    SHMTRAIN_FUZZ_CHECK(labelled.y.size() == static_cast<size_t>(labelled.rows),
                        "%zu labels for %lld rows", labelled.y.size(),
                        static_cast<long long>(labelled.rows));
  }
  return 0;
}
