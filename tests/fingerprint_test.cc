// The run configuration's fingerprint and the worker's one reading of its model. The master
// creates the segment from a whole configuration and Segment::Create seals its fingerprint; a
// worker attaches (the fingerprint checked: a configuration changed after Create is refused),
// then reads the model once (worker::ReadRunModel) and bounds what it reads by the model's
// counts, since a fingerprint anyone can compute is no signature.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/crc32.h"
#include "gtest/gtest.h"
#include "nn/layer.h"
#include "shm/layout.h"
#include "shm/segment.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"
#include "tests/parabola_layout.h"
#include "tests/proc_util.h"
#include "worker/run_model.h"

namespace shmtrain {
namespace {

using shm::Header;
using shm::Segment;

constexpr std::chrono::milliseconds kWorkerTimeout{60'000};

std::string Bytes(const Segment& s) {
  return std::string(s.base(), s.size());
}

// Worker 0 of seg, started by this process (the header's master): its exit, stderr and
// whether the segment is as it was (a refusing worker writes nothing).
test::ProcResult RunWorker(const Segment& seg, bool* unchanged) {
  const std::string before = Bytes(seg);
  test::ProcResult r =
      test::RunProcess({SHMTRAIN_WORKER_BIN, seg.name(), "0", "0"}, kWorkerTimeout);
  *unchanged = Bytes(seg) == before;
  return r;
}

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != s.npos;
}

// A running checksum goes on through an empty buffer, a null one too (an empty vector's data()):
// zlib answers a null buffer with its initial value, which dropped what was summed before it.
TEST(Fingerprint, AnEmptyBufferLeavesTheRunningChecksum) {
  const std::string bytes = "the parameters";
  const uint32_t crc = Crc32(bytes.data(), bytes.size());
  EXPECT_EQ(Crc32(nullptr, 0, crc), crc);
  EXPECT_EQ(Crc32(bytes.data(), 0, crc), crc);
  EXPECT_NE(Crc32(nullptr, 0, crc), Crc32(nullptr, 0, Crc32("other", 5)));
}

TEST(Fingerprint, CreateSealsTheConfigItWrites) {
  Header proto = test::ParabolaLayout(Mode::kSync, 2, 0);
  proto.config.first_step = 4;  // written after the layout: Create seals what it is given
  Segment seg;
  ASSERT_TRUE(Segment::Create(shm::MakeSegmentName(), proto, &seg).ok());
  EXPECT_EQ(seg.header()->config_fingerprint, shm::ConfigFingerprint(proto.config));
  Segment attached;
  const shm::SegmentCheck check = Segment::Attach(seg.name(), &attached);
  EXPECT_TRUE(check.ok()) << check.status.message();
}

TEST(Fingerprint, EveryByteOfTheConfigCounts) {
  const Header h = test::ParabolaLayout(Mode::kSync, 2, 0);
  const uint64_t sealed = shm::ConfigFingerprint(h.config);
  for (size_t i = 0; i < sizeof(shm::RunConfig); i += 97) {
    shm::RunConfig c = h.config;
    reinterpret_cast<unsigned char*>(&c)[i] ^= 1;
    EXPECT_NE(shm::ConfigFingerprint(c), sealed) << "byte " << i;
  }
}

// A byte of the configuration flipped after Create (a stray write, damage): Attach refuses the
// segment, naming the fingerprint, and a worker exits kWorkerBadLayout without writing.
TEST(Fingerprint, AConfigChangedAfterCreateIsRefused) {
  Segment seg;
  ASSERT_TRUE(
      Segment::Create(shm::MakeSegmentName(), test::ParabolaLayout(Mode::kSync, 2, 0), &seg).ok());
  seg.mutable_header()->config.total_steps ^= 1;
  Segment attached;
  const shm::SegmentCheck check = Segment::Attach(seg.name(), &attached);
  EXPECT_EQ(check.worker_exit, kWorkerBadLayout);
  EXPECT_EQ(check.status.code(), Status::Code::kData);
  const std::string& why = check.status.message();
  EXPECT_TRUE(Has(why, "segment " + seg.name() + ": run configuration fingerprint 0x")) << why;
  EXPECT_TRUE(Has(why, "does not match its bytes' (0x")) << why;
  EXPECT_TRUE(Has(why, "the segment's configuration was changed or damaged after it was made"))
      << why;
  EXPECT_FALSE(attached.valid());
  bool unchanged = false;
  const test::ProcResult r = RunWorker(seg, &unchanged);
  EXPECT_TRUE(test::ExitedWith(r, kWorkerBadLayout)) << r.Describe();
  EXPECT_TRUE(Has(r.err, "run configuration fingerprint")) << r.err;
  EXPECT_TRUE(unchanged) << "the worker wrote into a segment it refused";
  // The same byte back: the same configuration, accepted again.
  seg.mutable_header()->config.total_steps ^= 1;
  EXPECT_TRUE(Segment::Attach(seg.name(), &attached).ok());
}

// A header made by hand with its fingerprint right but a parameter count not the model's:
// every region is laid out for that count, which the worker's loops would read as the model's
// vector. The worker's read of its model refuses it (kWorkerBadLayout), without an abort.
TEST(Fingerprint, ACountNotTheModelsIsRefusedByTheWorkersRead) {
  for (const uint64_t wrong : {uint64_t{0}, uint64_t{15}, uint64_t{17}, uint64_t{1} << 20}) {
    SCOPED_TRACE("param_count " + std::to_string(wrong));
    Header h = test::ParabolaLayout(Mode::kSync, 2, 0);
    h.config.param_count = wrong;
    ASSERT_TRUE(shm::ComputeLayout(&h));
    worker::RunModel model;
    const Status read = worker::ReadRunModel(h.config, &model);
    EXPECT_EQ(read.code(), Status::Code::kData);
    EXPECT_EQ(read.message(),
              "param_count " + std::to_string(wrong) + " is not the layers' count (16)");
    Segment seg;
    ASSERT_TRUE(Segment::Create(shm::MakeSegmentName(), h, &seg).ok());
    Segment attached;
    ASSERT_TRUE(Segment::Attach(seg.name(), &attached).ok()) << "the fingerprint is right";
    bool unchanged = false;
    const test::ProcResult r = RunWorker(seg, &unchanged);
    EXPECT_TRUE(test::ExitedWith(r, kWorkerBadLayout)) << r.Describe();
    EXPECT_TRUE(Has(r.err, "run configuration: " + read.message())) << r.err;
    EXPECT_TRUE(unchanged) << "the worker wrote into a segment it refused";
  }
}

TEST(ReadRunModel, ReadsTheModelAndItsShapesOnce) {
  const Header h = test::ParabolaLayout(Mode::kSync, 2, 0);
  worker::RunModel model;
  ASSERT_TRUE(worker::ReadRunModel(h.config, &model).ok());
  EXPECT_EQ(nn::ModelText(model.spec.layers), "linear(5),tanh,linear(1)");
  EXPECT_EQ(model.spec.input, (Shape{1, 1, 1}));
  EXPECT_EQ(model.spec.loss, Loss::kMse);
  ASSERT_EQ(model.shapes.size(), 3u);
  EXPECT_EQ(model.shapes[0], (Shape{5, 1, 1}));
  EXPECT_EQ(model.shapes[2], (Shape{1, 1, 1}));
  Header bad = h;
  bad.config.loss = 7;
  EXPECT_EQ(worker::ReadRunModel(bad.config, &model).message(), "loss 7");
}

// The segment's layout check (shm::CheckRunConfig) reads no model; the worker's read of the
// model does, each on its own floor.
TEST(ReadRunModel, TheSegmentsLayoutCheckReadsNoModel) {
  shm::Header h = test::ParabolaLayout(Mode::kSync, 2, 0);
  worker::RunModel model;
  ASSERT_TRUE(shm::CheckRunConfig(h.config).ok());
  ASSERT_TRUE(worker::ReadRunModel(h.config, &model).ok());
  std::snprintf(h.config.model, sizeof h.config.model, "%s", "linear(5),tanx,linear(1)");
  EXPECT_TRUE(shm::CheckRunConfig(h.config).ok()) << "the layout does not depend on the text";
  EXPECT_EQ(worker::ReadRunModel(h.config, &model).message(),
            "model: layer 2 'tanx': unknown layer 'tanx' (layers: " +
                std::string("linear, conv2d, maxpool2d, avgpool2d, ") +
                "adaptiveavgpool2d, batchnorm2d, batchnorm1d, flatten, "
                "relu, tanh, sigmoid, dropout, residual)");
}

}  // namespace
}  // namespace shmtrain
