// --augment (data/augment.h): AugmentRow against torchvision's definitions written out here
// (zero-pad, take the window, reverse the columns, one after the other), the draws' spread,
// and runs: P workers train what one trains, async draws what sync draws, refusals that name
// the flag, and the master's own passes (validation, eval, predict) that never augment.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "data/augment.h"
#include "gtest/gtest.h"
#include "nn/rng.h"
#include "tests/proc_util.h"
#include "tests/reference.h"

namespace shmtrain {
namespace {

using data::AugmentDraw;
using data::AugmentSpec;
using test::ProcResult;

// ---- the reference: the transforms one after the other on a c x h x w image.
using Image = std::vector<float>;

// RandomCrop(size=(h, w), padding=p) at window (dx, dy): F.pad with zeros, then the crop.
Image RefCrop(const Image& in, Shape s, int64_t p, int64_t dx, int64_t dy) {
  const int64_t ph = s.h + 2 * p, pw = s.w + 2 * p;
  Image padded(static_cast<size_t>(s.c * ph * pw), 0.0f);
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t y = 0; y < s.h; ++y)
      for (int64_t x = 0; x < s.w; ++x)
        padded[(c * ph + y + p) * pw + x + p] = in[(c * s.h + y) * s.w + x];
  Image out(in.size());
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t y = 0; y < s.h; ++y)
      for (int64_t x = 0; x < s.w; ++x)
        out[(c * s.h + y) * s.w + x] = padded[(c * ph + y + dy) * pw + x + dx];
  return out;
}

// RandomHorizontalFlip when its coin says so: F.hflip reverses the last dimension.
Image RefFlip(const Image& in, Shape s) {
  Image out(in.size());
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t y = 0; y < s.h; ++y)
      for (int64_t x = 0; x < s.w; ++x)
        out[(c * s.h + y) * s.w + x] = in[(c * s.h + y) * s.w + (s.w - 1 - x)];
  return out;
}

Image RefAugment(const AugmentSpec& spec, const AugmentDraw& d, Shape s, Image img) {
  for (int i = 0; i < spec.count; ++i) {
    const data::AugmentItem& it = spec.items[i];
    if (it.kind == data::AugmentKind::kCrop) img = RefCrop(img, s, it.pad, d.dx, d.dy);
    if (it.kind == data::AugmentKind::kHflip && d.flip) img = RefFlip(img, s);
  }
  return img;
}

AugmentSpec Parsed(const std::string& text) {
  AugmentSpec s;
  const Status st = data::ParseAugment(text, &s);
  EXPECT_TRUE(st.ok()) << text << ": " << st.message();
  return s;
}

// Every window and every coin, in both orders, on images that are not square (a swapped
// height and width shows) with distinct values (1..n: a zero is only ever padding).
TEST(Augment, MatchesTorchvisionAtEveryOffsetAndFlip) {
  for (const Shape s : {Shape{3, 5, 7}, Shape{1, 6, 4}, Shape{2, 2, 2}}) {
    Image img(static_cast<size_t>(s.Size()));
    for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>(i + 1);
    const int64_t limit = std::min(s.h, s.w) - 1;
    for (int64_t p = 1; p <= limit; ++p) {
      const std::string crop = "crop=" + std::to_string(p);
      for (const std::string& text : {crop, std::string("hflip"), crop + ",hflip", "hflip," + crop}) {
        const AugmentSpec spec = Parsed(text);
        const bool has_crop = text.find("crop") != std::string::npos;
        const int64_t span = has_crop ? 2 * p + 1 : 1;
        for (int64_t dy = 0; dy < span; ++dy)
          for (int64_t dx = 0; dx < span; ++dx)
            for (const bool flip : {false, true}) {
              const AugmentDraw d{dx, dy, flip};
              Image got(img.size(), -1.0f);
              data::ApplyAugment(spec, d, s, img.data(), got.data());
              ASSERT_EQ(got, RefAugment(spec, d, s, img))
                  << text << " on " << s.Text() << " at dx " << dx << ", dy " << dy
                  << (flip ? ", flipped" : "");
            }
      }
    }
  }
}

