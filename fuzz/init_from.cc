// --init-from archives (master/files/init_from.h): the input is the .npz, read for a fixed
// model with every kind of tensor (a conv without bias, batch norm's buffers and its int64
// count, a residual block's, a linear layer's). What it accepts must hold the model's count of
// values, all finite, running variances not negative, and must read back the same: exported
// again (AppendParamArrays, the export's own arrays) and read, it gives the same bits.
#include "master/files/init_from.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "data/npz_writer.h"
#include "fuzz/fuzz_util.h"
#include "master/files/export.h"
#include "nn/layer.h"

using namespace shmtrain;

namespace {

ModelSpec Spec() {
  ModelSpec spec;
  spec.input = {1, 4, 4};
  spec.loss = Loss::kXent;
  const Status s = nn::ParseModelText(
      "conv2d(2,3,padding=1,bias=false),batchnorm2d,relu,residual(conv2d(2,3,padding=1)),"
      "flatten,linear(3)",
      &spec.layers);
  if (!s.ok()) std::abort();
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ModelSpec spec = Spec();
  const fuzz::InputFile file("init_from", ".npz", data, size);
  std::vector<float> params;
  if (!master::ReadInitFrom(file.path(), spec, &params).ok()) return 0;
  SHMTRAIN_FUZZ_CHECK(params.size() == spec.ParamCount(), "%zu values for %zu parameters",
                      params.size(), spec.ParamCount());
  for (size_t i = 0; i < params.size(); ++i) {
    SHMTRAIN_FUZZ_CHECK(std::isfinite(params[i]), "parameter %zu is not finite", i);
  }
  std::vector<data::NpyArray> arrays;
  master::AppendParamArrays(spec, params.data(), &arrays);
  std::string bytes;
  SHMTRAIN_FUZZ_CHECK(data::EncodeNpz(arrays, "again", &bytes).ok(), "%s", "cannot encode");
  const fuzz::InputFile again("init_from_again", ".npz", bytes.data(), bytes.size());
  std::vector<float> back;
  const Status read = master::ReadInitFrom(again.path(), spec, &back);
  SHMTRAIN_FUZZ_CHECK(read.ok(), "its own export is refused: %s", read.message().c_str());
  SHMTRAIN_FUZZ_CHECK(std::memcmp(back.data(), params.data(), params.size() * 4) == 0, "%s",
                      "the export read back differs");
  return 0;
}
