// Tests of saved model files (master/files/model_file.h): round trip, and every kind of damage.
#include "core/bytes.h"
#include "core/crc32.h"
#include "master/files/checkpoint.h"
#include "master/files/model_file.h"
#include "master/files/output_write.h"
#include "nn/layer.h"
#include "tests/largest_allocation.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/bytes.h"
#include "core/crc32.h"
#include "gtest/gtest.h"
#include "master/files/checkpoint.h"
#include "master/files/output_write.h"

namespace shmtrain {
namespace {

const std::string kBad = "m.bin: not a usable model file: ";
const std::string kCut = "cut short (truncated) in the ";

std::vector<float> DistinctParams(const ModelSpec& spec) {
  std::vector<float> p(spec.ParamCount());
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = (static_cast<float>(i) - 10.0f) * 0.37f + (i % 2 ? 1e-3f : -1e-5f);
  }
  return p;
}

// The 3-4-2 tanh classifier of cat and dog with min-max scaling.
Model Classifier() {
  Model m;
  m.spec = ModelSpec::Mlp({3, 4, 2}, Activation::kTanh, m.spec.loss);
  m.spec.loss = Loss::kXent;
  m.norm.kind = Normalize::kMinMax;
  m.norm.offset = {0.5f, -1.25f, 2e-7f};
  m.norm.scale = {0.25f, 3.0f, 1e6f};
  m.classes = data::ClassMap::Build({"dog", "cat", "dog"});
  m.params = DistinctParams(m.spec);
  return m;
}

// A 2-5-1 relu regressor without scaling (no offsets or scales, as Normalizer::Fit gives).
Model Regressor() {
  Model m;
  m.spec = ModelSpec::Mlp({2, 5, 1}, Activation::kRelu, m.spec.loss);
  m.spec.loss = Loss::kMse;
  m.norm.kind = Normalize::kNone;
  m.params = DistinctParams(m.spec);
  return m;
}

template <class T>
void Put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof v);
}

// The file version 2 of an MLP, as the releases before layered models wrote it (docs/models.md,
// "Model files"): what this build must still read. Written here independently of the product.
std::string EncodeV2(const Model& m) {
  std::vector<int> sizes;
  Activation activation;
  EXPECT_TRUE(m.spec.AsMlp(&sizes, &activation));
  std::string s(kModelMagic, sizeof kModelMagic);
  Put<uint32_t>(&s, 2);
  Put<uint32_t>(&s, m.spec.loss == Loss::kXent ? 1 : 0);
  Put<uint32_t>(&s, static_cast<uint32_t>(sizes.size()));
  for (int l : sizes) Put<int32_t>(&s, l);
  Put<uint32_t>(&s, static_cast<uint32_t>(activation));
  Put<uint32_t>(&s, static_cast<uint32_t>(m.spec.loss));
  const bool scaled = m.norm.kind != Normalize::kNone;
  Put<uint32_t>(&s, static_cast<uint32_t>(m.norm.kind));
  Put<uint32_t>(&s, scaled ? static_cast<uint32_t>(m.norm.offset.size()) : 0);
  if (scaled) {
    for (float v : m.norm.offset) Put<float>(&s, v);
    for (float v : m.norm.scale) Put<float>(&s, v);
  }
  Put<uint32_t>(&s, static_cast<uint32_t>(m.classes.size()));
  Put<uint32_t>(&s, m.classes.numeric ? 1 : 0);
  for (const std::string& name : m.classes.names) {
    Put<uint32_t>(&s, static_cast<uint32_t>(name.size()));
    s += name;
  }
  Put<uint64_t>(&s, m.params.size());
  s.append(reinterpret_cast<const char*>(m.params.data()), m.params.size() * sizeof(float));
  Put<uint32_t>(&s, Crc32(s.data(), s.size()));
  return s;
}

void ExpectSameModel(const Model& a, const Model& b) {
  EXPECT_EQ(a.spec, b.spec);
  EXPECT_EQ(a.norm.kind, b.norm.kind);
  EXPECT_EQ(a.norm.offset, b.norm.offset);
  EXPECT_EQ(a.norm.scale, b.norm.scale);
  EXPECT_EQ(a.classes.numeric, b.classes.numeric);
  EXPECT_EQ(a.classes.names, b.classes.names);
  EXPECT_EQ(a.classes.values, b.classes.values);
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)), 0)
      << "parameters differ in their bits";
}

// Decodes `bytes`; it must fail with kData and exactly this message after kBad, and leave
// *out alone.
void ExpectRefused(const std::string& bytes, const std::string& what) {
  Model out;
  out.params = {42.0f};
  const Status s = DecodeModel(bytes, "m.bin", &out);
  ASSERT_FALSE(s.ok()) << "decoded without error: " << what;
  EXPECT_EQ(s.code(), Status::Code::kData);
  EXPECT_EQ(s.message(), kBad + what);
  EXPECT_EQ(out.params, std::vector<float>{42.0f});
}

void PutU32(std::string* bytes, size_t at, uint32_t v) {
  ASSERT_LE(at + 4, bytes->size());
  std::memcpy(bytes->data() + at, &v, 4);
}

