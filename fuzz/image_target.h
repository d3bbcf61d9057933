// The JPEG and PNG targets (data/image.cc, data/image_jpeg.cc, data/image_png.cc): the input
// is the file's bytes, decoded from memory with limits of 2^20 pixels (a valid image's 3 MiB
// of samples and libjpeg's buffers stay far below the runs' -malloc_limit_mb). Beyond "no
// crash": an image that decodes has the samples its header promises, grey or RGB, within the
// limits; the header read alone, from the file, says the same; a second decode gives the same
// samples (nothing depends on memory left over from before).
#pragma once

#include <cstddef>
#include <cstdint>

#include "data/image.h"
#include "fuzz/fuzz_util.h"

namespace shmtrain::fuzz {

inline int RunImageTarget(const uint8_t* data, size_t size, const char* suffix) {
  data::ImageLimits limits;
  limits.max_pixels = int64_t{1} << 20;
  data::Image image;
  const Status s = data::DecodeImage(data, size, "input", limits, &image);
  SHMTRAIN_FUZZ_CHECK(s.ok() || (s.code() == Status::Code::kData &&
                                 s.message().rfind("input: ", 0) == 0),
                      "a refusal that is not kData naming the input: %s", s.message().c_str());
  if (!s.ok()) return 0;
  const data::ImageHeader& h = image.header;
  SHMTRAIN_FUZZ_CHECK(h.width >= 1 && h.height >= 1 &&
                          int64_t{h.width} * h.height <= limits.max_pixels &&
                          (h.channels == 1 || h.channels == 3) &&
                          image.pixels.size() == size_t(h.width) * h.height * h.channels,
                      "%d x %d x %d with %zu samples", h.width, h.height, h.channels,
                      image.pixels.size());
  const InputFile file("image", suffix, data, size);
  data::ImageHeader header;
  const Status hs = data::ReadImageHeader(file.path(), limits, &header);
  SHMTRAIN_FUZZ_CHECK(hs.ok() && header.kind == h.kind && header.width == h.width &&
                          header.height == h.height && header.channels == h.channels,
                      "the header read alone differs: %s", hs.message().c_str());
  data::Image again;
  SHMTRAIN_FUZZ_CHECK(data::DecodeImage(file.path(), limits, &again).ok() &&
                          again.pixels == image.pixels,
                      "a second decode, from the file, differs");
  return 0;
}

}  // namespace shmtrain::fuzz
