#include "monitoring/exporter.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "monitoring/run_page.h"
#include "nn/schedule.h"
#include "shm/futex.h"

namespace shmtrain::monitoring {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

ClientMetric Value(double v, MetricType type, Labels labels = {}) {
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
ClientMetric HistogramMetric(const uint64_t* counts, const Bound* bounds, int buckets, double sum,
                             Labels labels = {}) {
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

// The families of one scrape, built in order. Take() labels every series with the host.
class Families {
 public:
  explicit Families(int workers) : workers_(workers) {}

  // A new family, to fill with series; the reference holds until the next Add.
  MetricFamily& Add(const char* name, const char* help, MetricType type) {
    MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = type;
    out_.push_back(std::move(f));
    return out_.back();
  }
  void Gauge(const char* name, const char* help, double v) {
    Add(name, help, MetricType::Gauge).metric.push_back(Value(v, MetricType::Gauge));
  }
  void Counter(const char* name, const char* help, double v) {
    Add(name, help, MetricType::Counter).metric.push_back(Value(v, MetricType::Counter));
  }
  // One series per worker, labelled worker="0".."P-1"; value(r) gives rank r's value.
  template <class F>
  void PerWorker(const char* name, const char* help, MetricType type, F value) {
    MetricFamily& f = Add(name, help, type);
    for (int r = 0; r < workers_; ++r) {
      f.metric.push_back(Value(value(r), type, {{"worker", std::to_string(r)}}));
    }
  }
  // A duration histogram of the master's (RunStats), over shm::kDurationBounds.
  void MasterHistogram(const char* name, const char* help, const DurationHistogram& hist) {
    uint64_t counts[shm::kDurationBuckets];
    for (int k = 0; k < shm::kDurationBuckets; ++k) {
      counts[k] = hist.counts[k].load(std::memory_order_relaxed);
    }
    Add(name, help, MetricType::Histogram)
        .metric.push_back(HistogramMetric(counts, shm::kDurationBounds, shm::kDurationBuckets,
                                          hist.sum_ns.load(std::memory_order_relaxed) * 1e-9));
  }

  // The families, every series labelled host="<host>" (labels kept in name order; the
  // serializer appends a bucket's le).
  std::vector<MetricFamily> Take(const std::string& host) {
    for (MetricFamily& f : out_) {
      for (ClientMetric& m : f.metric) {
        const auto at = std::find_if(m.label.begin(), m.label.end(),
                                     [](const ClientMetric::Label& l) { return l.name > "host"; });
        m.label.insert(at, ClientMetric::Label{"host", host});
      }
    }
    return std::move(out_);
  }

 private:
  int workers_;
  std::vector<MetricFamily> out_;
};

}  // namespace

class RunCollector final {
 public:
  RunCollector(const shm::Segment* seg, const RunKindView* kind, const RunStats* stats,
               const TrainOptions& o)
      : seg_(seg),
        kind_(kind),
        stats_(stats),
        mode_(kind->ModeName()),
        rule_(*kind->Rule() != '\0' ? kind->Rule() : "none"),
        host_(std::to_string(o.host_index)),
        hosts_(o.host_count),
        relaunch_(o.relaunch) {}

  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    seg_ = nullptr;
  }

  std::vector<MetricFamily> Collect() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (seg_ == nullptr) return {};
    Families f(static_cast<int>(seg_->header()->config.workers));
    CollectRun(&f);
    CollectWorkers(&f);
    CollectSupervisor(&f);
    CollectRelaunches(&f);
    return f.Take(host_);
  }

 private:
  int workers() const { return static_cast<int>(seg_->header()->config.workers); }

