// Image files (data/image.h): JPEG through libjpeg-turbo, PNG through libpng.
//
// The images are written at test time by PIL (tests/make_images.py, Debian's python3 with
// python3-pil and python3-numpy), with the samples PIL decodes from each beside it: our decode
// must equal PIL's sample for sample (PIL uses the same libjpeg-turbo, so JPEG is exact too).
// Hostile files (cut short, corrupt, declaring a size far beyond their bytes, not images at
// all) are refused with a message naming the file, and without allocating for what they claim
// (tests/largest_allocation.h sees our buffers and libpng's, which allocates through operator
// new; libjpeg's are bounded by its max_memory_to_use and the fuzz targets' malloc limit).
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/image.h"
#include "gtest/gtest.h"
#include "tests/largest_allocation.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using data::DecodeImage;
using data::Image;
using data::ImageHeader;
using data::ImageKind;
using data::ImageLimits;

using Bytes = std::vector<uint8_t>;

Bytes ReadBytes(const std::string& path) {
  const std::string s = test::ReadWholeFile(path);
  return Bytes(s.begin(), s.end());
}

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The images, written once for the whole file.
class ImageFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    const test::ProcResult r = test::RunProcess({NUMPY_PYTHON, MAKE_IMAGES_PY, dir_->path()},
                                                std::chrono::milliseconds{120'000});
    ASSERT_TRUE(test::ExitedWith(r, 0)) << "tests/make_images.py needs Debian's python3-pil and "
                                           "python3-numpy (scripts/install-deps.sh installs them)";
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string File(const std::string& name) { return dir_->File(name); }
  // "<file> <width> <height> <channels>" a line: what PIL decoded.
  static std::vector<std::pair<std::string, ImageHeader>> Manifest() {
    std::vector<std::pair<std::string, ImageHeader>> out;
    std::istringstream in(test::ReadWholeFile(File("manifest.txt")));
    std::string name;
    ImageHeader h;
    while (in >> name >> h.width >> h.height >> h.channels) {
      h.kind = Has(name, ".png") ? ImageKind::kPng : ImageKind::kJpeg;
      out.emplace_back(name, h);
    }
    return out;
  }

  static test::TempDir* dir_;
};
test::TempDir* ImageFiles::dir_ = nullptr;

// The first sample where two decodes differ, for the message.
std::string FirstDifference(const Bytes& ours, const Bytes& pil, const ImageHeader& h) {
  if (ours.size() != pil.size()) {
    return std::to_string(ours.size()) + " samples, PIL " + std::to_string(pil.size());
  }
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    if (ours[i] != pil[i] && differ++ == 0) first = i;
  }
  if (differ == 0) return "";
  const size_t px = first / h.channels;
  return std::to_string(differ) + " samples differ, the first at row " +
         std::to_string(px / h.width) + ", column " + std::to_string(px % h.width) +
         ", channel " + std::to_string(first % h.channels) + ": " +
         std::to_string(ours[first]) + ", PIL " + std::to_string(pil[first]);
}

TEST_F(ImageFiles, EveryImageDecodesToPilsSamples) {
  const auto manifest = Manifest();
  ASSERT_GE(manifest.size(), 29u);
  for (const auto& [name, want] : manifest) {
    SCOPED_TRACE(name);
    Image image;
    const Status s = DecodeImage(File(name), ImageLimits{}, &image);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(image.header.kind, want.kind);
    EXPECT_EQ(image.header.width, want.width);
    EXPECT_EQ(image.header.height, want.height);
    EXPECT_EQ(image.header.channels, want.channels);
    EXPECT_EQ(FirstDifference(image.pixels, ReadBytes(File(name + ".raw")), want), "");
    ImageHeader header;
    ASSERT_TRUE(data::ReadImageHeader(File(name), ImageLimits{}, &header).ok());
    EXPECT_EQ(header.width, want.width);
    EXPECT_EQ(header.height, want.height);
    EXPECT_EQ(header.channels, want.channels);
    // From memory, the same.
    const Bytes bytes = ReadBytes(File(name));
    Image again;
    ASSERT_TRUE(DecodeImage(bytes.data(), bytes.size(), name, ImageLimits{}, &again).ok());
    EXPECT_EQ(again.pixels, image.pixels);
  }
}

