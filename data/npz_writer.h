// NumPy .npz files: arrays for other tools, written so that numpy.load reads them as it reads
// what numpy.savez wrote (no pickles, so no allow_pickle).
//
// An .npz is a zip archive (PKWARE APPNOTE.TXT, "ZIP File Format Specification") whose
// members are "<name>.npy" files, stored uncompressed (method 0) with their CRC-32. Each
// member is NPY format version 1.0 (numpy's NEP 1 and the numpy.lib.format documentation):
//   "\x93NUMPY", u8 major (1), u8 minor (0), u16 header length (little-endian), then the
//   header: a Python dict literal such as
//     {'descr': '<f4', 'fortran_order': False, 'shape': (256, 784), }
//   padded with spaces and ended by '\n' so that the data starts at a multiple of 64 bytes,
//   then the elements in C order, little-endian. A 1-d shape is "(10,)", a 0-d one "()".
// Element types: '<f4' (float32), '<f8' (float64), '<i8' (int64) and '<U{n}': n UTF-32LE
// code points per element, zero-padded (n is the longest element in code points, at least 1).
//
// The archive is plain zip (32-bit sizes and offsets) unless a member, an offset or the
// central directory reaches 4 GiB, when the zip64 records of APPNOTE 4.3.14-4.5.3 are added
// as they are needed. Every member has the same fixed timestamp (1980-01-01 00:00), so the
// same arrays always give the same bytes.
//
// The zip framing is written here, not by libzip (Debian's libzip-dev 1.7), although libzip
// too gives the same bytes in every run and time zone (zip_file_set_mtime with local
// 1980-01-01 00:00). Measured side by side on a 50 MB float32 array (medians of 7): into
// memory, as export needs the bytes for WriteFileDurably, libzip took 184 ms and held the
// archive twice (+100 MB) against 62 ms and once (+50 MB) here; to a path it streams (+2.4 MB,
// 155 ms) but through a temporary file of its own, renamed without fsync. And it has no way to
// ask for zip64 records below 4 GiB, so that path (NpzOptions::force_zip64, read back by
// Python's zipfile in the tests) could not be tested. The reader (data/byte_stream.h) says why
// it is ours too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shmtrain/status.h"

namespace shmtrain::data {

// One array: its member name (without ".npy"), element type, shape and raw data.
struct NpyArray {
  std::string name;
  std::string descr;           // '<f4', '<f8', '<i8' or '<U{n}'
  std::vector<int64_t> shape;  // empty: a 0-d array (one element)
  std::string data;            // the elements, C order, little-endian

  static NpyArray Float32(std::string name, std::vector<int64_t> shape,
                          const std::vector<float>& v);
  static NpyArray Float64(std::string name, std::vector<int64_t> shape,
                          const std::vector<double>& v);
  static NpyArray Int64(std::string name, std::vector<int64_t> shape,
                        const std::vector<int64_t>& v);
};

// A '<U{n}' array of UTF-8 strings. kData naming `path`, the array and the element when one is
// not well-formed UTF-8 (a stray, overlong or incomplete sequence, a surrogate, > U+10FFFF) or
// when the shape does not hold v.size() elements.
Status NpyUnicode(std::string name, std::vector<int64_t> shape, const std::vector<std::string>& v,
                  const std::string& path, NpyArray* out);

// The code points of UTF-8 text into *out; kData saying what and at which byte ("an
// overlong encoding at byte 3") if it is not well-formed: the caller names the text.
Status DecodeUtf8(const std::string& s, std::vector<uint32_t>* out);

// One .npy member: header and data. kInternal (a caller's bug) naming `path` and the array
// when the type is not one of the above or the data does not fit the shape and type; kData
// when the header would pass version 1.0's 65535 bytes.
Status EncodeNpy(const NpyArray& a, const std::string& path, std::string* out);

struct NpzOptions {
  // Zip64 records for every member and the end, also when no size needs them (default off:
  // only where they are needed). For tests of the zip64 path without writing 4 GiB.
  bool force_zip64 = false;
};

// The .npz archive of `arrays`, in their order; `path` is for messages only (the caller
// writes the bytes, e.g. with WriteFileDurably). As EncodeNpy for a bad array; kInternal for
// an empty or repeated name, or one with '/' or '\0' or not UTF-8.
Status EncodeNpz(const std::vector<NpyArray>& arrays, const std::string& path, std::string* out,
                 const NpzOptions& opts = {});

}  // namespace shmtrain::data