// AugmentRow is the draw of (seed, epoch, row) applied: the same arguments, the same image,
// and another epoch or seed draws anew.
TEST(Augment, RowIsItsDrawApplied) {
  const Shape s{3, 8, 8};
  const AugmentSpec spec = Parsed("crop=4,hflip");
  Image img(static_cast<size_t>(s.Size()));
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>(i % 17) + 0.5f;
  int moved_by_epoch = 0, moved_by_seed = 0;
  for (int64_t row = 0; row < 50; ++row) {
    Image a(img.size()), b(img.size());
    data::AugmentRow(spec, 9, 3, row, s, img.data(), a.data());
    data::AugmentRow(spec, 9, 3, row, s, img.data(), b.data());
    ASSERT_EQ(a, b);
    EXPECT_EQ(a, RefAugment(spec, data::DrawAugment(spec, 9, 3, row), s, img));
    const AugmentDraw d = data::DrawAugment(spec, 9, 3, row);
    const AugmentDraw e = data::DrawAugment(spec, 9, 4, row);
    const AugmentDraw f = data::DrawAugment(spec, 10, 3, row);
    moved_by_epoch += d.dx != e.dx || d.dy != e.dy || d.flip != e.flip;
    moved_by_seed += d.dx != f.dx || d.dy != f.dy || d.flip != f.flip;
  }
  EXPECT_GE(moved_by_epoch, 45);
  EXPECT_GE(moved_by_seed, 45);
}

// Over many rows every offset comes about equally often (each of dx, dy takes its 9 values
// about n / 9 times, each pair about n / 81 times) and the flip about half the time. The
// bounds are 6 standard deviations of the binomial counts.
TEST(Augment, DrawsCoverEveryOffsetUniformlyAndFlipHalf) {
  const AugmentSpec spec = Parsed("crop=4,hflip");
  constexpr int64_t kRows = 81 * 400;
  std::vector<int64_t> dx(9), dy(9), pair(81);
  int64_t flips = 0;
  for (int64_t row = 0; row < kRows; ++row) {
    const AugmentDraw d = data::DrawAugment(spec, 1, 2, row);
    ASSERT_TRUE(d.dx >= 0 && d.dx <= 8 && d.dy >= 0 && d.dy <= 8) << d.dx << "," << d.dy;
    ++dx[d.dx];
    ++dy[d.dy];
    ++pair[d.dy * 9 + d.dx];
    flips += d.flip;
  }
  const auto bound = [](double n, double q) { return 6 * std::sqrt(n * q * (1 - q)); };
  for (int k = 0; k < 9; ++k) {
    EXPECT_NEAR(dx[k], kRows / 9.0, bound(kRows, 1 / 9.0)) << "dx " << k;
    EXPECT_NEAR(dy[k], kRows / 9.0, bound(kRows, 1 / 9.0)) << "dy " << k;
  }
  for (int k = 0; k < 81; ++k) EXPECT_NEAR(pair[k], 400, bound(kRows, 1 / 81.0)) << "pair " << k;
  EXPECT_NEAR(flips, kRows / 2.0, bound(kRows, 0.5));
}

TEST(Augment, ParsesItsItemsAndRefusesOthers) {
  EXPECT_EQ(Parsed("crop=4,hflip").Text(), "crop=4,hflip");
  EXPECT_EQ(Parsed("hflip,crop=2").Text(), "hflip,crop=2");
  const std::map<std::string, std::string> refused = {
      {"", "needs items"},
      {"crop", "crop needs its padding"},
      {"crop=0", "crop needs its padding"},
      {"crop=x", "crop needs its padding"},
      {"crop=2x", "crop needs its padding"},
      {"hflip=1", "hflip takes no value"},
      {"rotate=3", "unknown item 'rotate=3' (known: crop=P, hflip)"},
      {"hflip,", "unknown item ''"},
      {"hflip,hflip", "hflip is given twice"},
      {"crop=2,hflip,crop=3", "crop is given twice"},
  };
  for (const auto& [text, says] : refused) {
    AugmentSpec s;
    const Status st = data::ParseAugment(text, &s);
    EXPECT_EQ(st.code(), Status::Code::kUsage) << "'" << text << "'";
    EXPECT_NE(st.message().find(says), std::string::npos) << "'" << text << "': " << st.message();
  }
  // The segment's words give the spec back; words that are not items are refused.
  const AugmentSpec spec = Parsed("hflip,crop=3");
  const auto w = spec.Encode();
  const uint32_t words[4] = {w[0], w[1], w[2], w[3]};
  AugmentSpec back;
  ASSERT_TRUE(AugmentSpec::Decode(words, &back).ok());
  EXPECT_EQ(back.Text(), "hflip,crop=3");
  for (const auto& bad : {std::array<uint32_t, 4>{2, 2, 0, 0}, {7, 0, 0, 0}, {1, 0, 0, 0},
                          {0, 2, 0, 0}, {2 | 1 << 8, 0, 0, 0}}) {
    const uint32_t b[4] = {bad[0], bad[1], bad[2], bad[3]};
    EXPECT_FALSE(AugmentSpec::Decode(b, &back).ok()) << bad[0] << "," << bad[1];
  }
}

