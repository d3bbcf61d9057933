// IDX files read through gzip: the input is the decompressed file, which this target
// compresses (one gzip member, as gzip(1) writes) before loading, so that the fuzzer mutates
// the IDX structure rather than the deflate stream. The gzip file must load exactly as the
// plain one does: the same rows, or a refusal for both.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "data/format.h"
#include "fuzz/fuzz_util.h"

using namespace shmtrain;

namespace {

std::string Gzip(const uint8_t* in, size_t n) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    std::abort();
  }
  std::string out(deflateBound(&z, n), '\0');
  z.next_in = const_cast<Bytef*>(in);
  z.avail_in = static_cast<uInt>(n);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

Status LoadBoth(const std::string& path, data::Dataset* x, data::Dataset* xy, Status* xy_s) {
  data::LoadOptions opts;
  opts.no_labels = true;
  Status s = data::FindFormat("idx")->load(path, opts, x);
  if (!s.ok()) return s;
  opts.no_labels = false;
  opts.file.arrays.labels_path = path;
  *xy_s = data::FindFormat("idx")->load(path, opts, xy);
  return s;
}

bool Same(const data::Dataset& a, const data::Dataset& b) {
  return a.rows == b.rows && a.features == b.features && fuzz::SameBits(a.x, b.x) &&
         fuzz::SameBits(a.y, b.y);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  data::Dataset gx, gxy, px, pxy;
  Status gxy_s = Status::Ok(), pxy_s = Status::Ok();
  const std::string gz = Gzip(data, size);
  Status g, p;
  {
    const fuzz::InputFile file("idxgz", "-idx3-ubyte.gz", gz.data(), gz.size());
    g = LoadBoth(file.path(), &gx, &gxy, &gxy_s);
  }
  {
    const fuzz::InputFile file("idxgz-plain", "-idx3-ubyte", data, size);
    p = LoadBoth(file.path(), &px, &pxy, &pxy_s);
  }
  SHMTRAIN_FUZZ_CHECK(g.ok() == p.ok(), "gzip: %s\nplain: %s", g.message().c_str(),
                      p.message().c_str());
  if (!g.ok()) return 0;
  SHMTRAIN_FUZZ_CHECK(Same(gx, px), "the features differ between the gzip and the plain file");
  SHMTRAIN_FUZZ_CHECK(gxy_s.ok() == pxy_s.ok(), "labels: gzip: %s\nplain: %s",
                      gxy_s.message().c_str(), pxy_s.message().c_str());
  SHMTRAIN_FUZZ_CHECK(!gxy_s.ok() || Same(gxy, pxy), "the labelled loads differ");
  return 0;
}
