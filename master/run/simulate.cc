#include "master/run/simulate.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "data/batch_plan.h"
#include "data/pipeline.h"
#include "master/files/init_from.h"
#include "master/plan/segment_plan.h"
#include "nn/batch_norm.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "nn/update.h"

namespace shmtrain::master {

namespace {

// The data, sized as a real run of the options' kind (async on one host) would be, and
// --init-from's parameters, read once for every simulation.
Status PrepareSimulation(TrainOptions& o, RunData* rd, std::vector<float>* init_from) {
  if (Status s = data::PrepareData(o, plan::SizingOf(KindOf(o.mode, o.host_count)), rd); !s.ok()) {
    return s;
  }
  if (o.init_from_path.empty()) return Status::Ok();
  return ReadInitFrom(o.init_from_path, rd->model.spec, init_from);
}

// w_0: --init-from's parameters, or --init's.
void InitialParams(const TrainOptions& o, const RunData& rd, const std::vector<float>& init_from,
                   float* w) {
  if (o.init_from_path.empty()) {
    nn::InitParams(rd.model, o.init, o.seed, w);
  } else {
    std::copy(init_from.begin(), init_from.end(), w);
  }
}

}  // namespace

SimResult Simulate(const TrainOptions& o, const RunData& rd, int M, AsyncRule rule,
                   const std::vector<float>& init_from) {
  const data::Dataset& d = rd.train;
  const ModelSpec& spec = rd.model.spec;
  const int64_t n = static_cast<int64_t>(rd.model.param_count.value_or(0));
  const int64_t updates = o.TotalSteps(d.rows);
  const int64_t f = d.features;

  nn::RuleParams rp;
  rp.rule = rule;
  rp.lr = o.lr;
  TrainOptions with_rule = o;
  with_rule.rule = rule;
  rp.lambda0 = with_rule.LambdaOrDefault();
  rp.ms_decay = o.ms_decay;
  rp.epsilon = o.epsilon;

  // history[k % M] holds w_k for the last M versions: what each in-flight worker read.
  std::vector<nn::AlignedVector<float>> history(M, nn::AlignedVector<float>(n));
  InitialParams(o, rd, init_from, history[0].data());
  std::vector<nn::AlignedVector<float>> mean_square(M, nn::AlignedVector<float>(n, 0.0f));
  nn::AlignedVector<float> w = history[0], grad(n), bx, by;
  nn::Workspace<float> ws;
  data::BatchPlan plan(d.rows, o.batch, o.seed);
  std::vector<int64_t> idx;
  // A training pass, as a worker's (worker/async_loop.cc): dropout drops, batch norm uses the
  // minibatch's statistics and then moves the running ones by them.
  const std::vector<nn::NormSite> norms = nn::NormSites(spec);
  nn::RecordedStats recorded(spec);
  nn::PassInfo pass;
  pass.train = true;
  pass.seed = o.seed;
  pass.stats = norms.empty() ? nullptr : &recorded;
  for (int64_t u = 0; u < updates; ++u) {
    const int64_t read = std::max<int64_t>(0, u - (M - 1));
    const nn::AlignedVector<float>& w_bak = history[read % M];
    plan.Share(u, 0, 1, &idx);
    const int64_t rows = static_cast<int64_t>(idx.size());
    data::GatherRows(d.x.data(), d.y.data(), f, idx, &bx, &by);
    pass.step = u;
    pass.rows = idx.data();
    nn::LossAndGrad<float>(spec, w_bak.data(), bx.data(), by.data(), rows, grad.data(), ws, pass);
    const float inv = 1.0f / static_cast<float>(rows);
    for (float& g : grad) g *= inv;
    nn::ApplyRule<nn::PlainAccess>(rp, n, w.data(), w_bak.data(), grad.data(),
                                   mean_square[u % M].data());
    nn::AdvanceRunningStats(norms, recorded.data(), w.data(), w.data(), 0, n);
    history[(u + 1) % M] = w;
  }
  SimResult r;
  r.train_loss = nn::Evaluate(rd.model, w.data(), d.x.data(), d.y.data(), d.rows).loss;
  const nn::Metrics v =
      nn::Evaluate(rd.model, w.data(), rd.val.x.data(), rd.val.y.data(), rd.val.rows);
  r.val_loss = v.loss;
  r.val_error = spec.loss == Loss::kXent ? 1 - v.accuracy : v.rmse;
  return r;
}

Status RunSimulate(const TrainOptions& opts, const std::vector<int>& workers, bool compare,
                   Logger& log) {
  TrainOptions o = opts;  // the pipeline sets a --model's input from the data
  RunData rd;
  std::vector<float> init_from;
  if (Status s = PrepareSimulation(o, &rd, &init_from); !s.ok()) return s;
  const bool xent = o.model.loss == Loss::kXent;
  const char* err_name = xent ? "held-out error" : "held-out RMSE";
  // A rule that diverged (its model's training loss is not finite) says so, not "-nan".
  auto cell = [&](const SimResult& r) {
    if (!std::isfinite(r.train_loss)) return std::string("diverged");
    const std::string e = xent ? Fmt("%.2f%%", 100 * r.val_error) : Fmt("%.4g", r.val_error);
    return rd.val.rows > 0 ? e + " / " + Fmt("%.4f", r.train_loss) : Fmt("%.4f", r.train_loss);
  };
  auto emit = [&](const char* rule, int M, const SimResult& r) {
    JsonLine j("simulation");
    j.Str("rule", rule).Int("workers", M).Int("updates", o.TotalSteps(rd.train.rows));
    j.Num("train_loss", r.train_loss);
    if (rd.val.rows > 0) {
      j.Num("val_loss", r.val_loss).Num(xent ? "val_error" : "val_rmse", r.val_error);
    }
    log.JsonOnly(j);
  };

  const std::vector<AsyncRule> rules =
      compare ? std::vector<AsyncRule>{AsyncRule::kAsgd, AsyncRule::kDcAsgdC, AsyncRule::kDcAsgdA}
              : std::vector<AsyncRule>{o.rule};
  std::string table;
  const std::string what =
      rd.val.rows > 0 ? std::string(err_name) + " / training loss" : std::string("training loss");
  table += "simulated async training, " + std::to_string(o.TotalSteps(rd.train.rows)) +
           " updates; each cell: " + what + "\n";
  auto pad = [](std::string s, size_t w) {
    if (s.size() < w) s.resize(w, ' ');
    return s;
  };
  table += pad("rule", 12);
  for (int M : workers) table += pad("M=" + std::to_string(M), 22);
  table += "\n";
  if (compare) {
    const SimResult seq = Simulate(o, rd, 1, AsyncRule::kAsgd, init_from);
    emit("sgd", 1, seq);
    table += pad("sgd (M=1)", 12) + cell(seq) + "\n";
  }
  for (AsyncRule rule : rules) {
    table += pad(ToString(rule), 12);
    for (int M : workers) {
      const SimResult r = Simulate(o, rd, M, rule, init_from);
      emit(ToString(rule), M, r);
      table += pad(cell(r), 22);
    }
    table += "\n";
  }
  log.Text(table);
  return log.stdout_status();
}

}  // namespace shmtrain::master
