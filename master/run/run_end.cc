#include "master/run/run_end.h"

#include <string>
#include <utility>

#include "master/files/model_file.h"
#include "master/run/run_summary.h"
#include "nn/metrics.h"

namespace shmtrain::master {

void FinalModel::Collect(RunEnd& end) {
  if (!end.status.ok()) return;
  const std::string cause = "; " + divergence_.At(end.end_step - 1) + "; no model was saved";
  if (!AllFinite(end.params)) {
    end.status = Status::Diverged("training diverged: the parameters after step " +
                                  std::to_string(end.end_step) +
                                  " are not finite (NaN or infinite)" + cause);
    return;
  }
  const nn::Metrics train =
      nn::Evaluate(rd_.model, end.params.data(), end.seg.x(), end.seg.y(), rd_.train.rows);
  end.summary.final_loss = train.loss;
  if (!train.finite()) {
    end.status = Status::Diverged("training diverged: the model after step " +
                                  std::to_string(end.end_step) +
                                  " gives outputs that are not finite (NaN or infinite) in " +
                                  train.nonfinite.Text() + " of the training rows" + cause);
  }
}

void FinalModel::Save(RunEnd& end) {
  if (!end.status.ok() || o_.save_path.empty()) return;
  Model m{o_.model, rd_.norm, rd_.train.classes, std::move(end.params)};
  end.status = WriteFileDurably(o_.save_path, EncodeModel(m), {.reservation = reserved_});
  end.params = std::move(m.params);
}

void SummaryLine::Report(RunEnd& end) {
  if (!end.status.ok()) return;
  RunSummary& s = end.summary;
  s.rule = o_.rule;
  s.workers = o_.workers;
  s.first_step = first_;
  s.end_step = end.end_step;
  s.wall_s = (end.end_ns - t_start_) / 1e9;
  ReadWorkerCounters(end.seg, &s);
  s.hosts = o_.host_count;
  kind_.AddTotals(&s, o_.batch > 0 ? o_.batch : rows_);
  LogSummary(kind_, s, log_);
}

}  // namespace shmtrain::master