TEST(ModelFileTest, ClassifierRoundTrip) {
  const Model m = Classifier();
  ASSERT_EQ(m.params.size(), 26u);
  ASSERT_EQ(m.classes.names, (std::vector<std::string>{"cat", "dog"}));
  const std::string bytes = EncodeModel(m);
  Model back;
  const Status s = DecodeModel(bytes, "m.bin", &back);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectSameModel(back, m);
  EXPECT_FALSE(back.classes.numeric);
  EXPECT_TRUE(back.classes.values.empty());
  // Encoding is deterministic and the decoded model encodes to the same bytes.
  EXPECT_EQ(EncodeModel(back), bytes);
}

TEST(ModelFileTest, ClassifierLayout) {
  // The layout of docs/models.md's "Model files", field by field (version 3).
  const Model m = Classifier();
  const std::string b = EncodeModel(m);
  ASSERT_EQ(b.size(), 230u);
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  EXPECT_EQ(b.substr(0, 8), "SHMTMODL");
  EXPECT_EQ(u32(8), 3u);    // version
  EXPECT_EQ(u32(12), 1u);   // task: classification
  EXPECT_EQ(u32(16), 3u);   // input c, h, w
  EXPECT_EQ(u32(20), 1u);
  EXPECT_EQ(u32(24), 1u);
  EXPECT_EQ(u32(28), 24u);  // the model text's bytes
  EXPECT_EQ(b.substr(32, 24), "linear(4),tanh,linear(2)");
  EXPECT_EQ(u32(56), 1u);   // xent
  EXPECT_EQ(u32(60), 1u);   // minmax
  EXPECT_EQ(u32(64), 3u);   // F
  float f;
  std::memcpy(&f, b.data() + 68, 4);
  EXPECT_EQ(f, 0.5f);
  std::memcpy(&f, b.data() + 80, 4);
  EXPECT_EQ(f, 0.25f);
  EXPECT_EQ(u32(92), 2u);   // K
  EXPECT_EQ(u32(96), 0u);   // text labels
  EXPECT_EQ(u32(100), 3u);
  EXPECT_EQ(b.substr(104, 3), "cat");
  EXPECT_EQ(u32(107), 3u);
  EXPECT_EQ(b.substr(111, 3), "dog");
  uint64_t n;
  std::memcpy(&n, b.data() + 114, 8);
  EXPECT_EQ(n, 26u);
  EXPECT_EQ(std::memcmp(b.data() + 122, m.params.data(), 104), 0);
}

TEST(ModelFileTest, Version2ClassifierLayout) {
  // Version 2, written by the releases before layered models: the test's own encoder, checked
  // here field by field and against a file such a release wrote (fixture_test.cc).
  const Model m = Classifier();
  const std::string b = EncodeV2(m);
  ASSERT_EQ(b.size(), 210u);
  Model back;
  const Status s = DecodeModel(b, "m.bin", &back);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectSameModel(back, m);
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  EXPECT_EQ(b.substr(0, 8), "SHMTMODL");
  EXPECT_EQ(u32(8), 2u);    // version
  EXPECT_EQ(u32(12), 1u);   // task: classification
  EXPECT_EQ(u32(16), 3u);   // L
  EXPECT_EQ(u32(20), 3u);
  EXPECT_EQ(u32(24), 4u);
  EXPECT_EQ(u32(28), 2u);
  EXPECT_EQ(u32(32), 0u);   // tanh
  EXPECT_EQ(u32(36), 1u);   // xent
  EXPECT_EQ(u32(40), 1u);   // minmax
  EXPECT_EQ(u32(44), 3u);   // F
  float f;
  std::memcpy(&f, b.data() + 48, 4);
  EXPECT_EQ(f, 0.5f);
  std::memcpy(&f, b.data() + 60, 4);
  EXPECT_EQ(f, 0.25f);
  EXPECT_EQ(u32(72), 2u);   // K
  EXPECT_EQ(u32(76), 0u);   // text labels
  EXPECT_EQ(u32(80), 3u);
  EXPECT_EQ(b.substr(84, 3), "cat");
  EXPECT_EQ(u32(87), 3u);
  EXPECT_EQ(b.substr(91, 3), "dog");
  uint64_t n;
  std::memcpy(&n, b.data() + 94, 8);
  EXPECT_EQ(n, 26u);
  EXPECT_EQ(std::memcmp(b.data() + 102, m.params.data(), 104), 0);
}

TEST(ModelFileTest, RegressionRoundTrip) {
  const Model m = Regressor();
  const std::string bytes = EncodeModel(m);
  // No scaling and no classes: magic, version/task, input shape, T, the text
  // "linear(5),relu,linear(1)", loss, normalisation/F (no offsets or scales), K/numeric (no
  // names), n, 21 parameters, CRC.
  EXPECT_EQ(bytes.size(), 8u + 8 + 12 + 4 + 24 + 4 + 8 + 8 + 8 + 4 * 21 + 4);
  Model back;
  const Status s = DecodeModel(bytes, "m.bin", &back);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectSameModel(back, m);
  EXPECT_EQ(back.classes.size(), 0);
  // Without scaling the file holds no offsets or scales, and the decoded model none: they
  // would be 2 x 4 bytes per input that the file does not justify (the identity).
  EXPECT_TRUE(back.norm.offset.empty());
  EXPECT_TRUE(back.norm.scale.empty());
  Model identity = m;
  identity.norm.offset = {0, 0};
  identity.norm.scale = {1, 1};
  EXPECT_EQ(EncodeModel(identity), bytes);
}