  // The run as a whole: what it is, how far it got, how its steps go.
  void CollectRun(Families* f) const {
    using shm::LoadRelaxed;
    const shm::Header* h = seg_->header();
    const shm::RunConfig& c = h->config;
    const int P = workers();
    f->Add("shmtrain_build_info", "Version, mode and async rule of this run (always 1).",
           MetricType::Gauge)
        .metric.push_back(Value(1, MetricType::Gauge,
                                {{"mode", mode_}, {"rule", rule_}, {"version", SHMTRAIN_VERSION}}));
    f->Gauge("shmtrain_hosts",
             "Host masters of this run (1 without mpirun); this one's index is the host label.",
             hosts_);
    f->Gauge("shmtrain_workers", "Worker processes of this run (P).", P);
    const int64_t progress = kind_->Progress(*seg_);
    f->Counter("shmtrain_steps_total",
               "Updates applied: sync steps completed by every worker, or async updates.",
               static_cast<double>(progress));
    f->Gauge("shmtrain_target_steps", "Updates this run will apply in all.",
             static_cast<double>(c.total_steps));
    f->Gauge("shmtrain_loss", "Loss of the latest minibatch (mean per sample).",
             LoadRelaxed(h->last_loss));
    f->Gauge("shmtrain_learning_rate",
             "Learning rate of the current step or update (the schedule's, warmup included).",
             nn::LearningRateAfter(c.optim, progress));
    f->Gauge("shmtrain_grad_norm", "L2 norm of the latest (mean) gradient.",
             LoadRelaxed(h->last_grad_norm));

    uint64_t dur[shm::kDurationBuckets] = {};
    uint64_t stale[shm::kStalenessBuckets] = {};
    double dur_sum = 0, stale_sum = 0;
    uint64_t dropped = 0;
    for (int r = 0; r < P; ++r) {
      const shm::WorkerBlock* b = seg_->block(r);
      for (int k = 0; k < shm::kDurationBuckets; ++k)
        dur[k] += LoadRelaxed(b->step_duration_hist[k]);
      for (int k = 0; k < shm::kStalenessBuckets; ++k)
        stale[k] += LoadRelaxed(b->staleness_hist[k]);
      dur_sum += LoadRelaxed(b->step_duration_ns_total) * 1e-9;
      stale_sum += static_cast<double>(LoadRelaxed(b->staleness_sum));
      dropped += LoadRelaxed(b->dropped_total);
    }
    f->Add("shmtrain_step_duration_seconds",
           "Time per step (sync, as rank 0 sees it) or per update (async).", MetricType::Histogram)
        .metric.push_back(
            HistogramMetric(dur, shm::kDurationBounds, shm::kDurationBuckets, dur_sum));
    f->Add("shmtrain_update_staleness",
           "Async: versions applied by others between a worker's read and its update (tau).",
           MetricType::Histogram)
        .metric.push_back(
            HistogramMetric(stale, shm::kStalenessBounds, shm::kStalenessBuckets, stale_sum));
    f->Gauge("shmtrain_param_version", "Async: the global parameter version (updates applied).",
             static_cast<double>(shm::LoadAcquire(h->param_version)));
    f->Counter("shmtrain_dropped_gradients_total",
               "Async: gradients dropped as older than --max-staleness.",
               static_cast<double>(dropped));
  }

  // Per worker: liveness, work done, where its time goes, restarts.
  void CollectWorkers(Families* f) const {
    using shm::LoadRelaxed;
    const int P = workers();
    f->PerWorker("shmtrain_worker_up", "1 while the worker process runs and has attached.",
                 MetricType::Gauge, [&](int r) {
                   return stats_->workers().up(r) && shm::LoadAcquire(seg_->block(r)->attached)
                              ? 1.0
                              : 0.0;
                 });
    f->PerWorker("shmtrain_samples_total", "Samples whose gradient the worker computed.",
                 MetricType::Counter, [&](int r) {
                   return static_cast<double>(LoadRelaxed(seg_->block(r)->samples_total));
                 });
    MetricFamily& wait =
        f->Add("shmtrain_barrier_wait_seconds", "Time each sync barrier wait took, by worker.",
               MetricType::Histogram);
    for (int r = 0; r < P; ++r) {
      const shm::WorkerBlock* b = seg_->block(r);
      uint64_t n[shm::kDurationBuckets];
      for (int k = 0; k < shm::kDurationBuckets; ++k) n[k] = LoadRelaxed(b->barrier_wait_hist[k]);
      wait.metric.push_back(HistogramMetric(n, shm::kDurationBounds, shm::kDurationBuckets,
                                            LoadRelaxed(b->barrier_wait_ns_total) * 1e-9,
                                            {{"worker", std::to_string(r)}}));
    }
    MetricFamily& restarts =
        f->Add("shmtrain_worker_restarts_total",
               "Workers replaced by the supervisor, by worker and reason.", MetricType::Counter);
    for (int r = 0; r < P; ++r) {
      for (RestartReason why : {RestartReason::kCrash, RestartReason::kHang, RestartReason::kChaos,
                                RestartReason::kPeerHang}) {
        restarts.metric.push_back(
            Value(static_cast<double>(stats_->workers().restarts(r, why)), MetricType::Counter,
                  {{"reason", ToString(why)}, {"worker", std::to_string(r)}}));
      }
    }
    const int64_t now = shm::MonotonicNs();
    f->PerWorker("shmtrain_worker_heartbeat_age_seconds",
                 "Seconds since the worker last refreshed its heartbeat (0 before it started).",
                 MetricType::Gauge, [&](int r) {
                   const int64_t hb = LoadRelaxed(seg_->block(r)->heartbeat_ns);
                   return hb > 0 ? std::max<int64_t>(0, now - hb) * 1e-9 : 0.0;
                 });
    // Where a sync step's time goes: compute (the gradient), reduce (the reduce + update
    // phase) and the barrier waits (shmtrain_barrier_wait_seconds) add up to the wall time;
    // batch norm's crossing waits are a part of the barrier waits.
    f->PerWorker("shmtrain_worker_compute_seconds_total",
                 "Seconds the worker spent computing gradients (sync) or whole updates (async).",
                 MetricType::Counter,
                 [&](int r) { return LoadRelaxed(seg_->block(r)->compute_ns_total) * 1e-9; });
    f->PerWorker("shmtrain_worker_reduce_seconds_total",
                 "Sync: seconds the worker spent reducing its slice of the gradients over every "
                 "worker and applying the optimizer to it.",
                 MetricType::Counter,
                 [&](int r) { return LoadRelaxed(seg_->block(r)->reduce_ns_total) * 1e-9; });
    f->PerWorker("shmtrain_worker_crossing_wait_seconds_total",
                 "Sync: seconds the worker waited at batch norm's crossings for every worker's "
                 "batch statistics (a part of shmtrain_barrier_wait_seconds).",
                 MetricType::Counter,
                 [&](int r) { return LoadRelaxed(seg_->block(r)->crossing_wait_ns_total) * 1e-9; });
  }

