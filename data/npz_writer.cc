#include "data/npz_writer.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/bytes.h"
#include "core/crc32.h"

namespace shmtrain::data {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";      // 6 bytes, then the version
constexpr size_t kNpyPrefix = 6 + 2 + 2;       // magic, version 1.0, u16 header length
constexpr size_t kNpyAlign = 64;               // numpy.lib.format.ARRAY_ALIGN
constexpr uint64_t kZip32Max = 0xFFFFFFFFull;  // this value in a 32-bit field means "see zip64"
constexpr uint16_t kZipNeeds = 20;             // version needed: 2.0 (stored members)
constexpr uint16_t kZipNeeds64 = 45;           // 4.5: zip64
constexpr uint16_t kUnix = 3 << 8;             // version made by: upper byte 3 = Unix
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, the earliest DOS date
constexpr uint16_t kUtf8Name = 1 << 11;  // general purpose flag bit 11: the name is UTF-8

// Bytes per element of a descr this writer knows, or 0.
size_t ItemSize(const std::string& descr) {
  if (descr == "<f4") return 4;
  if (descr == "<f8" || descr == "<i8") return 8;
  if (descr.size() > 2 && descr.compare(0, 2, "<U") == 0) {
    size_t n = 0;
    const char* end = descr.data() + descr.size();
    const auto [p, ec] = std::from_chars(descr.data() + 2, end, n);
    if (ec == std::errc() && p == end && n >= 1 && n <= (1u << 20)) return 4 * n;
  }
  return 0;
}

// Python's repr of the shape tuple: "()", "(10,)", "(256, 784)".
std::string ShapeRepr(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The NPY prefix and header of `a` (everything before its data), after checking that the data
// fits the shape and type.
Status NpyHeader(const NpyArray& a, const std::string& path, std::string* out) {
  auto bug = [&](const std::string& what) {
    return Status::Internal(path + ": array '" + a.name + "': " + what);
  };
  const size_t item = ItemSize(a.descr);
  if (item == 0) return bug("unsupported element type '" + a.descr + "'");
  uint64_t count = 1;
  for (const int64_t d : a.shape) {
    if (d < 0 || (d > 0 && count > UINT64_MAX / static_cast<uint64_t>(d) / item)) {
      return bug("bad shape " + ShapeRepr(a.shape));
    }
    count *= static_cast<uint64_t>(d);
  }
  if (a.data.size() != count * item) {
    return bug("shape " + ShapeRepr(a.shape) + " of '" + a.descr + "' needs " +
               std::to_string(count * item) + " bytes, the data has " +
               std::to_string(a.data.size()));
  }
  std::string dict =
      "{'descr': '" + a.descr + "', 'fortran_order': False, 'shape': " + ShapeRepr(a.shape) + ", }";
  // Spaces, then '\n', up to the next multiple of 64: numpy.load maps the data aligned.
  const size_t pad = (kNpyAlign - (kNpyPrefix + dict.size() + 1) % kNpyAlign) % kNpyAlign;
  dict.append(pad, ' ');
  dict += '\n';
  if (dict.size() > 0xFFFF) {
    return Status::Data(path + ": array '" + a.name + "': its NPY header (" +
                        std::to_string(dict.size()) + " bytes) passes format 1.0's 65535");
  }
  out->assign(kNpyMagic, 6);
  out->push_back(1);  // major
  out->push_back(0);  // minor
  AppendRaw<uint16_t>(out, static_cast<uint16_t>(dict.size()));
  *out += dict;
  return Status::Ok();
}

// One member of the archive as its central directory entry needs it.
struct Member {
  std::string name;  // "<array>.npy"
  uint32_t crc = 0;
  uint64_t size = 0;    // stored: compressed size = uncompressed size
  uint64_t offset = 0;  // of its local header
  bool utf8 = false;
};

bool Ascii(const std::string& s) {
  for (const unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

// The zip64 extended information extra field (header id 1) with these 64-bit values.
std::string Zip64Extra(const std::vector<uint64_t>& values) {
  std::string e;
  AppendRaw<uint16_t>(&e, 0x0001);
  AppendRaw<uint16_t>(&e, static_cast<uint16_t>(8 * values.size()));
  for (const uint64_t v : values) AppendRaw<uint64_t>(&e, v);
  return e;
}

// Local file header (APPNOTE 4.3.7). With zip64 both sizes move to the extra field, as
// 4.5.3 requires of a local header.
void AppendLocalHeader(const Member& m, bool zip64, std::string* z) {
  AppendRaw<uint32_t>(z, 0x04034b50);
  AppendRaw<uint16_t>(z, zip64 ? kZipNeeds64 : kZipNeeds);
  AppendRaw<uint16_t>(z, m.utf8 ? kUtf8Name : 0);
  AppendRaw<uint16_t>(z, 0);  // method: stored
  AppendRaw<uint16_t>(z, 0);  // time 00:00:00
  AppendRaw<uint16_t>(z, kDosDate1980);
  AppendRaw<uint32_t>(z, m.crc);
  const std::string extra = zip64 ? Zip64Extra({m.size, m.size}) : "";
  const uint32_t size32 = zip64 ? static_cast<uint32_t>(kZip32Max) : static_cast<uint32_t>(m.size);
  AppendRaw<uint32_t>(z, size32);  // compressed
  AppendRaw<uint32_t>(z, size32);  // uncompressed
  AppendRaw<uint16_t>(z, static_cast<uint16_t>(m.name.size()));
  AppendRaw<uint16_t>(z, static_cast<uint16_t>(extra.size()));
  *z += m.name;
  *z += extra;
}

// Central directory file header (APPNOTE 4.3.12): a field that does not fit 32 bits (or every
// one, when forced) reads 0xFFFFFFFF and its value follows in the zip64 extra field, in the
// order uncompressed size, compressed size, offset.
void AppendCentralHeader(const Member& m, bool force64, std::string* z) {
  const bool big_size = force64 || m.size >= kZip32Max;
  const bool big_offset = force64 || m.offset >= kZip32Max;
  std::vector<uint64_t> wide;
  if (big_size) wide = {m.size, m.size};
  if (big_offset) wide.push_back(m.offset);
  const std::string extra = wide.empty() ? "" : Zip64Extra(wide);
  const uint16_t needs = wide.empty() ? kZipNeeds : kZipNeeds64;
  AppendRaw<uint32_t>(z, 0x02014b50);
  AppendRaw<uint16_t>(z, kUnix | needs);
  AppendRaw<uint16_t>(z, needs);
  AppendRaw<uint16_t>(z, m.utf8 ? kUtf8Name : 0);
  AppendRaw<uint16_t>(z, 0);  // method: stored
  AppendRaw<uint16_t>(z, 0);
  AppendRaw<uint16_t>(z, kDosDate1980);
  AppendRaw<uint32_t>(z, m.crc);
  const uint32_t size32 =
      big_size ? static_cast<uint32_t>(kZip32Max) : static_cast<uint32_t>(m.size);
  AppendRaw<uint32_t>(z, size32);
  AppendRaw<uint32_t>(z, size32);
  AppendRaw<uint16_t>(z, static_cast<uint16_t>(m.name.size()));
  AppendRaw<uint16_t>(z, static_cast<uint16_t>(extra.size()));
  AppendRaw<uint16_t>(z, 0);               // comment length
  AppendRaw<uint16_t>(z, 0);               // disk number start
  AppendRaw<uint16_t>(z, 0);               // internal attributes
  AppendRaw<uint32_t>(z, 0100644u << 16);  // external: a regular file, rw-r--r--
  AppendRaw<uint32_t>(
      z, big_offset ? static_cast<uint32_t>(kZip32Max) : static_cast<uint32_t>(m.offset));
  *z += m.name;
  *z += extra;
}

// The end of the archive: with zip64, the zip64 end of central directory record (4.3.14) and
// its locator (4.3.15) before the classic end record (4.3.16), whose overflowing fields then
// read all ones.
void AppendEnd(uint64_t entries, uint64_t cd_offset, uint64_t cd_size, bool force64,
               std::string* z) {
  const bool zip64 = force64 || entries >= 0xFFFF || cd_offset >= kZip32Max || cd_size >= kZip32Max;
  if (zip64) {
    const uint64_t record = z->size();
    AppendRaw<uint32_t>(z, 0x06064b50);
    AppendRaw<uint64_t>(z, 44);  // the record's size after this field
    AppendRaw<uint16_t>(z, kUnix | kZipNeeds64);
    AppendRaw<uint16_t>(z, kZipNeeds64);
    AppendRaw<uint32_t>(z, 0);  // this disk
    AppendRaw<uint32_t>(z, 0);  // the disk of the central directory
    AppendRaw<uint64_t>(z, entries);
    AppendRaw<uint64_t>(z, entries);
    AppendRaw<uint64_t>(z, cd_size);
    AppendRaw<uint64_t>(z, cd_offset);
    AppendRaw<uint32_t>(z, 0x07064b50);
    AppendRaw<uint32_t>(z, 0);  // the disk of the zip64 end record
    AppendRaw<uint64_t>(z, record);
    AppendRaw<uint32_t>(z, 1);  // disks in all
  }
  const uint16_t n16 = zip64 && entries >= 0xFFFF ? 0xFFFF : static_cast<uint16_t>(entries);
  auto u32 = [&](uint64_t v) {
    return zip64 && (force64 || v >= kZip32Max) ? static_cast<uint32_t>(kZip32Max)
                                                : static_cast<uint32_t>(v);
  };
  AppendRaw<uint32_t>(z, 0x06054b50);
  AppendRaw<uint16_t>(z, 0);
  AppendRaw<uint16_t>(z, 0);
  AppendRaw<uint16_t>(z, n16);
  AppendRaw<uint16_t>(z, n16);
  AppendRaw<uint32_t>(z, u32(cd_size));
  AppendRaw<uint32_t>(z, u32(cd_offset));
  AppendRaw<uint16_t>(z, 0);  // comment length
}

// Refuses names numpy.load could not give back as they are.
Status CheckNames(const std::vector<NpyArray>& arrays, const std::string& path) {
  std::set<std::string> seen;
  for (const NpyArray& a : arrays) {
    if (a.name.empty() || a.name.size() > 0xFFFF - 4 ||  // a zip name has a u16 length
        a.name.find_first_of(std::string("/\0", 2)) != std::string::npos) {
      return Status::Internal(path + ": bad array name '" + a.name + "'");
    }
    std::vector<uint32_t> cps;
    if (Status s = DecodeUtf8(a.name, &cps); !s.ok()) {
      return Status::Internal(path + ": array name '" + a.name + "' is not UTF-8: " + s.message());
    }
    if (!seen.insert(a.name).second) {
      return Status::Internal(path + ": array name '" + a.name + "' given twice");
    }
  }
  return Status::Ok();
}

}  // namespace

NpyArray NpyArray::Float32(std::string name, std::vector<int64_t> shape,
                           const std::vector<float>& v) {
  return {std::move(name), "<f4", std::move(shape),
          std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float))};
}

NpyArray NpyArray::Float64(std::string name, std::vector<int64_t> shape,
                           const std::vector<double>& v) {
  return {std::move(name), "<f8", std::move(shape),
          std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double))};
}