// Images only, and a padding that leaves every window part of the image.
TEST(Augment, ChecksTheModelsInput) {
  EXPECT_TRUE(data::CheckAugment(Parsed("crop=7,hflip"), Shape{3, 8, 9}).ok());
  const Status big = data::CheckAugment(Parsed("crop=8"), Shape{3, 8, 9});
  EXPECT_NE(big.message().find("the padding must be 1..7 (min(H, W) - 1"), std::string::npos)
      << big.message();
  const Status flat = data::CheckAugment(Parsed("hflip"), Shape{16, 1, 1});
  EXPECT_NE(flat.message().find("hflip augments images, and the model's input 16 is not one"),
            std::string::npos)
      << flat.message();
  EXPECT_FALSE(data::CheckAugment(Parsed("hflip"), Shape{1, 1, 8}).ok());
  EXPECT_TRUE(data::CheckAugment(Parsed("hflip"), Shape{1, 2, 2}).ok());
}

// ---- runs.

constexpr test::milliseconds kTimeout{180'000};

ProcResult Shm(std::vector<std::string> args) { return test::Shmtrain(std::move(args), kTimeout); }

// `rows` images of 3x8x8 in 3 classes (a bright row in channel 0, a column in channel 1, the
// diagonal in channel 2, with noise), as CSV rows of 192 values in (c, h, w) order and the
// class.
std::string ImagesCsv(int rows, uint64_t seed) {
  nn::Rng rng(seed);
  std::string s;
  char buf[32];
  for (int i = 0; i < rows; ++i) {
    const int k = i % 3, at = static_cast<int>(rng.Below(8));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 8; ++x) {
          const bool on = c == k && (k == 0 ? y == at : k == 1 ? x == at : x == y);
          std::snprintf(buf, sizeof buf, "%.3f,", (on ? 0.8 : 0.1) + 0.1 * rng.Uniform());
          s += buf;
        }
    s += std::to_string(k) + "\n";
  }
  return s;
}

constexpr const char* kModel = "conv2d(4,3,padding=1),relu,maxpool2d(2),flatten,linear(3)";

std::vector<std::string> Train(const std::string& data, const std::string& mode, int workers,
                               const std::string& batch, const std::string& augment,
                               const std::string& save) {
  std::vector<std::string> a = {"train", "--data", data, "--input-shape", "3,8,8", "--model",
                                kModel, "--loss", "xent", "--mode", mode, "--workers",
                                std::to_string(workers), "--lr", "0.2", "--epochs", "12",
                                "--seed", "4", "--save", save, "--log-format", "json"};
  if (batch != "0") a.insert(a.end(), {"--batch", batch});
  if (mode == "async") a.insert(a.end(), {"--rule", "asgd"});
  if (!augment.empty()) a.insert(a.end(), {"--augment", augment});
  return a;
}

std::vector<double> Params(const std::string& path) {
  const Model m = test::LoadSaved(path);
  return {m.params.begin(), m.params.end()};
}

// Sync: P = 3 trains what P = 1 trains (to float rounding, as every P-equivalence of the
// project), full batch and minibatch; each worker augments its share as one worker augments
// every row. Async with one worker and plain ASGD is the sync run's SGD: its minibatch u
// draws what sync step u draws. And the augmentation is really applied: without it the run
// ends elsewhere.
TEST(AugmentRun, PWorkersAndAsyncTrainWhatOneSyncWorkerTrains) {
  test::TempDir dir;
  const std::string data = dir.Write("images.csv", ImagesCsv(48, 7));
  for (const std::string batch : {"0", "16"}) {
    SCOPED_TRACE("--batch " + batch);
    const auto run = [&](const std::string& mode, int workers, const std::string& augment) {
      const std::string file = dir.File(mode + std::to_string(workers) + augment + batch + ".model");
      const ProcResult r = Shm(Train(data, mode, workers, batch, augment, file));
      EXPECT_EQ(r.exit_code, 0) << r.Describe();
      return Params(file);
    };
    const std::vector<double> one = run("sync", 1, "crop=2,hflip");
    ASSERT_FALSE(one.empty());
    const double three = test::MaxScaledDiff(run("sync", 3, "crop=2,hflip"), one);
    std::printf("[ augment ] --batch %s: P = 3 against P = 1: %.3g\n", batch.c_str(), three);
    EXPECT_LE(three, test::kRefTol);
    if (batch != "0") {
      const double async = test::MaxScaledDiff(run("async", 1, "crop=2,hflip"), one);
      std::printf("[ augment ] --batch %s: async P = 1 against sync: %.3g\n", batch.c_str(), async);
      EXPECT_LE(async, test::kRefTol);
    }
    const double plain = test::MaxScaledDiff(run("sync", 1, ""), one);
    EXPECT_GT(plain, 100 * test::kRefTol) << "--augment trained what a run without it trains";
  }
}

