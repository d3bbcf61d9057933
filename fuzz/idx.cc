// IDX files, plain or gzip (data/byte_stream.cc's gzip reader, data/array_file.cc's IDX
// header and element reader): the input is the file, loaded as features alone, then with
// itself as the labels (classification).
//
// gzip is transparent: a gzip input that loads must be one well-formed gzip stream (or
// several, concatenated) with nothing after it but zero bytes (padding, as gzip reads it), and
// must load exactly as its decompressed bytes do. A file with other bytes after its gzip data
// is damaged, not an array.
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "data/format.h"
#include "fuzz/fuzz_util.h"

using namespace shmtrain;

namespace {

// The decompression of `in`, strictly: every byte belongs to a complete gzip member, or to
// zero bytes that run from the end of the last member to the end of the file.
bool StrictGunzip(const uint8_t* in, size_t n, std::string* out) {
  out->clear();
  size_t pos = 0;
  while (pos < n) {
    if (pos > 0 && in[pos] == 0) {
      return std::all_of(in + pos, in + n, [](uint8_t b) { return b == 0; });
    }
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return false;
    z.next_in = const_cast<Bytef*>(in + pos);
    z.avail_in = static_cast<uInt>(n - pos);
    int r = Z_OK;
    char buf[4096];
    while (r == Z_OK) {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      r = inflate(&z, Z_NO_FLUSH);
      out->append(buf, sizeof buf - z.avail_out);
      if (r == Z_BUF_ERROR && z.avail_in == 0) break;  // input ends inside the member
      if (out->size() > (size_t{64} << 20)) r = Z_MEM_ERROR;
    }
    pos = n - z.avail_in;
    inflateEnd(&z);
    if (r != Z_STREAM_END) return false;
  }
  return true;
}

bool Same(const data::Dataset& a, const data::Dataset& b) {
  return a.rows == b.rows && a.features == b.features && fuzz::SameBits(a.x, b.x) &&
         fuzz::SameBits(a.y, b.y) && a.classes.names == b.classes.names;
}

// Loads `path` as features, then with itself as labels; false when the first fails.
bool Load(const std::string& path, data::Dataset* x, data::Dataset* xy, bool* xy_ok) {
  data::LoadOptions opts;
  opts.no_labels = true;
  if (!data::FindFormat("idx")->load(path, opts, x).ok()) return false;
  opts.no_labels = false;
  opts.file.arrays.labels_path = path;
  opts.task = Task::kClassification;
  *xy_ok = data::FindFormat("idx")->load(path, opts, xy).ok();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  data::Dataset x, xy;
  bool xy_ok = false;
  {
    const fuzz::InputFile file("idx", "-idx3-ubyte", data, size);
    if (!Load(file.path(), &x, &xy, &xy_ok)) return 0;
  }
  SHMTRAIN_FUZZ_CHECK(x.x.size() == static_cast<size_t>(x.rows) * x.features,
                      "%lld rows x %d features in %zu floats", static_cast<long long>(x.rows),
                      x.features, x.x.size());
  if (size < 2 || data[0] != 0x1f || data[1] != 0x8b) return 0;
  std::string plain;
  SHMTRAIN_FUZZ_CHECK(StrictGunzip(data, size, &plain),
                      "a file that is not well-formed gzip (damaged, or with bytes after its "
                      "gzip data) loaded as %lld rows x %d features",
                      static_cast<long long>(x.rows), x.features);
  const fuzz::InputFile file("idx-plain", "-idx3-ubyte", plain.data(), plain.size());
  data::Dataset px, pxy;
  bool pxy_ok = false;
  SHMTRAIN_FUZZ_CHECK(Load(file.path(), &px, &pxy, &pxy_ok) && Same(x, px) && xy_ok == pxy_ok &&
                          (!xy_ok || Same(xy, pxy)),
                      "the gzip file and its decompressed bytes load differently");
  return 0;
}