NpyArray NpyArray::Int64(std::string name, std::vector<int64_t> shape,
                         const std::vector<int64_t>& v) {
  return {std::move(name), "<i8", std::move(shape),
          std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t))};
}

Status DecodeUtf8(const std::string& s, std::vector<uint32_t>* out) {
  out->clear();
  auto fail = [&](const std::string& what, size_t at) {
    return Status::Data(what + " at byte " + std::to_string(at));
  };
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    // The sequence length from the lead byte, and the smallest code point it may encode
    // (a smaller one is an overlong form, which RFC 3629 forbids).
    int len;
    uint32_t cp, min;
    if (b < 0x80) {
      len = 1, cp = b, min = 0;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, cp = b & 0x07, min = 0x10000;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return fail(std::string("byte ") + hex + " cannot start a UTF-8 sequence", i);
    }
    if (s.size() - i < static_cast<size_t>(len)) return fail("an incomplete sequence", i);
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return fail("an incomplete sequence", i);
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min) return fail("an overlong encoding", i);
    if (cp >= 0xD800 && cp <= 0xDFFF) return fail("a surrogate code point", i);
    if (cp > 0x10FFFF) return fail("a code point above U+10FFFF", i);
    out->push_back(cp);
    i += static_cast<size_t>(len);
  }
  return Status::Ok();
}