  // What only the master knows: recoveries, torn updates, checkpoints, the cross-host
  // combine, the cross-host pushes, validation.
  void CollectSupervisor(Families* f) const {
    const WorkerStats& workers = stats_->workers();
    const CheckpointStats& checkpoints = stats_->checkpoints();
    const ValidationStats& validation = stats_->validation();
    f->MasterHistogram("shmtrain_recovery_duration_seconds",
                       "Time from a worker's death to the run making progress again.",
                       workers.recovery());
    f->Counter("shmtrain_torn_updates_total",
               "Async: updates a worker was killed in the middle of applying (settled when the "
               "run's workers have all finished).",
               static_cast<double>(workers.torn_updates()));
    f->MasterHistogram("shmtrain_checkpoint_duration_seconds",
                       "Time to copy and durably write a checkpoint.", checkpoints.writes());
    f->Gauge("shmtrain_checkpoint_last_success_timestamp_seconds",
             "Unix time of the last checkpoint written (0: none yet).",
             checkpoints.last_success_unix());
    f->Counter("shmtrain_checkpoint_failures_total",
               "Checkpoints that could not be written (the run goes on and tries again at the "
               "next one).",
               static_cast<double>(checkpoints.failures()));
    f->MasterHistogram("shmtrain_host_combine_seconds",
                       "Time of the cross-host combine of one step on this host: the exchange of "
                       "host sums between host masters, per step (empty with one host).",
                       stats_->combine());
    CollectPushes(f);
    // Validation gauges appear with the first evaluation (none without held-out data).
    if (validation.validations() == 0) return;
    f->Gauge("shmtrain_validation_loss", "Mean loss on the held-out rows at the latest evaluation.",
             validation.loss());
    if (static_cast<Loss>(seg_->header()->config.loss) == Loss::kXent) {
      f->Gauge("shmtrain_validation_accuracy",
               "Fraction of held-out rows classified right at the latest evaluation.",
               validation.metric());
    } else {
      f->Gauge("shmtrain_validation_rmse", "RMSE on the held-out rows at the latest evaluation.",
               validation.metric());
    }
  }

