// Array files: IDX (the MNIST family's format: big-endian, plain or gzip) and NumPy .npy
// (alone, or as a member of an .npz archive). Each is a header (element type and shape)
// followed by the elements in C order; this unit reads the header and converts the elements,
// a block at a time, to float or double. data/arrays.cc makes a Dataset of them.
//
// IDX (http://yann.lecun.com/exdb/mnist/): u8 0, u8 0, u8 type (0x08 ubyte, 0x09 byte,
// 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64), u8 dimensions, then one big-endian u32 per
// dimension, then the elements, big-endian.
// NPY (numpy's format.py, NEP 1): "\x93NUMPY", u8 major, u8 minor, u16 (v1) or u32 (v2, v3)
// little-endian header length, then a Python dict literal {'descr': '<f4', 'fortran_order':
// False, 'shape': (n, d), } padded to a 16- or 64-byte boundary, then the elements.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/byte_stream.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

enum class ElemType { kU8, kI8, kU16, kI16, kU32, kI32, kU64, kI64, kF32, kF64, kBool };

struct ArrayHeader {
  ElemType type = ElemType::kU8;
  bool big_endian = false;
  std::vector<int64_t> shape;

  int ElemSize() const;
  // The number of elements (the product of the shape; 1 for a 0-d array).
  int64_t Count() const;
  // "uint8 array of shape (60000, 28, 28)", for messages.
  std::string Describe() const;
};

// An array whose header has been read; `src` stands at its first element.
struct ArrayReader {
  std::unique_ptr<ByteSource> src;
  ArrayHeader header;
};

// Reads an IDX header from `src`. Wrong magic, an unknown type, or a shape whose byte count
// overflows are Status::Data naming src.
Status ReadIdxHeader(std::unique_ptr<ByteSource> src, ArrayReader* out);
// Reads an NPY header from `src`. Refused with a message naming src: Fortran order, object
// and other non-numeric dtypes, structured dtypes, big-endian multi-byte elements.
Status ReadNpyHeader(std::unique_ptr<ByteSource> src, ArrayReader* out);

// Says where element i is, for messages ("row 12, feature 3").
using ElementName = std::function<std::string(int64_t i)>;

// Status::Data "<src>: truncated: the data of a <array> needs N bytes, <why>" when the source
// cannot yield the bytes the header declares (ByteSource::Left): checked before any of them
// is read or allocated for.
Status CheckDataSize(const ArrayReader& r);

// Reads the next `count` elements as float into *out (resized to count); CheckDataSize first.
// The room is had up front when the source knows its size exactly, else it grows as the bytes
// arrive. A non-finite value, or one beyond float's range, is Status::Data "<src>: <where(i)>:
// value ... is not finite / too large for a 32-bit float".
Status ReadFloats(ArrayReader& r, int64_t count, std::vector<float>* out, const ElementName& where);
// Reads the next `count` elements as double (labels; integers beyond 2^53 are refused).
Status ReadDoubles(ArrayReader& r, int64_t count, std::vector<double>* out,
                   const ElementName& where);

}  // namespace shmtrain::data
