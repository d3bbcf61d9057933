#include "master/run/zero_steps.h"

#include <string>
#include <utility>
#include <vector>

#include "core/decimal.h"
#include "data/pipeline.h"
#include "master/files/init_from.h"
#include "master/files/model_file.h"
#include "master/files/output_write.h"
#include "master/files/predict.h"
#include "master/plan/segment_plan.h"
#include "master/run/start.h"
#include "nn/metrics.h"

namespace shmtrain::master {

bool IsZeroStepRun(const TrainOptions& o) {
  return o.steps == 0 && o.Given("--steps");
}

Status RunZeroSteps(const TrainOptions& opts, const RunKind& kind, Logger& log) {
  TrainOptions o = opts;
  if (o.host_count > 1) {
    return Status::Usage("--steps 0 saves a model on one host; run it without mpirun");
  }
  OutputLock locks[2];
  if (Status s = CheckOutputPaths(o, locks); !s.ok()) return s;
  data::RunData rd;
  if (Status s = data::PrepareData(o, plan::SizingOf(kind), &rd); !s.ok()) return s;
  WarnSkippedFiles(rd.train, o.data_path, log);
  std::vector<float> params;
  if (Status s = ReadInitFrom(o.init_from_path, rd.model.spec, &params); !s.ok()) return s;
  const nn::Metrics m =
      nn::Evaluate(rd.model, params.data(), rd.train.x.data(), rd.train.y.data(), rd.train.rows);
  if (!m.finite()) {
    return Status::Diverged("--init-from " + o.init_from_path +
                            ": the weights give outputs that are not finite (NaN or infinite) "
                            "in " +
                            m.nonfinite.Text() + " of the training rows; no model was saved");
  }
  Model model{o.model, rd.norm, rd.train.classes, std::move(params)};
  if (Status s = WriteFileDurably(o.save_path, EncodeModel(model)); !s.ok()) return s;
  log.Info("done: 0 steps, loss " + Fmt("%.9g", m.loss) + " on the " +
               std::to_string(rd.train.rows) + " training rows; the weights of " +
               o.init_from_path + " saved to " + o.save_path,
           JsonLine("summary")
               .Int("steps", 0)
               .Num("final_loss", m.loss)
               .Str("init_from", o.init_from_path)
               .Str("save", o.save_path));
  return Status::Ok();
}

}  // namespace shmtrain::master
