#include "monitoring/exporter.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <dlfcn.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>

#include "nn/schedule.h"
#include "shm/futex.h"

namespace shmtrain::monitoring {

const char* ToString(RestartReason r) {
  switch (r) {
    case RestartReason::kCrash: return "crash";
    case RestartReason::kHang: return "hang";
    case RestartReason::kChaos: return "chaos";
    case RestartReason::kPeerHang: return "peer_hang";
  }
  return "unknown";
}

void SupervisorStats::Histogram::Observe(double seconds) {
  const auto ns = static_cast<int64_t>(seconds * 1e9);
  counts[shm::DurationBucket(ns)].fetch_add(1, std::memory_order_relaxed);
  sum_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

SupervisorStats::SupervisorStats(int workers)
    : up_(static_cast<size_t>(workers)),
      restarts_(static_cast<size_t>(workers) * kRestartReasons) {}

void SupervisorStats::AddRestart(int rank, RestartReason why) {
  restarts_[rank * kRestartReasons + static_cast<int>(why)].fetch_add(1,
                                                                      std::memory_order_relaxed);
}

uint64_t SupervisorStats::restarts(int rank, RestartReason why) const {
  return restarts_[rank * kRestartReasons + static_cast<int>(why)].load(std::memory_order_relaxed);
}

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(const char* name, const char* help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

ClientMetric Value(double v, MetricType type, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  return m;
}

// A histogram from per-bucket (non-cumulative) counts and bounds; the last count is +Inf's.
template <class Bound>
ClientMetric Histogram(const uint64_t* counts, const Bound* bounds, int buckets, double sum,
                       std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  uint64_t cum = 0;
  for (int k = 0; k < buckets; ++k) {
    cum += counts[k];
    ClientMetric::Bucket b;
    b.cumulative_count = cum;
    b.upper_bound = k + 1 < buckets ? static_cast<double>(bounds[k])
                                    : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back(b);
  }
  m.histogram.sample_count = cum;
  m.histogram.sample_sum = sum;
  return m;
}

}  // namespace

class RunCollector final : public prometheus::Collectable {
 public:
  RunCollector(const shm::Segment* seg, const SupervisorStats* stats, const TrainOptions& o)
      : seg_(seg), stats_(stats), mode_(ToString(o.mode)),
        rule_(o.mode == Mode::kAsync ? ToString(o.rule) : "none") {}

  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    seg_ = nullptr;
  }

  std::vector<MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (seg_ == nullptr) return {};
    using shm::LoadRelaxed;
    const shm::Header* h = seg_->header();
    const shm::RunConfig& c = h->config;
    const int P = static_cast<int>(c.workers);
    const bool sync = static_cast<Mode>(c.mode) == Mode::kSync;
    std::vector<MetricFamily> out;

    auto gauge = [&](const char* name, const char* help, double v) {
      MetricFamily f = Family(name, help, MetricType::Gauge);
      f.metric.push_back(Value(v, MetricType::Gauge));
      out.push_back(std::move(f));
    };
    auto per_worker = [&](const char* name, const char* help, MetricType type, auto value) {
      MetricFamily f = Family(name, help, type);
      for (int r = 0; r < P; ++r) {
        f.metric.push_back(Value(value(r), type, {{"worker", std::to_string(r)}}));
      }
      out.push_back(std::move(f));
    };

    MetricFamily info = Family("shmtrain_build_info",
                               "Version, mode and async rule of this run (always 1).",
                               MetricType::Gauge);
    info.metric.push_back(Value(1, MetricType::Gauge, {{"mode", mode_},
                                                       {"rule", rule_},
                                                       {"version", SHMTRAIN_VERSION}}));
    out.push_back(std::move(info));
    gauge("shmtrain_workers", "Worker processes of this run (P).", P);
    per_worker("shmtrain_worker_up", "1 while the worker process runs and has attached.",
               MetricType::Gauge, [&](int r) {
                 return stats_->up(r) && shm::LoadAcquire(seg_->block(r)->attached) ? 1.0 : 0.0;
               });

    uint64_t progress;
    if (sync) {
      uint64_t lo = UINT64_MAX;
      for (int r = 0; r < P; ++r) lo = std::min(lo, shm::LoadPhase(*seg_->block(r)) / 2);
      progress = lo;
    } else {
      progress = shm::LoadAcquire(h->param_version);
    }
    MetricFamily steps = Family("shmtrain_steps_total",
                                "Updates applied: sync steps completed by every worker, or async "
                                "updates.",
                                MetricType::Counter);
    steps.metric.push_back(Value(static_cast<double>(progress), MetricType::Counter));
    out.push_back(std::move(steps));
    gauge("shmtrain_target_steps", "Updates this run will apply in all.",
          static_cast<double>(c.total_steps));
    per_worker("shmtrain_samples_total", "Samples whose gradient the worker computed.",
               MetricType::Counter,
               [&](int r) { return static_cast<double>(LoadRelaxed(seg_->block(r)->samples_total)); });
    gauge("shmtrain_loss", "Loss of the latest minibatch (mean per sample).",
          LoadRelaxed(h->last_loss));
    gauge("shmtrain_learning_rate",
          "Learning rate of the current step or update (the schedule's, warmup included).",
          nn::LearningRate(c.optim, std::min<int64_t>(progress, std::max<int64_t>(c.total_steps - 1, 0))));
    gauge("shmtrain_grad_norm", "L2 norm of the latest (mean) gradient.",
          LoadRelaxed(h->last_grad_norm));

    MetricFamily dur = Family("shmtrain_step_duration_seconds",
                              "Time per step (sync, as rank 0 sees it) or per update (async).",
                              MetricType::Histogram);
    {
      uint64_t counts[shm::kDurationBuckets] = {};
      double sum = 0;
      for (int r = 0; r < P; ++r) {
        const shm::WorkerBlock* b = seg_->block(r);
        for (int k = 0; k < shm::kDurationBuckets; ++k) counts[k] += LoadRelaxed(b->step_duration_hist[k]);
        sum += LoadRelaxed(b->step_duration_ns_total) * 1e-9;
      }
      dur.metric.push_back(Histogram(counts, shm::kDurationBounds, shm::kDurationBuckets, sum));
    }
    out.push_back(std::move(dur));

    MetricFamily wait = Family("shmtrain_barrier_wait_seconds",
                               "Time each sync barrier wait took, by worker.",
                               MetricType::Histogram);
    for (int r = 0; r < P; ++r) {
      const shm::WorkerBlock* b = seg_->block(r);
      uint64_t counts[shm::kDurationBuckets];
      for (int k = 0; k < shm::kDurationBuckets; ++k) counts[k] = LoadRelaxed(b->barrier_wait_hist[k]);
      wait.metric.push_back(Histogram(counts, shm::kDurationBounds, shm::kDurationBuckets,
                                      LoadRelaxed(b->barrier_wait_ns_total) * 1e-9,
                                      {{"worker", std::to_string(r)}}));
    }
    out.push_back(std::move(wait));

    MetricFamily stale = Family("shmtrain_update_staleness",
                                "Async: versions applied by others between a worker's read and "
                                "its update (tau).",
                                MetricType::Histogram);
    {
      uint64_t counts[shm::kStalenessBuckets] = {};
      double sum = 0;
      for (int r = 0; r < P; ++r) {
        const shm::WorkerBlock* b = seg_->block(r);
        for (int k = 0; k < shm::kStalenessBuckets; ++k) counts[k] += LoadRelaxed(b->staleness_hist[k]);
        sum += static_cast<double>(LoadRelaxed(b->staleness_sum));
      }
      stale.metric.push_back(Histogram(counts, shm::kStalenessBounds, shm::kStalenessBuckets, sum));
    }
    out.push_back(std::move(stale));

    gauge("shmtrain_param_version", "Async: the global parameter version (updates applied).",
          static_cast<double>(shm::LoadAcquire(h->param_version)));
    uint64_t dropped = 0;
    for (int r = 0; r < P; ++r) dropped += LoadRelaxed(seg_->block(r)->dropped_total);
    MetricFamily drop = Family("shmtrain_dropped_gradients_total",
                               "Async: gradients dropped as older than --max-staleness.",
                               MetricType::Counter);
    drop.metric.push_back(Value(static_cast<double>(dropped), MetricType::Counter));
    out.push_back(std::move(drop));

    MetricFamily restarts = Family("shmtrain_worker_restarts_total",
                                   "Workers replaced by the supervisor, by worker and reason.",
                                   MetricType::Counter);
    for (int r = 0; r < P; ++r) {
      for (RestartReason why : {RestartReason::kCrash, RestartReason::kHang, RestartReason::kChaos,
                                RestartReason::kPeerHang}) {
        restarts.metric.push_back(Value(static_cast<double>(stats_->restarts(r, why)),
                                        MetricType::Counter,
                                        {{"reason", ToString(why)}, {"worker", std::to_string(r)}}));
      }
    }
    out.push_back(std::move(restarts));

    auto master_histogram = [&](const char* name, const char* help,
                                const SupervisorStats::Histogram& hist) {
      MetricFamily f = Family(name, help, MetricType::Histogram);
      uint64_t counts[shm::kDurationBuckets];
      for (int k = 0; k < shm::kDurationBuckets; ++k) {
        counts[k] = hist.counts[k].load(std::memory_order_relaxed);
      }
      f.metric.push_back(Histogram(counts, shm::kDurationBounds, shm::kDurationBuckets,
                                   hist.sum_ns.load(std::memory_order_relaxed) * 1e-9));
      out.push_back(std::move(f));
    };
    master_histogram("shmtrain_recovery_duration_seconds",
                     "Time from a worker's death to the run making progress again.",
                     stats_->recovery());
    MetricFamily torn = Family("shmtrain_torn_updates_total",
                               "Async: updates a worker was killed in the middle of applying (settled when "
                               "the run's workers have all finished).",
                               MetricType::Counter);
    torn.metric.push_back(Value(static_cast<double>(stats_->torn_updates()), MetricType::Counter));
    out.push_back(std::move(torn));
    master_histogram("shmtrain_checkpoint_duration_seconds",
                     "Time to copy and durably write a checkpoint.", stats_->checkpoint());
    gauge("shmtrain_checkpoint_last_success_timestamp_seconds",
          "Unix time of the last checkpoint written (0: none yet).",
          stats_->last_checkpoint_unix());
    MetricFamily ck_fail = Family("shmtrain_checkpoint_failures_total",
                                  "Checkpoints that could not be written (the run goes on and "
                                  "tries again at the next one).",
                                  MetricType::Counter);
    ck_fail.metric.push_back(
        Value(static_cast<double>(stats_->checkpoint_failures()), MetricType::Counter));
    out.push_back(std::move(ck_fail));

    // Validation gauges appear with the first evaluation (none without held-out data).
    if (stats_->validations() > 0) {
      gauge("shmtrain_validation_loss", "Mean loss on the held-out rows at the latest evaluation.",
            stats_->val_loss());
      if (static_cast<Loss>(c.loss) == Loss::kXent) {
        gauge("shmtrain_validation_accuracy",
              "Fraction of held-out rows classified right at the latest evaluation.",
              stats_->val_metric());
      } else {
        gauge("shmtrain_validation_rmse", "RMSE on the held-out rows at the latest evaluation.",
              stats_->val_metric());
      }
    }

    const int64_t now = shm::MonotonicNs();
    per_worker("shmtrain_worker_heartbeat_age_seconds",
               "Seconds since the worker last refreshed its heartbeat (0 before it started).",
               MetricType::Gauge, [&](int r) {
                 const int64_t hb = LoadRelaxed(seg_->block(r)->heartbeat_ns);
                 return hb > 0 ? std::max<int64_t>(0, now - hb) * 1e-9 : 0.0;
               });
    // Where a sync step's time goes: compute (the gradient), reduce (the reduce + update
    // phase) and the barrier waits (shmtrain_barrier_wait_seconds) add up to the wall time.
    per_worker("shmtrain_worker_compute_seconds_total",
               "Seconds the worker spent computing gradients (sync) or whole updates (async).",
               MetricType::Counter, [&](int r) {
                 return LoadRelaxed(seg_->block(r)->compute_ns_total) * 1e-9;
               });
    per_worker("shmtrain_worker_reduce_seconds_total",
               "Sync: seconds the worker spent reducing its slice of the gradients over every "
               "worker and applying the optimizer to it.",
               MetricType::Counter, [&](int r) {
                 return LoadRelaxed(seg_->block(r)->reduce_ns_total) * 1e-9;
               });
    return out;
  }

