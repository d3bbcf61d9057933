// Protocol Buffers' wire format, for the files written for other tools: TensorBoard's event
// files (monitoring/tfevents.h) and ONNX models (nn/onnx.h). A message is its fields one after
// another, each a key, (field number << 3) | wire type, then its value: a varint, 8 or 4
// little-endian bytes, or a varint length and that many bytes (a string or a nested message).
// Repeated scalars are written one field each (not packed): every reader takes both forms.
// (protobuf.dev, "Encoding".) Written by hand rather than from generated classes: the two
// formats use a few dozen fields between them, and libprotobuf would be a run-time dependency
// of the trainer for them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/bytes.h"

namespace shmtrain::protobuf {

enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

inline void Varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

inline void Key(std::string* out, uint32_t field, Wire wire) {
  Varint(out, (field << 3) | wire);
}

// An int32 or int64 field (a negative value is its 64-bit two's complement: ten bytes).
inline void IntField(std::string* out, uint32_t field, int64_t v) {
  Key(out, field, kVarint);
  Varint(out, static_cast<uint64_t>(v));
}

inline void FloatField(std::string* out, uint32_t field, float v) {
  Key(out, field, kFixed32);
  AppendRaw(out, v);
}

inline void DoubleField(std::string* out, uint32_t field, double v) {
  Key(out, field, kFixed64);
  AppendRaw(out, v);
}

// A string, bytes or an encoded message.
inline void BytesField(std::string* out, uint32_t field, std::string_view v) {
  Key(out, field, kBytes);
  Varint(out, v.size());
  out->append(v);
}

}  // namespace shmtrain::protobuf