bool Says(const ProcResult& r, const std::string& what) {
  return r.err.find(what) != std::string::npos;
}

// A model whose input is not an image refuses --augment, naming the flag, before any worker
// starts: --layers, a flat example, a --model on flat CSV rows; and a padding past the image.
TEST(AugmentRun, RefusedWhereTheInputIsNoImage) {
  test::TempDir dir;
  const std::string data = dir.Write("images.csv", ImagesCsv(12, 3));
  const std::vector<std::string> base = {"train", "--lr",         "0.1", "--steps",
                                         "3",     "--log-format", "json"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--example", "parabola", "--layers", "1,5,1", "--augment", "hflip"},
       "--augment: augments images, and --layers' input is a flat row"},
      {{"--example", "blobs", "--loss", "xent", "--model", "linear(4)", "--augment", "crop=1"},
       "--augment: augments images, and the rows of --example blobs are flat"},
      {{"--data", data, "--loss", "xent", "--model", "linear(3)", "--augment", "hflip"},
       "--augment: the workers would refuse this run: hflip augments images, and the model's "
       "input 192 is not one"},
      {{"--data", data, "--loss", "xent", "--input-shape", "3,8,8", "--model", kModel,
        "--augment", "crop=8"},
       "--augment: crop=8 on images of 3x8x8: the padding must be 1..7"},
      {{"--data", data, "--loss", "xent", "--input-shape", "3,8,8", "--model", kModel,
        "--augment", "hflip,hflip"},
       "--augment: hflip is given twice"},
  };
  for (const auto& [flags, says] : cases) {
    std::vector<std::string> a = base;
    a.insert(a.end(), flags.begin(), flags.end());
    const ProcResult r = Shm(a);
    EXPECT_EQ(r.exit_code, 2) << r.Describe();
    EXPECT_TRUE(Says(r, says)) << "want \"" << says << "\":\n" << r.err;
    EXPECT_TRUE(test::StartedWorkers(r.out).empty()) << r.out;
  }
}

// The master's passes read the rows as stored: the run's final loss on its training rows and
// its validation loss are what eval finds on the same files, and --augment is not a flag of
// eval or predict.
TEST(AugmentRun, ValidationEvalAndPredictNeverAugment) {
  test::TempDir dir;
  const std::string train = dir.Write("train.csv", ImagesCsv(36, 5));
  const std::string val = dir.Write("val.csv", ImagesCsv(15, 6));
  std::vector<std::string> a = Train(train, "sync", 2, "12", "crop=3,hflip", dir.File("m.model"));
  a.insert(a.end(), {"--val-data", val});
  const ProcResult r = Shm(a);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const std::string summary = test::SummaryOf(r);
  const auto eval_loss = [&](const std::string& file) -> double {
    const ProcResult e = Shm({"eval", "--model", dir.File("m.model"), "--data", file,
                              "--log-format", "json"});
    EXPECT_EQ(e.exit_code, 0) << e.Describe();
    for (const std::string& line : test::SplitLines(e.out)) {
      if (const auto loss = test::JsonField(line, "loss")) return std::stod(*loss);
    }
    ADD_FAILURE() << "eval printed no loss: " << e.out;
    return NAN;
  };
  EXPECT_NEAR(eval_loss(train), test::Num(summary, "final_loss"), 1e-6) << summary;
  EXPECT_NEAR(eval_loss(val), test::Num(summary, "val_loss"), 1e-6) << summary;
  for (const std::string cmd : {"eval", "predict"}) {
    std::vector<std::string> args = {cmd, "--model", dir.File("m.model"), "--data", val,
                                     "--augment", "hflip"};
    if (cmd == "predict") args.insert(args.end(), {"--out", dir.File("p.csv")});
    const ProcResult e = Shm(args);
    EXPECT_EQ(e.exit_code, 2) << e.Describe();
    EXPECT_TRUE(Says(e, "--augment")) << e.err;
  }
}

}  // namespace
}  // namespace shmtrain