 private:
  // Held by a scrape while it reads the segment, and by Detach(): never by the run loop
  // otherwise, so training never waits for a scrape.
  mutable std::mutex mu_;
  const shm::Segment* seg_;
  const SupervisorStats* stats_;
  std::string mode_;
  std::string rule_;
};

Status HostMetricsAddress(const std::string& addr, int host_local, std::string* out) {
  std::string why;
  const std::optional<HostPort> hp = ParseHostPort(addr, &why);
  if (!hp) return Status::Usage("--metrics-addr " + addr + ": " + why);
  const int port = hp->port == 0 ? 0 : hp->port + host_local;
  *out = (hp->ipv6 ? "[" + hp->host + "]" : hp->host) + ":" + std::to_string(port);
  return Status::Ok();
}

Exporter::~Exporter() = default;

Status Exporter::Start(const std::string& addr, std::unique_ptr<Exporter>* out) {
  auto bad = [&](const std::string& what) {
    return Status::Usage("--metrics-addr " + addr + ": " + what);
  };
  // One parser for the flag check and the listener (shmtrain/options.h). civetweb takes
  // "[IPV6]:PORT" as is; the bound address keeps the brackets.
  std::string why;
  const std::optional<HostPort> hp = ParseHostPort(addr, &why);
  if (!hp) return bad(why);
  const std::string host = hp->ipv6 ? "[" + hp->host + "]" : hp->host;
  const int port = hp->port;
  // civetweb binds IPv6 only when built with it (Debian 12's is not); feature 8 is IPv6.
  // Looked up at run time so that the link does not depend on civetweb directly.
  using CheckFeature = unsigned (*)(unsigned);
  const auto check = reinterpret_cast<CheckFeature>(dlsym(RTLD_DEFAULT, "mg_check_feature"));
  if (hp->ipv6 && check != nullptr && check(8) == 0) {
    return bad("this build's HTTP server (civetweb) has no IPv6 support; listen on an IPv4 "
               "address such as 127.0.0.1:" + std::to_string(port));
  }
  std::unique_ptr<Exporter> e(new Exporter());
  try {
    // Two serving threads and a 1 s request timeout: a client that connects and sends nothing
    // (a stuck tool, a port scanner) holds one thread for at most a second, never the endpoint
    // (civetweb's default would hold its only thread for 30 s). Scrapes are rare and cheap;
    // the cores belong to the workers.
    e->exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", addr, "num_threads", "2", "request_timeout_ms", "1000"});
  } catch (const std::exception& ex) {
    (void)ex;  // civetweb's text ("null context ...") says less than we do
    return bad("cannot listen there: the port is taken, or the address is not one of this "
               "host's (use port 0 for any free port, or --no-metrics)");
  }
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  e->address_ = host + ":" + std::to_string(ports.empty() ? port : ports.front());
  *out = std::move(e);
  return Status::Ok();
}

void Exporter::Attach(const shm::Segment* seg, const SupervisorStats* stats,
                      const TrainOptions& opts) {
  collector_ = std::make_shared<RunCollector>(seg, stats, opts);
  exposer_->RegisterCollectable(collector_);
}

void Exporter::Detach() {
  if (collector_) collector_->Detach();
}

}  // namespace shmtrain::monitoring