  // Async across hosts (master/hosts/param_server.h): this host as a pusher to the parts' owners
  // and as the owner of its own part. Served always, at zero in a run that does not exchange (sync,
  // or one host), as the combine histogram is: a dashboard or rule never sees a family appear late.
  void CollectPushes(Families* f) const {
    const PushStats& pushes = stats_->pushes();
    f->Counter("shmtrain_host_pushes_total",
               "Async across hosts: pushes of this host's accumulated update of a part of the "
               "parameters to the part's owner host (itself included).",
               static_cast<double>(pushes.sent()));
    f->Counter("shmtrain_host_push_bytes_total",
               "Async across hosts: bytes of the pushes this host sent (header and payload).",
               static_cast<double>(pushes.bytes()));
    f->Counter("shmtrain_host_pushes_applied_total",
               "Async across hosts: pushes from every host applied here, as the owner of this "
               "host's part.",
               static_cast<double>(pushes.applied()));
    f->Counter("shmtrain_host_pushes_dropped_total",
               "Async across hosts: pushes from every host dropped here, as the owner of this "
               "host's part, as older than --max-staleness.",
               static_cast<double>(pushes.dropped()));
    uint64_t tau[shm::kStalenessBuckets];
    for (int k = 0; k < shm::kStalenessBuckets; ++k) tau[k] = pushes.tau_bucket(k);
    f->Add("shmtrain_host_push_staleness",
           "Async across hosts: versions of this host's part applied between the pull a push "
           "was computed from and its apply here (cross-host tau), of the pushes applied.",
           MetricType::Histogram)
        .metric.push_back(HistogramMetric(tau, shm::kStalenessBounds, shm::kStalenessBuckets,
                                          static_cast<double>(pushes.tau_sum())));
    f->Gauge("shmtrain_host_last_push_timestamp_seconds",
             "Async across hosts: Unix time of this host's last push (0: none yet).",
             pushes.last_sent_unix());
  }

  // The job's relaunches so far by reason (SHMTRAIN_RELAUNCH, shmtrain/relaunch.h), every reason
  // served from the start: 0 in a job that was never relaunched. A relaunched job is a new
  // process that starts at the counts the launcher gave it, so the counter goes on across
  // relaunches where the scrape target stays the same.
  void CollectRelaunches(Families* f) const {
    MetricFamily& family =
        f->Add("shmtrain_relaunches_total",
               "Times `shmtrain launch` started this job again on the surviving machines after "
               "a host master was lost, by reason (host_died, host_silent).",
               MetricType::Counter);
    for (int k = 0; k < kRelaunchReasons; ++k) {
      family.metric.push_back(Value(static_cast<double>(relaunch_.reasons[k]), MetricType::Counter,
                                    {{"reason", ToString(static_cast<RelaunchReason>(k))}}));
    }
  }

  // Held by a scrape while it reads the segment, and by Detach(): never by the run loop
  // otherwise, so training never waits for a scrape.
  mutable std::mutex mu_;
  const shm::Segment* seg_;
  const RunKindView* kind_;
  const RunStats* stats_;
  std::string mode_;
  std::string rule_;
  std::string host_;
  int hosts_;
  Relaunch relaunch_;
};

Status HostMetricsAddress(const std::string& addr, int host_local, std::string* out) {
  HostPort hp;
  if (Status s = ParseHostPort(addr, &hp); !s.ok()) {
    return Status::Usage("--metrics-addr " + addr + ": " + s.message());
  }
  if (host_local < 0) {
    return Status::Internal("host-local rank " + std::to_string(host_local) + " is negative");
  }
  const int port = hp.port == 0 ? 0 : hp.port + host_local;
  if (port > 65535) {
    return Status::Usage("--metrics-addr " + addr + ": host master " + std::to_string(host_local) +
                         " of this machine would listen on port " + std::to_string(port) +
                         ", above 65535 (each host master on a machine "
                         "listens on the base port plus its rank among them there); choose a "
                         "lower base port, or port 0 for any free port");
  }
  *out = (hp.ipv6 ? "[" + hp.host + "]" : hp.host) + ":" + std::to_string(port);
  return Status::Ok();
}

namespace {

// The live page (monitoring/page/live.html), embedded at build time.
constexpr unsigned char kLivePage[] = {
#include "monitoring/live_page.inc"
};

void Reply(mg_connection* conn, const char* mime, const std::string& body) {
  mg_send_http_ok(conn, mime, static_cast<long long>(body.size()));
  mg_write(conn, body.data(), body.size());
}

}  // namespace

// What the server's threads read of the run: the collector and the page's sources while a
// run is attached; nothing before and after. A request holds mu_ while it reads the segment;
// the run loop takes it only in Attach and Detach.
class RunSource {
 public:
  void Attach(const shm::Segment* seg, const RunKindView* kind, const RunStats* stats,
              const TrainOptions& o, const RunFacts& facts) {
    std::lock_guard<std::mutex> lock(mu_);
    collector_ = std::make_unique<RunCollector>(seg, kind, stats, o);
    seg_ = seg;
    kind_ = kind;
    stats_ = stats;
    opts_ = o;
    facts_ = facts;
  }
  // The last /api/run answer is kept: the page shows the run's end until the master exits.
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    if (seg_ == nullptr) return;
    last_page_ = RunPageJson(*seg_, *kind_, *stats_, opts_, facts_, /*ended=*/true);
    collector_->Detach();
    seg_ = nullptr;
  }
  std::string Metrics() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (seg_ == nullptr) return "";
    return prometheus::TextSerializer().Serialize(collector_->Collect());
  }
  std::string Page() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (seg_ == nullptr) return last_page_.empty() ? "null" : last_page_;
    return RunPageJson(*seg_, *kind_, *stats_, opts_, facts_, /*ended=*/false);
  }

 private:
  mutable std::mutex mu_;
  std::unique_ptr<RunCollector> collector_;
  const shm::Segment* seg_ = nullptr;
  const RunKindView* kind_ = nullptr;
  const RunStats* stats_ = nullptr;
  TrainOptions opts_;
  RunFacts facts_;
  std::string last_page_;
};