TEST(ModelFileTest, StandardScalingRoundTrip) {
  Model m = Regressor();
  m.spec = ModelSpec::Mlp({2, 5, 1}, Activation::kSigmoid, Loss::kMse);
  m.norm.kind = Normalize::kStandard;
  m.norm.offset = {-3.5f, 1e-30f};
  m.norm.scale = {0.125f, 7.0f};
  Model back;
  ASSERT_TRUE(DecodeModel(EncodeModel(m), "m.bin", &back).ok());
  ExpectSameModel(back, m);
}

// --normalize channel holds its channels' statistics as one offset and scale per input, as
// the other kinds do: the file differs from the same model under standard scaling only in the
// kind's value (3, appended after the others) and the checksum.
TEST(ModelFileTest, ChannelScalingRoundTrip) {
  Model m;
  ASSERT_TRUE(nn::ParseModelText("flatten,linear(1)", &m.spec.layers).ok());
  m.spec.input = {2, 1, 2};
  m.spec.loss = Loss::kMse;
  m.norm.kind = Normalize::kChannel;
  m.norm.offset = {0.25f, 0.25f, -3.0f, -3.0f};
  m.norm.scale = {2.0f, 2.0f, 0.5f, 0.5f};
  m.params = DistinctParams(m.spec);
  const std::string bytes = EncodeModel(m);
  Model back;
  const Status s = DecodeModel(bytes, "m.bin", &back);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectSameModel(back, m);
  EXPECT_EQ(EncodeModel(back), bytes);
  Model standard = m;
  standard.norm.kind = Normalize::kStandard;
  const std::string other = EncodeModel(standard);
  ASSERT_EQ(other.size(), bytes.size());
  std::vector<size_t> differ;
  for (size_t i = 0; i + 4 < bytes.size(); ++i) {
    if (bytes[i] != other[i]) differ.push_back(i);
  }
  ASSERT_EQ(differ.size(), 1u) << "only the kind's value differs";
  uint32_t kind = 0;
  std::memcpy(&kind, bytes.data() + differ[0], 4);
  EXPECT_EQ(kind, 3u);
}

TEST(ModelFileTest, NumericClassesRoundTrip) {
  Model m;
  m.spec = ModelSpec::Mlp({2, 3}, Activation::kIdentity, m.spec.loss);
  m.spec.loss = Loss::kXent;
  m.norm.kind = Normalize::kNone;
  m.classes = data::ClassMap::Build({"2.5", "1", "0", "1.0"});
  ASSERT_EQ(m.classes.names, (std::vector<std::string>{"0", "1", "2.5"}));
  m.params = DistinctParams(m.spec);
  Model back;
  const Status s = DecodeModel(EncodeModel(m), "m.bin", &back);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectSameModel(back, m);
  EXPECT_TRUE(back.classes.numeric);
  EXPECT_EQ(back.classes.values, (std::vector<double>{0, 1, 2.5}));
  EXPECT_EQ(back.classes.Find("2.50"), 2);
  // Values that need an exponent or many digits.
  m.classes = data::ClassMap::Build({"-1e20", "0.1", "3"});
  ASSERT_TRUE(DecodeModel(EncodeModel(m), "m.bin", &back).ok());
  EXPECT_EQ(back.classes.names, (std::vector<std::string>{"-1e+20", "0.1", "3"}));
  EXPECT_EQ(back.classes.values, (std::vector<double>{-1e20, 0.1, 3}));
}

// What a count declares against what the file holds, as the decoder says it.
std::string Short(int count, const std::string& things, int bytes, const std::string& each,
                  size_t left) {
  return std::to_string(count) + " " + things + " need " + (things == "classes" ? "at least " : "") +
         std::to_string(bytes) + " bytes (" + each + " each), the file has only " +
         std::to_string(left) + " more";
}

TEST(ModelFileTest, EveryTruncationRefused) {
  const std::string bytes = EncodeModel(Classifier());
  ASSERT_EQ(bytes.size(), 230u);
  // The section each cut falls in (see ClassifierLayout).
  auto expected = [](size_t len) -> std::string {
    if (len < 8) return "too short to hold a header (" + std::to_string(len) + " bytes)";
    if (len < 32) return kCut + "header";          // version, task, input shape, T
    if (len < 56) return kCut + "model text";
    if (len < 60) return kCut + "header";          // loss
    if (len < 68) return kCut + "normalisation";   // kind, F
    if (len < 92) return kCut + "normalisation: " + Short(3, "features", 24, "an offset and a scale", len - 68);
    if (len < 100) return kCut + "class list";     // K, numeric
    if (len < 108) return kCut + "class list: " + Short(2, "classes", 8, "a length", len - 100);
    if (len < 114) return kCut + "class list";     // the names
    if (len < 122) return kCut + "parameters";     // n
    return kCut + "parameters: the layers' 26 parameters need 104 bytes and the checksum 4, the "
                  "file has only " + std::to_string(len - 122) + " more";
  };
  for (size_t len = 0; len < bytes.size(); ++len) {
    SCOPED_TRACE("cut at " + std::to_string(len));
    Model out;
    const Status s = DecodeModel(bytes.substr(0, len), "m.bin", &out);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message(), kBad + expected(len));
  }
}