TEST_F(ImageFiles, SixteenBitPngAndCmykJpegAreRefused) {
  Image image;
  const std::string png = File("refused/grey16.png"), jpg = File("refused/cmyk.jpg");
  EXPECT_EQ(DecodeImage(png, ImageLimits{}, &image).message(),
            png + ": a 16-bit PNG: only 8-bit samples are read (save it with 8 bits)");
  EXPECT_EQ(DecodeImage(jpg, ImageLimits{}, &image).message(),
            jpg + ": a JPEG in CMYK (4 components): only grey and colour (YCbCr or RGB) JPEGs "
                  "are read");
  ImageHeader header;
  EXPECT_EQ(data::ReadImageHeader(jpg, ImageLimits{}, &header).code(), Status::Code::kData);
}

// Decodes `bytes` from memory as `name` under a probe: the status, and the largest allocation.
Status DecodeMeasured(const Bytes& bytes, const std::string& name, size_t* largest,
                      const ImageLimits& limits = ImageLimits{}) {
  Image image;
  test::LargestAllocation probe;
  Status s = DecodeImage(bytes.data(), bytes.size(), name, limits, &image);
  *largest = probe.bytes();
  return s;
}

// Every cut of a file is refused as truncated (or, before its signature is whole, as not an
// image), and costs no more than the image it declares.
TEST_F(ImageFiles, TruncatedFilesAreRefusedAtEveryCut) {
  for (const std::string name : {"rgb.png", "interlaced.png", "palette.png", "rgb_201x131_s2.jpg",
                                 "rgb_q95_prog.jpg", "grey_q50.jpg"}) {
    const Bytes whole = ReadBytes(File(name));
    const bool png = Has(name, ".png");
    const size_t signature = png ? 8 : 3;
    size_t cuts = 0;
    for (size_t cut = 0; cut < whole.size(); cut += cut < 64 ? 1 : 37) {
      SCOPED_TRACE(name + " cut at " + std::to_string(cut) + " of " +
                   std::to_string(whole.size()));
      const Bytes part(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(cut));
      size_t largest = 0;
      const Status s = DecodeMeasured(part, "cut." + std::string(png ? "png" : "jpg"), &largest);
      ASSERT_EQ(s.code(), Status::Code::kData);
      const std::string what = cut < signature ? "not a JPEG or PNG file"
                               : png           ? "truncated PNG"
                                               : "truncated JPEG";
      EXPECT_TRUE(Has(s.message(), "cut." + std::string(png ? "png: " : "jpg: ") + what))
          << s.message();
      EXPECT_LE(largest, size_t{201} * 131 * 3 + (64 << 10));
      ++cuts;
    }
    EXPECT_GE(cuts, 60u);
  }
}

// The cut just before the last bytes (a JPEG's EOI marker, a PNG's IEND chunk) is refused too.
TEST_F(ImageFiles, AFileWithoutItsEndIsTruncated) {
  for (const std::string name : {"rgb.png", "rgb_64x48_s0.jpg"}) {
    Bytes bytes = ReadBytes(File(name));
    bytes.resize(bytes.size() - (Has(name, ".png") ? 12 : 2));
    size_t largest = 0;
    EXPECT_EQ(DecodeMeasured(bytes, name, &largest).message(),
              name + ": truncated " + (Has(name, ".png") ? "PNG" : "JPEG") +
                  ": the file ends before the image does");
  }
}

// The offset of the first JPEG marker `marker` (FF xx), or 0.
size_t FindMarker(const Bytes& b, uint8_t marker) {
  for (size_t i = 2; i + 1 < b.size(); ++i) {
    if (b[i] == 0xff && b[i + 1] == marker) return i;
  }
  return 0;
}

