// .npy files (data/array_file.cc's NPY header and element reader, data/arrays.cc's Dataset):
// the input is the file. It is loaded as features alone, as predict reads one, then as
// features whose labels are the same file, as classification, which reads it a second time
// as labels.
#include <cstddef>
#include <cstdint>

#include "data/format.h"
#include "fuzz/fuzz_util.h"

using namespace shmtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::InputFile file("npy", ".npy", data, size);
  data::LoadOptions opts;
  opts.no_labels = true;
  data::Dataset ds;
  if (!data::FindFormat("npy")->load(file.path(), opts, &ds).ok()) return 0;
  SHMTRAIN_FUZZ_CHECK(ds.rows >= 1 && ds.features >= 1 &&
                          ds.x.size() == static_cast<size_t>(ds.rows) * ds.features,
                      "a loaded array of %lld rows x %d features holds %zu floats",
                      static_cast<long long>(ds.rows), ds.features, ds.x.size());
  opts.no_labels = false;
  opts.file.arrays.labels_path = file.path();
  opts.task = Task::kClassification;
  data::Dataset labelled;
  if (data::FindFormat("npy")->load(file.path(), opts, &labelled).ok()) {
    SHMTRAIN_FUZZ_CHECK(labelled.y.size() == static_cast<size_t>(labelled.rows) &&
                            labelled.classes.size() >= 2,
                        "%zu labels for %lld rows, %d classes", labelled.y.size(),
                        static_cast<long long>(labelled.rows), labelled.classes.size());
  }
  return 0;
}