TEST(ModelFileTest, EveryTruncationOfVersion2Refused) {
  const std::string bytes = EncodeV2(Classifier());
  ASSERT_EQ(bytes.size(), 210u);
  // The section each cut falls in (see ClassifierLayout).
  auto expected = [](size_t len) -> std::string {
    if (len < 8) return "too short to hold a header (" + std::to_string(len) + " bytes)";
    if (len < 20) return kCut + "header";          // version, task, L
    if (len < 32) return kCut + "layer sizes";
    if (len < 40) return kCut + "header";          // activation, loss
    if (len < 48) return kCut + "normalisation";   // kind, F
    if (len < 72) return kCut + "normalisation: " + Short(3, "features", 24, "an offset and a scale", len - 48);
    if (len < 80) return kCut + "class list";      // K, numeric
    if (len < 88) return kCut + "class list: " + Short(2, "classes", 8, "a length", len - 80);
    if (len < 94) return kCut + "class list";      // the names
    if (len < 102) return kCut + "parameters";     // n
    return kCut + "parameters: the layers' 26 parameters need 104 bytes and the checksum 4, the "
                  "file has only " + std::to_string(len - 102) + " more";
  };
  for (size_t len = 0; len < bytes.size(); ++len) {
    SCOPED_TRACE("cut at " + std::to_string(len));
    Model out;
    const Status s = DecodeModel(bytes.substr(0, len), "m.bin", &out);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Status::Code::kData);
    EXPECT_NE(s.message().find("not a usable model file"), std::string::npos) << s.message();
    EXPECT_EQ(s.message(), kBad + expected(len));
  }
  ExpectRefused("", "too short to hold a header (0 bytes)");
}

TEST(ModelFileTest, FlippedBitIsChecksumMismatch) {
  const std::string v3 = EncodeModel(Classifier());
  for (size_t at : {size_t{122}, size_t{170}, size_t{225}, size_t{229}}) {
    std::string b = v3;
    b[at] = static_cast<char>(b[at] ^ 1);
    ExpectRefused(b, "checksum mismatch (the file is damaged)");
  }
  const std::string bytes = EncodeV2(Classifier());
  for (size_t at : {size_t{102}, size_t{150}, size_t{205}}) {
    for (int bit : {0, 7}) {
      std::string b = bytes;
      b[at] = static_cast<char>(b[at] ^ (1 << bit));
      SCOPED_TRACE("byte " + std::to_string(at) + " bit " + std::to_string(bit));
      ExpectRefused(b, "checksum mismatch (the file is damaged)");
    }
  }
  // In the scaling, in a class name (still in order), and in the checksum itself.
  for (size_t at : {size_t{50}, size_t{62}, size_t{93}, size_t{206}, size_t{209}}) {
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 1);
    SCOPED_TRACE("byte " + std::to_string(at));
    ExpectRefused(b, "checksum mismatch (the file is damaged)");
  }
}

TEST(ModelFileTest, OtherVersionRefused) {
  std::string b = EncodeModel(Classifier());
  PutU32(&b, 8, 1);
  ExpectRefused(b, "format version 1, this build reads versions 2 and 3 only (retrain, or use "
                   "the build that wrote it)");
  PutU32(&b, 8, 4);
  ExpectRefused(b, "format version 4, this build reads versions 2 and 3 only (retrain, or use "
                   "the build that wrote it)");
  // A version 3 file read as version 2 and the other way round: refused, never misread.
  PutU32(&b, 8, 2);
  Model out;
  EXPECT_FALSE(DecodeModel(b, "m.bin", &out).ok());
  b = EncodeV2(Classifier());
  PutU32(&b, 8, 3);
  EXPECT_FALSE(DecodeModel(b, "m.bin", &out).ok());
}

TEST(ModelFileTest, WrongMagicRefused) {
  std::string b = EncodeModel(Classifier());
  b[0] = 's';
  ExpectRefused(b, "wrong magic number (not written by shmtrain --save)");
  b = EncodeModel(Classifier());
  b[7] = 'X';
  ExpectRefused(b, "wrong magic number (not written by shmtrain --save)");
  ExpectRefused("SHMTMOD", "too short to hold a header (7 bytes)");
  ExpectRefused("a,b,y\n1,2,3\n", "wrong magic number (not written by shmtrain --save)");
}

TEST(ModelFileTest, TrailingBytesRefused) {
  const std::string bytes = EncodeModel(Classifier());
  ExpectRefused(bytes + std::string(1, '\0'), "trailing bytes");
  ExpectRefused(bytes + bytes, "trailing bytes");
}

TEST(ModelFileTest, InconsistentFieldsRefused) {
  const std::string v3 = EncodeModel(Classifier());
  struct Patch {
    size_t offset;
    uint32_t value;
    const char* what;
  };
  for (const Patch& p : std::vector<Patch>{
           {12, 0, "task and loss disagree"},
           {12, 2, "unknown task 2"},
           {16, 0, "input shape 0x1x1"},
           {20, 5, "linear #1 (layer 1): input 3x5x1 is not flat (put flatten before it)"},
           {24, 1u << 24, "input shape 3x1x16777216"},
           {28, 4096, "model text of 4096 bytes"},
           {28, 200, "cut short (truncated) in the model text"},
           {56, 2, "unknown loss"},
           {56, 0, "task and loss disagree"},
           {60, 4, "unknown normalisation"},
           {60, 3, "normalisation channel on the flat input 3 (it needs an image, c x h x w)"},
           {64, 2, "normalisation has 2 features, expected 3"},
           {92, 3, "class list of 3 classes, expected 2"},
       }) {
    std::string b = v3;
    PutU32(&b, p.offset, p.value);
    SCOPED_TRACE(p.what);
    ExpectRefused(b, p.what);
  }
  // The model text: a layer this build does not know, and outputs that are no classes.
  std::string b = v3;
  std::memcpy(b.data() + 32 + 10, "tanx", 4);
  ExpectRefused(b, "layer 2 'tanx': unknown layer 'tanx' (layers: linear, conv2d, maxpool2d, "
                   "avgpool2d, adaptiveavgpool2d, batchnorm2d, batchnorm1d, flatten, relu, "
                   "tanh, sigmoid, dropout, residual)");
  b = v3;
  std::memcpy(b.data() + 32 + 22, "1", 1);  // linear(1) with xent
  ExpectRefused(b, "loss xent with 1 outputs");
}

