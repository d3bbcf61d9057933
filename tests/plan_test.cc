// A run's start resolved once (master/plan/): what the resolved value holds for a model, the
// refusals of a model that does not resolve (the same messages and exit code wherever its input
// comes from), and the floors the resolution keeps: core/ and shm/ include nothing above them,
// and the public headers carry no type of data/.

#include <cstdint>
#include <string>
#include <vector>

#include "data/pipeline.h"
#include "gtest/gtest.h"
#include "master/files/checkpoint.h"
#include "master/files/model_file.h"
#include "master/kinds/kind.h"
#include "master/log/log.h"
#include "master/plan/resolve.h"
#include "master/plan/segment_plan.h"
#include "master/plan/validate.h"
#include "nn/layer.h"
#include "nn/net.h"
#include "nn/optimizer.h"
#include "shmtrain/options.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

constexpr test::milliseconds kTimeout{120'000};

// The run's kind (sync on one host) and a log no test reads.
const master::RunKind& Sync() {
  return master::KindOf(Mode::kSync, 1);
}
master::Logger& Log() {
  static master::Logger log(LogFormat::kJson, /*progress=*/false);
  return log;
}

// --example blobs of 30 rows of 4 features, 3 classes, with `model`.
TrainOptions Blobs(const std::string& model) {
  TrainOptions o;
  o.example = "blobs";
  o.example_rows = 30;
  o.example_features = 4;
  o.model.loss = Loss::kXent;
  o.model_text = model;
  o.lr = 0.1;
  o.steps = 1;
  o.batch = 10;
  EXPECT_TRUE(plan::BuildModel(&o).ok());
  EXPECT_TRUE(plan::Validate(o).ok()) << plan::Validate(o).message();
  return o;
}

TEST(Resolve, HoldsTheModelItsShapesCountsMemoryAndTheData) {
  TrainOptions o = Blobs("linear(8),batchnorm1d,relu,linear(3)");
  data::RunData rd;
  plan::Resolved r;
  const Status s = plan::Resolve(o, Sync(), Log(), &rd, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.model.spec, o.model) << "the options' model, its input the example's";
  EXPECT_EQ(r.model.spec.input, (Shape{4, 1, 1}));
  EXPECT_EQ(r.model.shapes, (std::vector<Shape>{{8, 1, 1}, {8, 1, 1}, {8, 1, 1}, {3, 1, 1}}));
  EXPECT_EQ(r.model.outputs, 3);
  // linear(8) on 4: 32 + 8; batchnorm1d(8): weight, bias, running mean and variance, the
  // batches tracked: 4 x 8 + 1; linear(3) on 8: 24 + 3.
  ASSERT_TRUE(r.model.param_count.has_value());
  EXPECT_EQ(*r.model.param_count, 40u + 33u + 27u);
  EXPECT_EQ(*r.model.param_count, o.model.ParamCount());
  EXPECT_EQ(r.model.stats_count, 4 * 8 + 1);
  EXPECT_EQ(r.model.stats_count, nn::StatsCount(o.model));
  EXPECT_EQ(r.worker_batch_rows, plan::WorkerBatchRows(Sync(), o, 30));
  EXPECT_EQ(r.worker_pass_bytes, nn::PassBytes(o.model, r.worker_batch_rows, /*backward=*/true));
  EXPECT_GT(r.worker_pass_bytes, 0u);
  EXPECT_EQ(r.data.source, "example blobs");
  EXPECT_EQ(r.data.rows, 30);
  EXPECT_EQ(r.data.features, 4);
  EXPECT_EQ(r.data.val_rows, 0);
  EXPECT_EQ(r.data.classes, 3);
  // The run planned from them: its length, this host's share, the optimizer, and the segment's
  // header, whose counts and model are the resolved model's.
  EXPECT_EQ(r.total_steps, 1);
  EXPECT_EQ(r.host.steps, 1);
  EXPECT_EQ(r.optimizer, nn::Describe(r.optim));
  EXPECT_EQ(r.optim.lr, 0.1);
  EXPECT_NE(r.fingerprint, 0u);
  const shm::RunConfig& c = r.header.config;
  EXPECT_EQ(c.param_count, *r.model.param_count);
  EXPECT_EQ(c.stats_count, static_cast<uint64_t>(r.model.stats_count));
  EXPECT_EQ(std::string(c.model), r.model.spec.Text());
  EXPECT_EQ((Shape{c.input_shape[0], c.input_shape[1], c.input_shape[2]}), r.model.spec.input);
  EXPECT_EQ(c.rows, 30);
  EXPECT_EQ(c.features, 4);
  EXPECT_EQ(c.total_steps, 1);
  EXPECT_GT(r.header.total_size, 0u);
  // The outputs' room: no --save, and a checkpoint of the parameters (sgd keeps no state).
  EXPECT_EQ(r.model_bytes, 0u);
  EXPECT_EQ(r.checkpoint_bytes,
            CheckpointSize(static_cast<int64_t>(*r.model.param_count), 0, r.optimizer));
}

// --save: the model file's size is known, read back through its decoder, before any training.
TEST(Resolve, SizesTheModelFileItWillSave) {
  test::TempDir dir;
  TrainOptions o = Blobs("linear(8),relu,linear(3)");
  o.save_path = dir.File("m.bin");
  data::RunData rd;
  plan::Resolved r;
  ASSERT_TRUE(plan::Resolve(o, Sync(), Log(), &rd, &r).ok());
  const std::string bytes = EncodeModel(
      {r.model.spec, rd.norm, rd.train.classes, std::vector<float>(*r.model.param_count)});
  EXPECT_EQ(r.model_bytes, bytes.size());
}

// A --model whose input is the data's rows is resolved on their width, once they are read.
TEST(Resolve, AModelOnTheDatasWidthIsResolvedOnIt) {
  test::TempDir dir;
  TrainOptions o;
  o.data_path = dir.Write("d.csv", "1,2,3,0\n4,5,6,1\n7,8,9,0\n1,1,1,1\n");
  o.model.loss = Loss::kXent;
  o.model_text = "linear(5),tanh,linear(2)";
  o.lr = 0.1;
  o.steps = 1;
  ASSERT_TRUE(plan::BuildModel(&o).ok());
  data::RunData rd;
  plan::Resolved r;
  const Status s = plan::Resolve(o, Sync(), Log(), &rd, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.model.spec.input, (Shape{3, 1, 1}));
  EXPECT_EQ(r.model.spec, o.model);
  EXPECT_EQ(r.model.shapes, (std::vector<Shape>{{5, 1, 1}, {5, 1, 1}, {2, 1, 1}}));
  EXPECT_EQ(r.model.param_count, std::optional<uint64_t>(3 * 5 + 5 + 5 * 2 + 2));
  EXPECT_EQ(r.model.stats_count, 0);
  EXPECT_EQ(r.data.rows, 4);
  EXPECT_EQ(r.data.classes, 2);
}

TEST(Resolve, RefusesAModelThatDoesNotResolveAsTheDataPipelineDid) {
  TrainOptions o = Blobs("linear(1)");
  data::RunData rd;
  plan::Resolved r;
  const Status s = plan::Resolve(o, Sync(), Log(), &rd, &r);
  EXPECT_EQ(s.code(), Status::Code::kUsage);
  EXPECT_EQ(s.message(),
            "--model: loss xent needs an output per class (at least 2), the model "
            "has 1");
  EXPECT_TRUE(r.model.shapes.empty()) << "nothing resolved";
}

// The process: a model that does not resolve on its input is refused once, exit 2, with the
// message it always had, wherever the input comes from (the example, the data's width).
TEST(Resolve, ABadModelIsRefusedOnceWithItsMessage) {
  test::TempDir dir;
  const std::string csv = dir.Write("x.csv", "1,2,0\n3,4,1\n5,6,0\n7,8,1\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--example", "blobs", "--model", "linear(1)"},
            "shmtrain: error: --model: loss xent needs an output per class (at least 2), the "
            "model has 1\n"},
           {{"--data", csv, "--model", "conv2d(4,3),flatten,linear(2)"},
            "shmtrain: error: --model: conv2d #1 (layer 1): input 2 has no image shape "
            "(--input-shape C,H,W gives flat data one)\n"},
       }) {
    std::vector<std::string> a = {"train"};
    a.insert(a.end(), c.args.begin(), c.args.end());
    for (const char* more : {"--loss", "xent", "--lr", "0.1", "--steps", "1"}) {
      a.push_back(more);
    }
    const test::ProcResult p = test::Shmtrain(a, kTimeout);
    EXPECT_TRUE(test::ExitedWith(p, 2)) << p.Describe();
    EXPECT_EQ(p.err, c.message);
  }
}

}  // namespace
}  // namespace shmtrain