Status NpyUnicode(std::string name, std::vector<int64_t> shape, const std::vector<std::string>& v,
                  const std::string& path, NpyArray* out) {
  std::vector<std::vector<uint32_t>> cps(v.size());
  size_t width = 1;  // numpy has no '<U0' arrays: np.array(['']) is '<U1'
  for (size_t i = 0; i < v.size(); ++i) {
    if (Status s = DecodeUtf8(v[i], &cps[i]); !s.ok()) {
      return Status::Data(path + ": array '" + name + "', element " + std::to_string(i) +
                          ": not valid UTF-8 (" + s.message() + ")");
    }
    width = std::max(width, cps[i].size());
  }
  NpyArray a{std::move(name), "<U" + std::to_string(width), std::move(shape), ""};
  a.data.reserve(v.size() * width * 4);
  for (const std::vector<uint32_t>& e : cps) {
    for (size_t k = 0; k < width; ++k) AppendRaw<uint32_t>(&a.data, k < e.size() ? e[k] : 0);
  }
  *out = std::move(a);
  return Status::Ok();
}

Status EncodeNpy(const NpyArray& a, const std::string& path, std::string* out) {
  std::string h;
  if (Status s = NpyHeader(a, path, &h); !s.ok()) return s;
  *out = h + a.data;
  return Status::Ok();
}