TEST_F(ImageFiles, CorruptBytesAreRefused) {
  size_t largest = 0;
  // A JPEG whose Huffman table counts more codes than there are.
  Bytes jpg = ReadBytes(File("rgb_64x48_s2.jpg"));
  const size_t dht = FindMarker(jpg, 0xc4);
  ASSERT_GT(dht, 0u);
  for (size_t i = 0; i < 16; ++i) jpg[dht + 5 + i] = 0xff;
  EXPECT_EQ(DecodeMeasured(jpg, "bad.jpg", &largest).message(),
            "bad.jpg: corrupt or unsupported JPEG: Bogus Huffman table definition");
  EXPECT_LE(largest, size_t{64} << 10);
  // A JPEG whose entropy-coded data is overwritten with codes no table has.
  jpg = ReadBytes(File("rgb_201x131_s0.jpg"));
  const size_t sos = FindMarker(jpg, 0xda);
  ASSERT_GT(sos, 0u);
  for (size_t i = sos + 20; i < sos + 220; ++i) jpg[i] = 0xfe;
  EXPECT_TRUE(Has(DecodeMeasured(jpg, "bad.jpg", &largest).message(),
                  "bad.jpg: corrupt or unsupported JPEG: Corrupt JPEG data"));
  EXPECT_LE(largest, size_t{201} * 131 * 3 + (64 << 10));  // its pixels, no more
  // A PNG with a byte of its compressed pixels changed: zlib finds it before the CRC does.
  const Bytes whole = ReadBytes(File("rgb.png"));
  Bytes png = whole;
  png[png.size() - 30] ^= 0x55;
  EXPECT_EQ(DecodeMeasured(png, "bad.png", &largest).message(),
            "bad.png: corrupt or unsupported PNG: IDAT: incorrect data check");
  EXPECT_LE(largest, size_t{64} << 10);
  // The IDAT chunk's CRC changed.
  png = whole;
  png[png.size() - 13] ^= 0x55;
  EXPECT_EQ(DecodeMeasured(png, "bad.png", &largest).message(),
            "bad.png: corrupt or unsupported PNG: IDAT: CRC error");
  EXPECT_LE(largest, size_t{64} << 10);
}

// libpng allocates a chunk's declared length before reading it: a 134 MB text chunk in a file
// of 1.6 KB (the fuzz target's first finding) is refused before libpng sees it.
TEST_F(ImageFiles, APngChunkLongerThanTheFileIsRefusedBeforeLibpngAllocatesIt) {
  Bytes png = ReadBytes(File("rgb.png"));
  const Bytes text = {0x08, 0x00, 0x00, 0x1e, 't', 'E', 'X', 't', 'T', 'i', 't', 'l', 'e', 0};
  png.insert(png.begin() + 33, text.begin(), text.end());  // after the IHDR chunk
  size_t largest = 0;
  EXPECT_EQ(DecodeMeasured(png, "long.png", &largest).message(),
            "long.png: truncated PNG: the chunk at byte 33 declares 134217758 bytes, the file "
            "has only " + std::to_string(png.size() - 41) + " more");
  EXPECT_LE(largest, size_t{64} << 10);
}

// A PNG by hand: IHDR (8-bit, `type`), one IDAT of `inflated` zero bytes deflated, IEND.
Bytes HandPng(uint32_t w, uint32_t h, uint8_t type, size_t inflated) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto chunk = [&](const char* kind, const Bytes& data) {
    Bytes c(kind, kind + 4);
    c.insert(c.end(), data.begin(), data.end());
    const uint32_t n = static_cast<uint32_t>(data.size());
    const uint32_t crc = static_cast<uint32_t>(crc32(0, c.data(), static_cast<uInt>(c.size())));
    for (uint32_t v : {n}) out.insert(out.end(), {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)});
    out.insert(out.end(), c.begin(), c.end());
    out.insert(out.end(), {uint8_t(crc >> 24), uint8_t(crc >> 16), uint8_t(crc >> 8), uint8_t(crc)});
  };
  Bytes ihdr = {uint8_t(w >> 24), uint8_t(w >> 16), uint8_t(w >> 8), uint8_t(w),
                uint8_t(h >> 24), uint8_t(h >> 16), uint8_t(h >> 8), uint8_t(h),
                8, type, 0, 0, 0};
  chunk("IHDR", ihdr);
  const Bytes zeros(inflated, 0);
  uLongf len = compressBound(static_cast<uLong>(zeros.size()));
  Bytes z(len);
  EXPECT_EQ(compress2(z.data(), &len, zeros.data(), static_cast<uLong>(zeros.size()), 9), Z_OK);
  z.resize(len);
  chunk("IDAT", z);
  chunk("IEND", {});
  return out;
}

