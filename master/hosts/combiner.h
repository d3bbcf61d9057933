// The cross-host combine of sync mode: a thread of the host master.
//
// Each step t, every rank writes its slice of this host's sum of the slots into HS and
// publishes host_sum_step = t (worker/sync_loop.cc). The combiner waits for the whole HS,
// adds this host's totals (rows, loss) from the slot headers, exchanges HS with the other host
// masters through Hosts::Combine (the sum over hosts in host order, into GS), and publishes
// combined_step = t; the ranks then scale GS and apply the update, so every host applies the
// same update to the same bits.
//
// With batch norm, before that, each of the step's crossings (nn::PassCrossings, in the order
// the ranks make them): once every rank has published the crossing's statistics in its slot
// (stats_seq), the combiner adds them in rank order, exchanges the sum with the other hosts
// through Hosts::CombineStats (every host's in host order, into the crossing's place in
// GStats), and publishes stats_combined_seq; the ranks wait for that instead of each other
// (worker/stats_crossing.h), so every rank of every host normalises with the statistics of
// the whole global batch, the same bits everywhere.
//
// Failure model: a worker death only delays the combine (the replacement publishes its slice
// and its crossings again), and the other hosts wait for it in Combine, up to --host-timeout. A
// host that sends nothing for that long is lost: status() turns kHostLost naming it, and the run
// loop ends the run and the job. The combiner never blocks the run loop: it waits on the workers in
// slices and stops when asked (Stop(), or the destructor).
//
// A unit of the run loop (master/run/run_loop.h): a round ends the run once status() is not ok; a
// good end puts the mean combine time into the summary.
#pragma once

#include <cstdint>
#include <memory>

#include "master/hosts/exchange_thread.h"
#include "master/hosts/hosts.h"
#include "master/hosts/worker_states.h"
#include "master/unit/run_unit.h"
#include "monitoring/run_stats.h"
#include "nn/batch_norm.h"
#include "shm/segment.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

class Combiner final : public RunUnit {
 public:
  // Combines steps first_step .. total_steps - 1 of seg's run; starts at once. Each combine's
  // time goes to stats' combine() (the combine's part of the run's metrics), written here only;
  // between steps, the thread reports this host's workers to host 0's page
  // (master/hosts/worker_states.h). `crossings`: a step's batch norm crossings
  // (nn::PassCrossings of the run's model; none without batch norm). The thread keeps its share
  // of hosts and stats: one left behind stuck in the transport outlives the run.
  Combiner(shm::Segment& seg, std::shared_ptr<Hosts> hosts,
           std::shared_ptr<monitoring::RunStats> stats, double host_timeout_s,
           std::vector<nn::Crossing> crossings = {});
  ~Combiner() override;  // Stop()
  Combiner(const Combiner&) = delete;
  Combiner& operator=(const Combiner&) = delete;

  // Ends the thread (a combine in progress ends at its next poll) and joins it, or leaves a
  // stuck one behind (ExchangeThread::JoinOrLeave).
  void Stop();
  // The mean time of a combine so far, in microseconds (NaN before the first).
  double MeanUs() const;
  // The mean time of a batch norm crossing's exchange so far, in microseconds (NaN before the
  // first).
  double MeanCrossingUs() const;
  // Ok while all is well; not ok once another host is lost or the exchange failed.
  Status status() const;
  Verdict Tick(const RunView& /*view*/) override { return Verdict::EndIf(status()); }
  // The run's end: the thread ends (a good end has combined every step); then the mean
  // combine time goes into the summary.
  void Stop(RunEnd& /*end*/) override { Stop(); }
  void Collect(RunEnd& end) override {
    if (!end.status.ok()) return;
    end.summary.combine_us = MeanUs();
    end.summary.crossing_us = MeanCrossingUs();
  }

 private:
  struct Body;  // everything the thread touches
  std::shared_ptr<Body> body_;
  ExchangeThread thread_;
};

}  // namespace shmtrain::master
