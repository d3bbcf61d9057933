// `shmtrain train`: load the data, lay out and fill the segment, then run the list of units
// that make a run (master/run/run_loop.h), each owning one concern: stop signals
// (master/run/signals.h), the loss and live lines (master/run/run_lines.h), validation and early
// stopping (master/run/validation.h), the cross-host combine (master/hosts/combiner.h), the
// workers' lives (master/run/supervisor.h), checkpoints (master/run/checkpoint_policy.h), the model
// kept and the summary line. RunTrain's list is the order of every round and of the run's end.
//
// The master never blocks on anything a worker can hold: it sleeps only in poll() on the
// workers' pidfds with a short timeout, reads the segment without locks, and after an abort
// gives the workers a bounded time to leave before it kills them.
#pragma once

#include <memory>

#include "data/pipeline.h"
#include "master/log/log.h"
#include "master/hosts/hosts.h"
#include "master/kinds/kind.h"
#include "master/run/launcher.h"
#include "master/run/signals.h"
#include "monitoring/exporter.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// The run's data (data/pipeline.h), which its units take.
using data::RunData;

// Runs a training to its end: this host's part of it when hosts.count() > 1 (opts.host_* must
// match hosts). On failure, every worker is gone and the segment removed before this returns.
// The metrics endpoint, if any, is left in *exporter: stopping it costs civetweb's 2 s poll
// quantum, so the caller lets the process's exit close it instead.
// hosts is shared with the run's cross-host thread, which a failure may leave behind.
Status RunTrain(const TrainOptions& opts, Logger& log, Launcher& launcher,
                const std::shared_ptr<Hosts>& hosts,
                std::unique_ptr<monitoring::Exporter>* exporter);
// The same run of the kind given: RunTrain above gives the kind of opts.mode over
// opts.host_count hosts (KindOf, the one place the master picks it); the run holds it from
// here on and every unit that differs by kind is handed it, or the role of it it needs.
Status RunTrain(const TrainOptions& opts, const RunKind& kind, Logger& log, Launcher& launcher,
                const std::shared_ptr<Hosts>& hosts,
                std::unique_ptr<monitoring::Exporter>* exporter);

// A log that cannot be written (a full disk, a closed pipe) does not stop the training it
// reports on: `ran` when it failed or stdout took every line; else kResource, stdout's failure
// and that the run finished (its model saved). Asked once the log is written out
// (Logger::Drain), so that stdout's status is final.
Status WithStdoutStatus(const Status& ran, const TrainOptions& o, const Logger& log);

}  // namespace shmtrain::master