TEST(ImageTest, APngBombIsRefusedBeforeItsPixelsAreAllocated) {
  size_t largest = 0;
  // 60000 x 60000 grey: 3.6 Gpx, beyond the limit.
  const Bytes bomb = HandPng(60000, 60000, 0, 1 << 20);
  ASSERT_LT(bomb.size(), 4096u);
  EXPECT_EQ(DecodeMeasured(bomb, "bomb.png", &largest).message(),
            "bomb.png: PNG too large: its header declares 60000 x 60000 = 3600000000 pixels, "
            "more than the limit of 67108864");
  EXPECT_LE(largest, size_t{64} << 10);
  // 8000 x 8000 RGB: inside the limit, but 192 MB of pixels from a file of a few KB.
  const Bytes inside = HandPng(8000, 8000, 2, 1 << 20);
  EXPECT_EQ(DecodeMeasured(inside, "inside.png", &largest).message(),
            "inside.png: truncated PNG: its header declares 8000 x 8000 pixels, 192008000 bytes "
            "inflated, which a file of " + std::to_string(inside.size()) +
            " bytes cannot hold (deflate inflates at most 1032 times)");
  EXPECT_LE(largest, size_t{64} << 10);
  // The same header with its pixels whole decodes (the check is no stricter than deflate).
  const Bytes real = HandPng(300, 200, 2, 200 * (1 + 300 * 3));
  Image image;
  ASSERT_TRUE(DecodeImage(real.data(), real.size(), "real.png", ImageLimits{}, &image).ok());
  EXPECT_EQ(image.pixels, Bytes(size_t{300} * 200 * 3, 0));
}

TEST_F(ImageFiles, AJpegDeclaringAHugeSizeIsRefusedBeforeItsPixelsAreAllocated) {
  Bytes jpg = ReadBytes(File("rgb_64x48_s2.jpg"));
  const size_t sof = FindMarker(jpg, 0xc0);
  ASSERT_GT(sof, 0u);
  for (size_t i = sof + 5; i < sof + 9; ++i) jpg[i] = 0xff;  // height, width: 65535
  size_t largest = 0;
  // Beyond what libjpeg decodes at all: it refuses while reading the header.
  EXPECT_EQ(DecodeMeasured(jpg, "huge.jpg", &largest).message(),
            "huge.jpg: JPEG too large: its header declares 65535 x 65535 pixels, more than the "
            "65500 a side libjpeg decodes");
  EXPECT_LE(largest, size_t{64} << 10);
  // 65000 x 65000: libjpeg would, the limit does not.
  for (size_t i = sof + 5; i < sof + 9; i += 2) {
    jpg[i] = 0xfd;
    jpg[i + 1] = 0xe8;
  }
  EXPECT_EQ(DecodeMeasured(jpg, "huge.jpg", &largest).message(),
            "huge.jpg: JPEG too large: its header declares 65000 x 65000 = 4225000000 pixels, "
            "more than the limit of 67108864");
  EXPECT_LE(largest, size_t{64} << 10);
  // 8000 x 8000 (64 Mpx, inside the limit) from a file of a few KB: its 4:2:0 colour has
  // 500 x 500 blocks at the least, a bit each, more than the file holds. Refused before the
  // 192 MB of pixels are allocated (they were, and the decode failed only then).
  for (size_t i = sof + 5; i < sof + 9; i += 2) {
    jpg[i] = 0x1f;
    jpg[i + 1] = 0x40;
  }
  EXPECT_EQ(DecodeMeasured(jpg, "lie.jpg", &largest).message(),
            "lie.jpg: truncated JPEG: its header declares 8000 x 8000 pixels, at least 250000 "
            "blocks of 8 x 8 samples coded with a bit each at the least, which a file of " +
                std::to_string(jpg.size()) + " bytes cannot hold");
  EXPECT_LE(largest, size_t{64} << 10);
  // A smaller limit is kept as well.
  ImageLimits small;
  small.max_pixels = 64 * 47;
  EXPECT_TRUE(Has(DecodeMeasured(ReadBytes(File("rgb_64x48_s2.jpg")), "s.jpg", &largest, small)
                      .message(),
                  "s.jpg: JPEG too large: its header declares 64 x 48 = 3072 pixels, more than "
                  "the limit of 3008"));
}

