// What data/image.cc shares with the two decoders (data/image_jpeg.cc, data/image_png.cc):
// each decodes one whole file held in memory, and with `header_only` stops after the header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image.h"

namespace shmtrain::data::image_internal {

Status DecodeJpeg(const uint8_t* bytes, size_t n, const std::string& name,
                  const ImageLimits& limits, bool header_only, Image* out);
Status DecodePng(const uint8_t* bytes, size_t n, const std::string& name,
                 const ImageLimits& limits, bool header_only, Image* out);

// kData "<name>: <what>", the name Printable (core/utf8.h): a file name may hold any byte.
Status Bad(const std::string& name, const std::string& what);

// The declared width x height against the limits, before anything is allocated for the
// pixels: kData naming the declared size and the limit.
Status CheckDeclaredSize(const std::string& name, const char* kind, int64_t width,
                         int64_t height, const ImageLimits& limits);

}  // namespace shmtrain::data::image_internal
