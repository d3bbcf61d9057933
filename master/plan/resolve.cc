#include "master/plan/resolve.h"

#include <utility>

#include "nn/net.h"

namespace shmtrain::plan {

Status Resolve(TrainOptions& o, const data::RunSizing& run, data::RunData* rd, Resolved* out) {
  if (Status s = data::PrepareData(o, run, rd); !s.ok()) return s;
  Resolved r;
  r.model = rd->model;
  r.data.source = o.example.empty() ? o.data_path : "example " + o.example;
  r.data.rows = rd->train.rows;
  r.data.features = rd->train.features;
  r.data.val_rows = rd->val.rows;
  r.data.classes = o.model.loss == Loss::kXent ? static_cast<int64_t>(rd->train.classes.size()) : 0;
  r.worker_batch_rows = run.worker_batch_rows(o, rd->train.rows);
  r.worker_pass_bytes = nn::PassBytes(r.model, r.worker_batch_rows, /*backward=*/true);
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace shmtrain::plan
