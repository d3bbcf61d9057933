#include "master/hosts/hosts.h"

#include <cstdlib>
#include <string>

#include "monitoring/exporter.h"
#include "shmtrain/options.h"

namespace shmtrain::master {

#ifdef SHMTRAIN_MPI
Status JoinMpiHosts(int* argc, char*** argv, std::unique_ptr<Hosts>* out);  // mpi_hosts.cc
#endif

namespace {

// The job's size as mpirun tells its ranks (Open MPI; PMIx for launchers that speak it).
int LaunchedRanks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

class SingleHost final : public Hosts {
 public:
  int count() const override { return 1; }
  int index() const override { return 0; }
  int local() const override { return 0; }
  int local_count() const override { return 1; }
  std::string Describe(int host) const override { return "host " + std::to_string(host); }
  Status Agree(const Status& here, uint64_t, double, const std::function<bool()>&) override {
    return here;
  }
  // The one host read the file itself.
  Status ShareFromFirst(const std::string&, std::string*, const Status& read, double,
                        const std::function<bool()>&) override {
    return read;
  }
  bool failed_together() const override { return false; }
  Status Combine(const float*, float*, int64_t, StepTotals*, int64_t,
                 const std::function<bool()>&) override {
    return Status::Internal("a single host has nothing to combine");
  }
  Status CombineStats(const double*, double*, int64_t, uint64_t, const std::string&, int64_t,
                      const std::function<bool()>&) override {
    return Status::Internal("a single host has no statistics to combine");
  }
  static Status NoPeers() { return Status::Internal("a single host has no other host to talk to"); }
  Status Send(int, int, const void*, int64_t, Message*) override { return NoPeers(); }
  Status Receive(int, int, void*, int64_t, Message*) override { return NoPeers(); }
  Status Test(Message*, bool*) override { return NoPeers(); }
  void Cancel(Message*) override {}
  void Finish() override {}
  [[noreturn]] void AbortJob(int code) override { std::_Exit(code); }
};

}  // namespace

Status StartHostMetrics(const std::string& given, int host_local,
                        std::unique_ptr<monitoring::Exporter>* out) {
  std::string addr;
  if (Status s = monitoring::HostMetricsAddress(given, host_local, &addr); !s.ok()) return s;
  Status s = monitoring::Exporter::Start(addr, out);
  HostPort hp;
  const bool parsed = ParseHostPort(given, &hp).ok();  // parsed just above, which said why not
  if (s.ok() || host_local == 0 || !parsed || hp.port == 0) return s;
  // The exporter names the address it tried, which the user never typed.
  std::string why = s.message();
  const std::string tried = "--metrics-addr " + addr + ": ";
  if (why.rfind(tried, 0) == 0) why.erase(0, tried.size());
  const std::string k = std::to_string(host_local);
  // The exporter's refusals are all usage errors (the address the user chose).
  return Status::Usage("--metrics-addr " + given + ": host master " + k +
                       " of this machine listens on port " + std::to_string(hp.port) + " + " + k +
                       " = " + std::to_string(hp.port + host_local) +
                       " (under mpirun, host master k of a machine listens on the given "
                       "port + k), and " +
                       why);
}

Status JoinHosts(int* argc, char*** argv, std::unique_ptr<Hosts>* out) {
  const int ranks = LaunchedRanks();
#ifdef SHMTRAIN_MPI
  if (ranks > 0) return JoinMpiHosts(argc, argv, out);
#else
  (void)argc;
  (void)argv;
  if (ranks > 1) {
    return Status::Usage("started by mpirun with " + std::to_string(ranks) +
                         " ranks, but this shmtrain was built without MPI (install "
                         "libopenmpi-dev and build again; docs/hosts.md)");
  }
#endif
  *out = std::make_unique<SingleHost>();
  return Status::Ok();
}

}  // namespace shmtrain::master