// Classifier()'s version 3 file with its model text replaced by `text`, length and checksum
// made to fit.
std::string WithModelText(const std::string& text) {
  const std::string v3 = EncodeModel(Classifier());
  std::string b = v3.substr(0, 28);
  Put<uint32_t>(&b, static_cast<uint32_t>(text.size()));
  b += text + v3.substr(32 + 24, v3.size() - 4 - 56);
  Put<uint32_t>(&b, Crc32(b.data(), b.size()));
  return b;
}

// The model text of a file is the canonical text EncodeModel writes (docs/models.md, "Model
// files"): a file whose text is spelled otherwise was not written by shmtrain, and the same
// model spelled two ways would be two files. --model reads such spellings (they are
// canonicalised there); a file's decoder does not.
TEST(ModelFileTest, NonCanonicalModelTextRefused) {
  const std::string canonical = "linear(4),tanh,linear(2)";
  Model back;
  ASSERT_TRUE(DecodeModel(WithModelText(canonical), "m.bin", &back).ok());
  for (const char* text :
       {"linear( 4 ),tanh,linear(2)", "linear(4), tanh,linear(2)", " linear(4),tanh,linear(2)",
        "linear(+4),tanh,linear(2)", "linear(04),tanh,linear(2)", "linear(4.0),tanh,linear(2)",
        "linear(out=4),tanh,linear(2)", "linear(4),tanh(),linear(2)",
        "linear(4),dropout(p=0.5),tanh,linear(2)", "linear(4),tanh,linear(2)\t"}) {
    SCOPED_TRACE(text);
    std::vector<LayerSpec> layers;
    ASSERT_TRUE(nn::ParseModelText(text, &layers).ok()) << "--model reads it";
    const std::string written = nn::ModelText(layers);
    ExpectRefused(WithModelText(text),
                  "model text '" + std::string(text) +
                      "' is not in the canonical form that shmtrain writes ('" + written + "')");
  }
}

TEST(ModelFileTest, InconsistentFieldsOfVersion2Refused) {
  const std::string bytes = EncodeV2(Classifier());
  // One u32 field patched at a time (offsets as pinned by ClassifierLayout).
  struct Patch {
    size_t offset;
    uint32_t value;
    const char* what;
  };
  for (const Patch& p : std::vector<Patch>{
           {12, 0, "task and loss disagree"},  // task regression with loss xent
           {12, 2, "unknown task 2"},
           {16, 1, "layer count 1"},
           {24, 0, "layer size 0"},
           {32, 4, "unknown activation"},
           {36, 2, "unknown loss"},
           {40, 4, "unknown normalisation"},
           {40, 3, "normalisation channel on the flat input 3 (it needs an image, c x h x w)"},
           {44, 2, "normalisation has 2 features, expected 3"},
           {72, 3, "class list of 3 classes, expected 2"},
       }) {
    std::string b = bytes;
    PutU32(&b, p.offset, p.value);
    ExpectRefused(b, p.what);
  }
  std::string b = bytes;
  PutU32(&b, 76, 2);  // the numeric flag is 0 or 1
  {
    Model out;
    const Status s = DecodeModel(b, "m.bin", &out);
    EXPECT_EQ(s.code(), Status::Code::kData);
    EXPECT_EQ(s.message().rfind(kBad, 0), 0u) << s.message();
  }
  b = bytes;
  std::memcpy(b.data() + 84, "dog", 3);  // dog, dog
  ExpectRefused(b, "class names out of order");
  b = bytes;
  PutU32(&b, 76, 1);  // numeric, but "cat" is not a number
  ExpectRefused(b, "class 0 is not a number");
  b = bytes;
  PutU32(&b, 94, 25);
  ExpectRefused(b, "parameter count 25 does not fit the layers (26)");
}

TEST(ModelFileTest, NumericClassesOutOfOrderRefused) {
  Model m;
  m.spec = ModelSpec::Mlp({1, 2}, Activation::kTanh, Loss::kXent);
  m.classes = data::ClassMap::Build({"1", "2"});
  m.params = DistinctParams(m.spec);
  m.classes.names = {"2", "1.0"};  // written as given
  ExpectRefused(EncodeModel(m), "class values out of order");
  m.classes.names = {"1", "1.0"};
  ExpectRefused(EncodeModel(m), "class values out of order");
}