// GET / (the page), /api/run (its data), /metrics (Prometheus' text format); 404 otherwise.
class Routes final : public CivetHandler {
 public:
  explicit Routes(const RunSource& run) : run_(run) {}
  bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
    const std::string uri = mg_get_request_info(conn)->local_uri;
    if (uri == "/metrics") {
      Reply(conn, "text/plain; version=0.0.4; charset=utf-8", run_.Metrics());
    } else if (uri == "/api/run") {
      Reply(conn, "application/json", run_.Page());
    } else if (uri == "/" || uri == "/index.html") {
      Reply(conn, "text/html; charset=utf-8",
            std::string(reinterpret_cast<const char*>(kLivePage), sizeof(kLivePage)));
    } else {
      mg_send_http_error(conn, 404, "%s", "not found: this server has /, /api/run and /metrics\n");
    }
    return true;
  }

 private:
  const RunSource& run_;
};

Exporter::Exporter()
    : run_(std::make_unique<RunSource>()), routes_(std::make_unique<Routes>(*run_)) {}

Exporter::~Exporter() {
  if (server_) server_->close();  // its threads end before the routes and the source go
}

Status Exporter::Start(const std::string& addr, std::unique_ptr<Exporter>* out) {
  auto bad = [&](const std::string& what) {
    return Status::Usage("--metrics-addr " + addr + ": " + what);
  };
  // One parser for the flag check and the listener (shmtrain/options.h). civetweb takes
  // "[IPV6]:PORT" as is; the bound address keeps the brackets.
  HostPort hp;
  if (Status s = ParseHostPort(addr, &hp); !s.ok()) return bad(s.message());
  const std::string host = hp.ipv6 ? "[" + hp.host + "]" : hp.host;
  const int port = hp.port;
  // civetweb binds IPv6 only when built with it (Debian 12's is not); feature 8 is IPv6.
  if (hp.ipv6 && mg_check_feature(8) == 0) {
    return bad("this build's HTTP server (civetweb) has no IPv6 support; listen on an IPv4 "
               "address such as 127.0.0.1:" + std::to_string(port));
  }
  std::unique_ptr<Exporter> e(new Exporter());
  try {
    // civetweb (1.15 on Debian 12) serves a connection per thread, in the order it accepted
    // them, and a client that sends its request slowly or not at all holds its thread until
    // request_timeout_ms has passed since it connected. Beside N such clients that reconnect
    // at once (a "slowloris"), a scrape waits about (N - threads) x timeout / threads; 2
    // threads and 1 s failed 9 scrapes in 11 beside 200. 64 threads and 500 ms answered each
    // in about 1 s beside 200 (3.5 s beside 500); an idle thread costs a stack's address space
    // and no CPU. Without keep-alive a client holds a thread for one request only.
    // docs/monitoring.md has the measurements.
    e->server_ = std::make_unique<CivetServer>(std::vector<std::string>{
        "listening_ports", addr, "num_threads", std::to_string(kServingThreads),
        "request_timeout_ms", std::to_string(kRequestTimeoutMs), "enable_keep_alive", "no"});
  } catch (const std::exception& ex) {
    (void)ex;  // civetweb's text ("null context ...") says less than we do
    return bad("cannot listen there: the port is taken, or the address is not one of this "
               "host's (use port 0 for any free port, or --no-metrics)");
  }
  e->server_->addHandler("/", e->routes_.get());
  const std::vector<int> ports = e->server_->getListeningPorts();
  e->address_ = host + ":" + std::to_string(ports.empty() ? port : ports.front());
  *out = std::move(e);
  return Status::Ok();
}

void Exporter::Attach(const shm::Segment* seg, const RunKindView* kind, const RunStats* stats,
                      const TrainOptions& opts, const RunFacts& facts) {
  run_->Attach(seg, kind, stats, opts, facts);
}

void Exporter::Detach() { run_->Detach(); }

}  // namespace shmtrain::monitoring