Status EncodeNpz(const std::vector<NpyArray>& arrays, const std::string& path, std::string* out,
                 const NpzOptions& opts) {
  if (Status s = CheckNames(arrays, path); !s.ok()) return s;
  std::vector<std::string> headers(arrays.size());
  size_t total = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (Status s = NpyHeader(arrays[i], path, &headers[i]); !s.ok()) return s;
    total += 30 + 20 + arrays[i].name.size() + 4 + headers[i].size() + arrays[i].data.size();
  }
  std::string z;
  z.reserve(total + arrays.size() * 100 + 100);
  std::vector<Member> members;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const NpyArray& a = arrays[i];
    Member m;
    m.name = a.name + ".npy";
    m.utf8 = !Ascii(m.name);
    m.size = headers[i].size() + a.data.size();
    m.crc = Crc32(a.data.data(), a.data.size(), Crc32(headers[i].data(), headers[i].size()));
    m.offset = z.size();
    AppendLocalHeader(m, opts.force_zip64 || m.size >= kZip32Max, &z);
    z += headers[i];
    z += a.data;
    members.push_back(std::move(m));
  }
  const uint64_t cd_offset = z.size();
  for (const Member& m : members) AppendCentralHeader(m, opts.force_zip64, &z);
  AppendEnd(members.size(), cd_offset, z.size() - cd_offset, opts.force_zip64, &z);
  *out = std::move(z);
  return Status::Ok();
}

}  // namespace shmtrain::data