// Class names are printable text (data/dataset.h): the loaders refuse a label with a control
// byte, and so does a model file (crafted, or written before they did), which would put it
// raw into predict's CSV.
TEST(ModelFileTest, ClassNamesWithAControlByteRefused) {
  Model m = Classifier();
  m.classes.names = {std::string("c\0t", 3), "dog"};
  ExpectRefused(EncodeModel(m), "class 0's name 'c\\x00t' holds a control byte (\\x00 at byte 1)");
  m.classes.names = {"cat", "d\ng"};
  ExpectRefused(EncodeModel(m), "class 1's name 'd\\x0ag' holds a control byte (\\x0a at byte 1)");
}

// A valid checksum says only that the bytes are the ones written: a model whose parameters or
// scaling are not finite (NaN, Inf) would predict NaN for every row, and is refused, naming
// the first bad value and where it sits in the layers.
TEST(ModelFileTest, NonFiniteValuesAreRefusedNamingTheFirst) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Classifier(): 3-4-2, so W0 is 4 x 3 (0..11, column-major), b0 12..15, W1 2 x 4 (16..23),
  // b1 24..25.
  Model m = Classifier();
  m.params[7] = nan;  // W0(3, 1)
  m.params[20] = inf;
  ExpectRefused(EncodeModel(m), "parameter 7 of 26 is NaN: layer 0 weight row 3, column 1 "
                                "(0.weight[3, 1] in an export)");
  m = Classifier();
  m.params[20] = -inf;  // W1(0, 2)
  ExpectRefused(EncodeModel(m), "parameter 20 of 26 is -Inf: layer 1 weight row 0, column 2 "
                                "(2.weight[0, 2] in an export)");
  m = Classifier();
  m.params[25] = inf;
  ExpectRefused(EncodeModel(m),
                "parameter 25 of 26 is +Inf: layer 1 bias 1 (2.bias[1] in an export)");
  m = Classifier();
  m.params[13] = nan;
  ExpectRefused(EncodeModel(m),
                "parameter 13 of 26 is NaN: layer 0 bias 1 (0.bias[1] in an export)");
  m = Classifier();
  m.norm.scale[2] = inf;
  ExpectRefused(EncodeModel(m), "the input scale of feature 2 is +Inf");
  m = Classifier();
  m.norm.offset[1] = nan;
  ExpectRefused(EncodeModel(m), "the input offset of feature 1 is NaN");
}

// A running variance that is negative (or not finite) comes from no run: evaluation would
// normalise by its square root (eval printed a loss of 1121.63 and exited 0 for one; a larger
// one ended in exit 5 blaming the outputs). Refused, naming the layer's buffer; in a block too.
TEST(ModelFileTest, NegativeRunningVarianceIsRefusedNamingTheLayer) {
  Model m;
  m.spec.input = {3, 1, 1};
  m.spec.loss = Loss::kXent;
  ASSERT_TRUE(nn::ParseModelText("linear(4),batchnorm1d,relu,linear(2)", &m.spec.layers).ok());
  m.classes = data::ClassMap::Build({"cat", "dog"});
  // linear: W 0..11, b 12..15; batch norm: weight 16..19, bias 20..23, running_mean 24..27,
  // running_var 28..31, num_batches_tracked 32; linear 33..42.
  m.params = DistinctParams(m.spec);
  ASSERT_EQ(m.params.size(), 43u);
  for (int i = 28; i < 32; ++i) m.params[i] = 0.5f;
  Model back;
  ASSERT_TRUE(DecodeModel(EncodeModel(m), "m.bin", &back).ok());
  m.params[29] = -3;
  ExpectRefused(EncodeModel(m), "parameter 29 of 43 is -3, and a running variance is a finite "
                                "number, never negative: batchnorm1d #1 (layer 2) running_var, "
                                "element 1 of 4 (1.running_var in an export)");
  m.params[29] = 0;  // a constant feature's
  ASSERT_TRUE(DecodeModel(EncodeModel(m), "m.bin", &back).ok());
  m.params[24] = -3;  // a mean may be anything
  ASSERT_TRUE(DecodeModel(EncodeModel(m), "m.bin", &back).ok());
  EXPECT_EQ(CheckRunningVariances(m.spec, m.params).code(), Status::Code::kOk);
  m.params[31] = -1e-30f;
  EXPECT_NE(CheckRunningVariances(m.spec, m.params).message().find("parameter 31 of 43 is -1e-30"),
            std::string::npos);
  m.spec.layers.clear();
  m.params = {};
  ASSERT_TRUE(nn::ParseModelText("linear(4),residual(batchnorm1d,relu),linear(2)",
                                 &m.spec.layers).ok());
  m.params = DistinctParams(m.spec);
  for (int i = 16; i < 33; ++i) m.params[i] = 0.5f;
  m.params[30] = -0.25f;
  ExpectRefused(EncodeModel(m), "parameter 30 of 43 is -0.25, and a running variance is a "
                                "finite number, never negative: residual #1 (layer 2) "
                                "body.0.running_var, element 2 of 4 (1.body.0.running_var in an "
                                "export)");
}

