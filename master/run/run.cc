#include "master/run/run.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/crc32.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "master/files/checkpoint.h"
#include "master/files/model_file.h"
#include "master/files/output_path.h"
#include "master/files/output_write.h"
#include "master/files/predict.h"
#include "master/kinds/kind.h"
#include "master/run/checkpoint_policy.h"
#include "master/run/divergence.h"
#include "master/run/fault.h"
#include "master/run/kind_view.h"
#include "master/run/run_end.h"
#include "master/run/run_lines.h"
#include "master/run/run_loop.h"
#include "master/run/run_watch.h"
#include "master/run/segment_reads.h"
#include "master/run/signals.h"
#include "master/run/start.h"
#include "master/run/supervisor.h"
#include "master/run/validation.h"
#include "master/run/zero_steps.h"
#include "master/unit/training_report.h"
#include "monitoring/exporter.h"
#include "monitoring/tfevents.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "shm/futex.h"
#include "shm/segment.h"

namespace shmtrain::master {

Status WithStdoutStatus(const Status& ran, const TrainOptions& o, const Logger& log) {
  if (!ran.ok() || log.stdout_status().ok()) return ran;
  return Status::Resource(
      log.stdout_status().message() + "; the run finished" +
      (o.save_path.empty() ? "" : " and its model was saved to " + o.save_path));
}

Status RunTrain(const TrainOptions& opts, Logger& log, Launcher& launcher,
                const std::shared_ptr<Hosts>& hosts_share,
                std::unique_ptr<monitoring::Exporter>* exporter_out) {
  return RunTrain(opts, KindOf(opts.mode, opts.host_count), log, launcher, hosts_share,
                  exporter_out);
}

Status RunTrain(const TrainOptions& opts, const RunKind& kind, Logger& log, Launcher& launcher,
                const std::shared_ptr<Hosts>& hosts_share,
                std::unique_ptr<monitoring::Exporter>* exporter_out) {
  if (IsZeroStepRun(opts)) return RunZeroSteps(opts, kind, log);
  Start st;  // holds the segment to the run's end: declared before the loop and the units
  if (Status s = StartRun(opts, kind, *hosts_share, log, exporter_out, &st); !s.ok()) return s;
  const TrainOptions& o = st.o;
  const int64_t first = st.resume.step, total = st.run.host.steps;
  const int64_t t_start = st.t_start_ns, steps_per_epoch = st.run.steps_per_epoch;
  monitoring::RunStats& stats = *st.stats;
  // The units read the segment through seg and write through the loop's writes().
  RunLoop loop(st.seg, st.seg_name, kind);
  const shm::Segment& seg = loop.segment();
  SegmentWrites& writes = loop.writes();

  // What a run does, each round and at its end, in this order (master/run/run_loop.h).
  StopSignal stop(total, o.host_count > 1);
  MasterFault fault(o.fault_master_throw);
  LossLog losses(log, seg.header()->config.log_every, first, &stats.history());
  const bool xent = o.model.loss == Loss::kXent;
  ProgressLine live(log, first, total, steps_per_epoch, t_start, stats.history(), xent);
  ValidationProtocol validation(kind,
                                {.eval_every = st.run.host.eval_every,
                                 .early_stop = o.early_stop,
                                 .first_step = first,
                                 .total_steps = total,
                                 .steps_per_epoch = steps_per_epoch,
                                 .t_start_ns = t_start},
                                st.run.model, st.rd.val, seg, writes, log, stats.validation());
  // Several hosts: the unit that combines them (the combiner, the parameter server).
  const CrossHostUnit cross = kind.StartCrossHost(o, writes, hosts_share, st.stats);
  const DivergenceCause divergence(o, st.resume);
  Supervisor sup(kind, seg, writes, launcher, log, stats.workers(),
                 SupervisorOptions::For(o, divergence));
  CheckpointPolicy checkpoints(
      CheckpointConfig::For(o, st.run, kind, first, cross.cut, &st.reserved[1]), seg, writes, log,
      stats.checkpoints());
  FinalModel model(o, st.rd, divergence, &st.reserved[0]);
  SummaryLine summary(o, kind, first, st.rd.train.rows, t_start, log);
  RunWatch watch(kind, stats, std::move(st.events), t_start, xent, log);
  TrainingReport training(log, first);
  return loop.Run([&sup](int ms) { sup.Wait(ms); },
                  {&stop, &fault, &losses, &live, cross.unit.get(), &validation, &sup, &checkpoints,
                   &model, &summary, &watch, &training});
}

}  // namespace shmtrain::master