// A progressive grey JPEG by hand whose one scan spends exactly a bit on each block: side x
// side pixels of mid-grey, a DC scan whose Huffman table's one code is "0" (category 0, no
// difference), then `data` bytes of zeros (side * side / 512 of them code every block).
Bytes HandJpeg(int side, size_t data) {
  const uint8_t hi = static_cast<uint8_t>(side >> 8), lo = static_cast<uint8_t>(side);
  Bytes out = {0xff, 0xd8, 0xff, 0xdb, 0x00, 0x43, 0x00};  // SOI, DQT: table 0 of ones
  out.insert(out.end(), 64, 1);
  out.insert(out.end(), {0xff, 0xc2, 0x00, 0x0b, 8, hi, lo, hi, lo, 1, 1, 0x11, 0});  // SOF2
  out.insert(out.end(), {0xff, 0xc4, 0x00, 0x14, 0x00, 1});  // DHT: DC table 0, one 1-bit code
  out.insert(out.end(), 15, 0);
  out.push_back(0);  // its symbol: category 0
  out.insert(out.end(), {0xff, 0xda, 0x00, 0x08, 1, 1, 0x00, 0, 0, 0x00});  // SOS: DC, first
  out.insert(out.end(), data, 0);
  out.insert(out.end(), {0xff, 0xd9});  // EOI
  return out;
}

// The JPEG bound is no stricter than the coding: a file that spends a bit a block, the least
// a scan can, decodes; the same file without the last 200 bytes of its scan (more than its
// 118 bytes of headers) is refused by the bound before its pixels are allocated (libjpeg
// allocated them, read the scan and found it cut short).
TEST(ImageTest, AJpegIsHeldToABitABlock) {
  const Bytes whole = HandJpeg(2048, 2048 * 2048 / 512);
  Image image;
  const Status s = DecodeImage(whole.data(), whole.size(), "flat.jpg", ImageLimits{}, &image);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(image.header.channels, 1);
  EXPECT_EQ(image.pixels, Bytes(size_t{2048} * 2048, 128));
  const Bytes cut = HandJpeg(2048, 2048 * 2048 / 512 - 200);
  size_t largest = 0;
  EXPECT_EQ(DecodeMeasured(cut, "cut.jpg", &largest).message(),
            "cut.jpg: truncated JPEG: its header declares 2048 x 2048 pixels, at least 65536 "
            "blocks of 8 x 8 samples coded with a bit each at the least, which a file of " +
                std::to_string(cut.size()) + " bytes cannot hold");
  EXPECT_LE(largest, size_t{64} << 10);
}

TEST(ImageTest, FilesThatAreNoImagesAreRefused) {
  test::TempDir dir;
  Image image;
  const std::string text = dir.Write("notes.jpg", "<html>not an image</html>\n");
  EXPECT_EQ(DecodeImage(text, ImageLimits{}, &image).message(),
            text + ": not a JPEG or PNG file: it starts with 3c 68 74 6d 6c 3e 6e 6f, neither "
                   "the JPEG marker ff d8 ff nor the PNG signature 89 50 4e 47 0d 0a 1a 0a");
  const std::string empty = dir.Write("empty.png", "");
  EXPECT_EQ(DecodeImage(empty, ImageLimits{}, &image).message(),
            empty + ": not a JPEG or PNG file: the file is empty");
  const std::string missing = dir.File("missing.png");
  EXPECT_EQ(DecodeImage(missing, ImageLimits{}, &image).message(),
            missing + ": cannot open the image: No such file or directory");
  // Over the file size limit: refused before it is read (a sparse file: no disk used).
  const std::string big = dir.Write("big.png", "\x89PNG");
  ASSERT_EQ(::truncate(big.c_str(), (off_t{64} << 20) + 1), 0);
  test::LargestAllocation probe;
  EXPECT_EQ(DecodeImage(big, ImageLimits{}, &image).message(),
            big + ": the image file has 67108865 bytes, more than the 67108864 (64 MiB) an image "
                  "file may have");
  EXPECT_LE(probe.bytes(), size_t{4} << 10);
}

}  // namespace
}  // namespace shmtrain