// The head of a version 3 file that declares a large model, and nothing after `until`: the
// input 1x4096x4096 (2^24 values, the most a model file may declare), two linear layers of
// 65536 units and two classes (about 2^40 parameters), normalisation `norm`. Its F and the
// sections after it are the format's (scaled: 2^24 features, else 0).
std::string LargeModelHead(Normalize norm, const std::string& until) {
  const std::string text = "flatten,linear(65536),relu,linear(65536),relu,linear(2)";
  std::string s(kModelMagic, sizeof kModelMagic);
  Put<uint32_t>(&s, kModelVersion);
  Put<uint32_t>(&s, 1);  // classification
  for (uint32_t d : {1u, 4096u, 4096u}) Put<uint32_t>(&s, d);
  Put<uint32_t>(&s, static_cast<uint32_t>(text.size()));
  s += text;
  Put<uint32_t>(&s, 1);  // xent
  Put<uint32_t>(&s, static_cast<uint32_t>(norm));
  Put<uint32_t>(&s, norm == Normalize::kNone ? 0 : 1u << 24);
  if (until == "normalisation") return s + std::string(8, '\0');  // two offsets
  Put<uint32_t>(&s, 2);  // K
  Put<uint32_t>(&s, 0);  // text labels
  if (until == "class list") return s;
  for (const char* name : {"a", "b"}) {
    Put<uint32_t>(&s, 1);
    s += name;
  }
  Put<uint64_t>(&s, uint64_t{1103806857218});  // 2^24 x 65536 + 65536 + 65536 x 65536 + ...
  return s + std::string(12, '\0');  // three parameters
}

// The fourth adversarial trial: a 446-byte model file made the decoder allocate 2 x 64 MiB (the
// identity scaling of 2^24 inputs) before it found the file cut short. Every size a file
// declares is checked against the bytes it holds before anything is allocated for it, and the
// refusal says what the header claims and what the file holds.
TEST(ModelFileTest, DeclaredSizesAreCheckedAgainstTheFileBeforeAllocating) {
  {
    // The probe sees what it must catch.
    test::LargestAllocation probe;
    std::vector<float> v(size_t{1} << 19);
    EXPECT_GE(probe.bytes(), v.size() * sizeof(float));
  }
  struct Case {
    Normalize norm;
    std::string until, what;
  };
  for (const Case& c : std::vector<Case>{
           {Normalize::kNone, "class list",
            kCut + "class list: 2 classes need at least 8 bytes (a length each), the file has "
                   "only 0 more"},
           {Normalize::kStandard, "normalisation",
            kCut + "normalisation: 16777216 features need 134217728 bytes (an offset and a "
                   "scale each), the file has only 8 more"},
           {Normalize::kNone, "parameters",
            kCut + "parameters: the layers' 1103806857218 parameters need 4415227428872 bytes "
                   "and the checksum 4, the file has only 12 more"},
       }) {
    const std::string bytes = LargeModelHead(c.norm, c.until);
    SCOPED_TRACE(c.what);
    ASSERT_LT(bytes.size(), 512u);
    test::LargestAllocation probe;
    Model out;
    const Status s = DecodeModel(bytes, "m.bin", &out);
    EXPECT_EQ(s.message(), kBad + c.what);
    EXPECT_LE(probe.bytes(), size_t{64} << 10)
        << "a " << bytes.size() << "-byte file made the decoder allocate " << probe.bytes()
        << " bytes at once";
  }
}

// What `train --save` does with a model.
Status SaveModel(const std::string& path, const Model& m) {
  return master::WriteFileDurably(path, EncodeModel(m));
}

// A fresh directory under $TMPDIR (or /tmp), removed afterwards.
class ModelFileDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/model_file_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& name : Entries()) unlink((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      closedir(d);
    }
    return names;
  }
  std::string ReadAll(const std::string& path) const {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

TEST_F(ModelFileDirTest, SaveAndLoad) {
  const std::string path = dir_ + "/model.bin";
  const Model m = Classifier();
  const Status s = SaveModel(path, m);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Entries(), std::vector<std::string>{"model.bin"});  // no ".tmp." file left
  EXPECT_EQ(ReadAll(path), EncodeModel(m));
  Model back;
  const Status l = LoadModel(path, &back);
  ASSERT_TRUE(l.ok()) << l.message();
  ExpectSameModel(back, m);
  // Saving over it replaces it whole.
  const Model r = Regressor();
  ASSERT_TRUE(SaveModel(path, r).ok());
  EXPECT_EQ(Entries(), std::vector<std::string>{"model.bin"});
  ASSERT_TRUE(LoadModel(path, &back).ok());
  ExpectSameModel(back, r);
}

TEST_F(ModelFileDirTest, LoadErrorsNameThePath) {
  const std::string missing = dir_ + "/nope.bin";
  Model out;
  Status s = LoadModel(missing, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kData);
  EXPECT_EQ(s.message(), missing + ": cannot open model file: No such file or directory");
  // A damaged file on disk: the message names it.
  const std::string path = dir_ + "/cut.bin";
  {
    std::ofstream f(path, std::ios::binary);
    const std::string b = EncodeModel(Classifier());
    f << b.substr(0, 120);
  }
  s = LoadModel(path, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kData);
  EXPECT_EQ(s.message(), path + ": not a usable model file: " + kCut + "parameters");
}

// The one whole-file read says when a file opens but cannot be read (a directory), where a
// read that ignored it would call the file too short.
TEST_F(ModelFileDirTest, LoadOfADirectorySaysItCannotBeRead) {
  Model out;
  const Status s = LoadModel(dir_, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kData);
  EXPECT_EQ(s.message(), dir_ + ": cannot read model file: Is a directory");
  std::string bytes;
  const Status c = ReadFileBytes(dir_, "checkpoint", &bytes);
  EXPECT_EQ(c.message(), dir_ + ": cannot read checkpoint: Is a directory");
}

