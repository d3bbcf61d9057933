// A training run's start on this host, in one pass (docs/design.md, "The start, in one
// pass"): the output paths checked and locked, the metrics endpoint, the run resolved once
// (master/plan/resolve.h: the data, the model, this host's plan, the segment's header),
// --init-from's weights read and checked (master/files/init_from.h), the outputs' room
// reserved, a resumed checkpoint read (across hosts, host 0 reads the file
// before all this and sends its bytes to the others), and the segment made and filled; then,
// across hosts, every host's start agreed. What the run loop's units are built from.
#pragma once

#include <memory>
#include <string>

#include "data/pipeline.h"
#include "master/files/checkpoint.h"
#include "master/files/output_path.h"
#include "master/files/output_write.h"
#include "master/hosts/hosts.h"
#include "master/kinds/kind.h"
#include "master/log/log.h"
#include "master/plan/resolve.h"
#include "master/run/kind_view.h"
#include "master/unit/removed_on_death.h"
#include "monitoring/exporter.h"
#include "monitoring/run_stats.h"
#include "monitoring/tfevents.h"
#include "shm/segment.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// This host's start: its members are what the run loop's units are built from; destroying it
// removes the segment, so a start that fails anywhere leaves nothing behind. It holds the
// segment for the whole run: declared before the run loop and its units, it outlives them.
struct Start {
  Start() = default;
  // The exporter stops reading the run before the segment is unmapped.
  ~Start() {
    if (attached != nullptr) attached->Detach();
  }
  Start(const Start&) = delete;
  Start& operator=(const Start&) = delete;

  TrainOptions o;              // this host's options, a --model's input set from the data
  OutputLock output_locks[2];  // --save, --checkpoint: held for the run's life
  // Their room on disk, taken once the sizes are known; used by the writes.
  OutputReservation reserved[2];
  data::RunData rd;
  plan::Resolved run;  // the run resolved once (master/plan/resolve.h)
  Checkpoint resume;
  shm::Segment seg;
  // The segment's name, registered for main's last-resort handlers once seg exists (declared
  // after it: forgotten before the segment is removed, on every path out). Both go to the run
  // loop, which drops the name first at the run's end.
  RemovedOnDeath seg_name;
  // The run made visible once every host has started: the TensorBoard file (host 0, with
  // --tensorboard), the run's metrics (shared with the cross-host thread, whose share may
  // outlive the run: master/hosts/exchange_thread.h), the clock of the summary and the events,
  // and what the exporter asks of the kind; the exporter attached to them, if any.
  std::unique_ptr<monitoring::EventFile> events;
  std::shared_ptr<monitoring::RunStats> stats;
  int64_t t_start_ns = 0;
  std::unique_ptr<KindView> kind_view;
  monitoring::Exporter* attached = nullptr;
};

// --save and --checkpoint: checked against the inputs (never over one of them) and locked for
// the run's life (master/files/output_path.h).
Status CheckOutputPaths(const TrainOptions& o, OutputLock (&locks)[2]);

// This host's start of a run of `kind` on opts, then (several hosts) the hosts' agreement
// that they start the same run from the same state, then the run made visible: its event file,
// its metrics attached to the exporter, the segment and the endpoint said in the log. The
// metrics endpoint, if asked for, is left in *exporter. On failure nothing is left behind but
// the endpoint.
Status StartRun(const TrainOptions& opts, const RunKind& kind, Hosts& hosts, Logger& log,
                std::unique_ptr<monitoring::Exporter>* exporter, Start* st);

}  // namespace shmtrain::master