TEST_F(ModelFileDirTest, SaveIntoMissingDirectory) {
  const std::string path = dir_ + "/no/such/dir/model.bin";
  const Status s = SaveModel(path, Classifier());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kResource);
  EXPECT_EQ(s.message(), "cannot write " + path + ": No such file or directory");
  EXPECT_TRUE(Entries().empty());
}

// A FIFO with no reader: the write waits for one up to its deadline, then fails naming the
// FIFO, which stays a FIFO; nothing is left beside it.
TEST_F(ModelFileDirTest, FifoWithoutReaderFailsAtItsDeadline) {
  const std::string fifo = dir_ + "/out.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = master::WriteFileDurably(fifo, "bytes\n", {.reader_wait_ms = 300});
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kResource);
  EXPECT_EQ(s.message(), "cannot write " + fifo + ": no process opened the FIFO " + fifo +
                             " for reading within 0.3 s; start its reader first");
  EXPECT_GE(ms, 300);
  EXPECT_LT(ms, 5000);
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(Entries(), std::vector<std::string>{"out.fifo"});
}

// A reader that comes late, within the deadline, gets every byte.
TEST_F(ModelFileDirTest, FifoReaderThatComesLateGetsTheBytes) {
  const std::string fifo = dir_ + "/out.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string bytes(1 << 20, 'x');  // more than a pipe holds: the writes must block
  std::string got;
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    got = ReadAll(fifo);
  });
  const Status s = master::WriteFileDurably(fifo, bytes, {.reader_wait_ms = 10'000});
  reader.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(got.size(), bytes.size());
  EXPECT_TRUE(got == bytes);
  EXPECT_EQ(Entries(), std::vector<std::string>{"out.fifo"});
}

// A checkpoint's bytes as the format has them (master/files/checkpoint.h), with n parameters and k
// optimizer state vectors, each float its index.
std::string CheckpointBytes(uint64_t n, uint32_t k) {
  const std::string optimizer = "adam";
  std::string s(kCheckpointMagic, sizeof kCheckpointMagic);
  AppendRaw<uint32_t>(&s, kCheckpointVersion);
  AppendRaw<uint32_t>(&s, 0);     // sync
  AppendRaw<int64_t>(&s, 7);      // step
  AppendRaw<uint64_t>(&s, 1234);  // fingerprint
  AppendRaw<uint64_t>(&s, n);
  AppendRaw<uint32_t>(&s, k);
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(optimizer.size()));
  s += optimizer;
  for (uint64_t i = 0; i < n * (1 + k); ++i) AppendRaw<float>(&s, static_cast<float>(i));
  AppendRaw<uint32_t>(&s, Crc32(s.data(), s.size()));
  return s;
}

TEST(CheckpointDecodeTest, ReadsWhatTheFormatSays) {
  Checkpoint c;
  const Status s = DecodeCheckpoint(CheckpointBytes(3, 2), "c.ckpt", &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.step, 7);
  EXPECT_EQ(c.fingerprint, 1234u);
  EXPECT_EQ(c.optimizer, "adam");
  EXPECT_EQ(c.params, (std::vector<float>{0, 1, 2}));
  ASSERT_EQ(c.states.size(), 2u);
  EXPECT_EQ(c.states[1], (std::vector<float>{6, 7, 8}));
}

// No parameters (and empty state vectors): nothing is copied into the empty vectors, whose
// data() is null (a copy of 0 bytes to null is undefined; the sanitizer builds report it).
TEST(CheckpointDecodeTest, NoParametersDecodeToEmptyVectors) {
  for (uint32_t k : {0u, 2u}) {
    Checkpoint c;
    const Status s = DecodeCheckpoint(CheckpointBytes(0, k), "c.ckpt", &c);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(c.params.empty());
    ASSERT_EQ(c.states.size(), k);
    for (const auto& v : c.states) EXPECT_TRUE(v.empty());
  }
}

TEST(CheckpointDecodeTest, DamageIsNamedWithThePath) {
  std::string b = CheckpointBytes(3, 1);
  b[60] ^= 1;  // in W
  Checkpoint c;
  const Status s = DecodeCheckpoint(b, "c.ckpt", &c);
  EXPECT_EQ(s.message(), "c.ckpt: not a usable checkpoint: checksum mismatch (the file is damaged)");
}

// A checkpoint's sizes are checked the same way: its header's parameter and state counts
// against the file's length, before a vector is made.
TEST(CheckpointDecodeTest, DeclaredSizesAreCheckedAgainstTheFileBeforeAllocating) {
  std::string b = CheckpointBytes(3, 1);
  const uint64_t n = uint64_t{1} << 28;
  std::memcpy(b.data() + 32, &n, sizeof n);
  test::LargestAllocation probe;
  Checkpoint c;
  const Status s = DecodeCheckpoint(b, "c.ckpt", &c);
  EXPECT_EQ(s.message(), "c.ckpt: not a usable checkpoint: cut short (truncated): its header "
                         "declares 268435456 parameters, 1 optimizer state vector and a 4-byte "
                         "optimizer name, 2147483652 bytes after the header; the file holds 28");
  EXPECT_LE(probe.bytes(), size_t{64} << 10);
}

}  // namespace
}  // namespace shmtrain
