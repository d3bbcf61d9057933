// Async training across hosts on a rate-limited network, on this machine. Each "host" is an MPI
// rank (a host master with its own local workers) and every job runs in a private network
// namespace of its own whose loopback is shaped by a token bucket (tbf) at 10 or 1 Gbit/s:
//
//   timeout -k 10 T unshare --net sh -c 'ip link set lo up &&
//       tc qdisc add dev lo root tbf rate 1gbit burst 1mb latency 50ms &&
//       exec mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp
//            --mca btl_tcp_if_include lo -np H shmtrain train --mode async --rule R ...'
//
// (rate 10gbit for the other link; --burst and --latency change the bucket). Why 1mb and 50ms:
// measured here with a raw MPI_Allreduce of 16 MB between 2 ranks (bench/combine_probe.cc), that
// bucket delivered 0.96..1.03 Gbit/s at 1gbit and 9.2..9.6 Gbit/s at 10gbit on a quiet machine,
// with no drops. A queue of 10 ms (1.25 MB at 1gbit) dropped 300..750 packets per probe (TCP
// retransmissions, which the link should not add); a 4mb burst let a 16 MB transfer run 5..9% above
// 1 Gbit/s. The bucket's own limit shows in every run: the probe below measures it, inside the
// namespace, at each rate and without shaping (the machine's loopback limit, which 10gbit may
// exceed on 2 busy cores). lo is one device: every rank's traffic, both directions, crosses the one
// qdisc, so the rate is shared by all hosts, as on a hub; on a switch each host would have its own
// full-duplex port at that rate, so H = 4 here is the harsher of the two.
//
// Parts (--parts, default all of them):
//   probe  the raw MPI_Allreduce (and the host masters' combine) of 16 MB between 2 ranks in the
//          namespace at each rate and unshaped, before the jobs and again after them: the
//          achieved rate beside the nominal one. With 2 ranks any allreduce moves each rank's
//          vector to the other once: 2 x 16 MB through lo (tc's byte counter agrees).
//   mlp    H in {2,4} x P in {1,2} workers per host x {10,1} Gbit/s x {sync, asgd, dc-asgd-c,
//          dc-asgd-a}: Fashion-MNIST (Debian's dataset-fashion-mnist; minmax scaling, validated on
//          the 10,000 test images), MLP 784-256-10 (tanh, xent), batch 128, plain SGD at lr 0.1
//          in every mode (momentum does not exist in async mode: sync gets the same optimizer so
//          that the columns differ only by how updates combine), --mlp-epochs epochs (default 2).
//   cnn    the same on cnn-small (batch 64, lr 0.1), --cnn-epochs (default 1). cnn-small costs
//          ~65 MFLOP a training sample, ~1300 samples/s a core here, so an epoch on 2 cores takes
//          25..45 s before the link: by default (--cnn reduced) only 1 Gbit/s at P = 1 (8 cells);
//          --cnn full runs the mlp part's 32 cells, --cnn off none.
//   sweep  --push-every K for K in --sweep-k (default 1,2,4,8,16,32) at H = 2, P = 2, MLP,
//          1 Gbit/s, dc-asgd-a, --sweep-epochs (default 5: an MLP epoch of async takes well
//          under a second), --sweep-runs (default 3): updates/s, cross-host staleness, pushes,
//          test accuracy.
//   h1     one host, no mpirun, no namespace: `shmtrain train --mode async` with the MLP's flags,
//          P = 2, each rule, --h1-epochs (default 5): updates/s medians, to quote against the
//          previous release's async (compared elsewhere; --shmtrain runs another binary).
// Per cell: samples/s and updates/s (the summary's samples_per_s; steps or updates over wall_s,
// which includes the validations), test accuracy (val_accuracy), cross-host staleness tau
// (mean, p50, p90, max), pushes sent / applied / dropped and their bytes, and the link's use:
// sync's combine bytes (each host sends 2(H-1)/H of the parameters a step) or async's pushes
// and their replies (twice push_bytes), over wall_s, in Gbit/s. Then the ratios: DC-ASGD-a
// against ASGD test accuracy at equal epochs, async against sync samples/s on the 1 Gbit/s
// link. Runs of a part are interleaved (--runs, default 1: the full matrix is long); with
// several runs a cell prints medians. A field the binary does not print is "-"; a job that
// fails prints its exit status and what it said without stopping the others. Each job has a
// deadline (--timeout, default 1800 s). Without root, or when unshare or tc fail, prints why and
// exits 0.
//
// Usage: hosts_async_bench [--parts probe,mlp,cnn,sweep,h1] [--runs R] [--mlp-epochs E]
//   [--cnn reduced|full|off] [--cnn-epochs E] [--push-every K] [--sweep-k 1,2,...]
//   [--sweep-runs R] [--sweep-epochs E] [--h1-runs R] [--h1-epochs E] [--burst B]
//   [--latency L] [--timeout S] [--shmtrain PATH]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

using shmtrain::bench::Median;
using Fields = std::map<std::string, double>;

const std::string kData = "/usr/share/datasets/fashion-mnist/";
const std::string kMpirun = MPIRUN_BIN;
constexpr const char* kCnnSmall =
    "conv2d(32,5,padding=2),relu,maxpool2d(2),conv2d(64,5,padding=2),relu,maxpool2d(2),flatten,"
    "linear(128),relu,linear(10)";
constexpr int64_t kProbeFloats = 4194304;  // 16 MB
const std::vector<std::string> kModes = {"sync", "asgd", "dc-asgd-c", "dc-asgd-a"};

struct Link {
  const char* name;  // as printed
  const char* rate;  // tc's rate; "" = not shaped
  double gbit;       // nominal
};
const Link kUnshaped{"none", "", 0};
const Link k10G{"10G", "10gbit", 10};
const Link k1G{"1G", "1gbit", 1};

struct Settings {
  std::set<std::string> parts = {"probe", "mlp", "cnn", "sweep", "h1"};
  int runs = 1, mlp_epochs = 2, cnn_epochs = 1;
  std::string cnn = "reduced";
  int push_every = 0;  // 0: the binary's default
  std::vector<int> sweep_k = {1, 2, 4, 8, 16, 32};
  int sweep_runs = 3, sweep_epochs = 5;
  int h1_runs = 5, h1_epochs = 5;
  std::string burst = "1mb", latency = "50ms";
  int timeout_s = 1800;
  std::string shmtrain = SHMTRAIN_BIN;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "hosts_async_bench: %s\nusage: hosts_async_bench [--parts probe,mlp,cnn,sweep,h1] "
               "[--runs R] [--mlp-epochs E] [--cnn reduced|full|off] [--cnn-epochs E] "
               "[--push-every K] [--sweep-k 1,2,...] [--sweep-runs R] [--sweep-epochs E] "
               "[--h1-runs R] [--h1-epochs E] [--burst B] [--latency L] [--timeout S] "
               "[--shmtrain PATH]\n",
               why);
  std::exit(2);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(',', b)) != std::string::npos; b = e + 1)
    out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

int Positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || n < 1) Usage((flag + " takes an integer >= 1").c_str());
  return static_cast<int>(n);
}

Settings Parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage((flag + " needs a value").c_str());
    const std::string v = argv[++i];
    if (flag == "--parts") {
      s.parts.clear();
      for (const std::string& p : Split(v)) {
        if (p != "probe" && p != "mlp" && p != "cnn" && p != "sweep" && p != "h1") {
          Usage(("unknown part " + p).c_str());
        }
        s.parts.insert(p);
      }
    } else if (flag == "--runs") {
      s.runs = Positive(flag, v);
    } else if (flag == "--mlp-epochs") {
      s.mlp_epochs = Positive(flag, v);
    } else if (flag == "--cnn") {
      if (v != "reduced" && v != "full" && v != "off") Usage("--cnn is reduced, full or off");
      s.cnn = v;
    } else if (flag == "--cnn-epochs") {
      s.cnn_epochs = Positive(flag, v);
    } else if (flag == "--push-every") {
      s.push_every = Positive(flag, v);
    } else if (flag == "--sweep-k") {
      s.sweep_k.clear();
      for (const std::string& k : Split(v)) s.sweep_k.push_back(Positive(flag, k));
    } else if (flag == "--sweep-runs") {
      s.sweep_runs = Positive(flag, v);
    } else if (flag == "--sweep-epochs") {
      s.sweep_epochs = Positive(flag, v);
    } else if (flag == "--h1-runs") {
      s.h1_runs = Positive(flag, v);
    } else if (flag == "--h1-epochs") {
      s.h1_epochs = Positive(flag, v);
    } else if (flag == "--burst") {
      s.burst = v;
    } else if (flag == "--latency") {
      s.latency = v;
    } else if (flag == "--timeout") {
      s.timeout_s = Positive(flag, v);
    } else if (flag == "--shmtrain") {
      s.shmtrain = v;
    } else {
      Usage(("unknown flag " + flag).c_str());
    }
  }
  return s;
}

// ---- Running a job.

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string Join(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) out += (out.empty() ? "" : " ") + Quote(a);
  return out;
}

std::string TcCommand(const Settings& s, const Link& link) {
  return std::string("tc qdisc add dev lo root tbf rate ") + link.rate + " burst " + s.burst +
         " latency " + s.latency;
}

// The shell command of a job: `argv` under mpirun with `hosts` ranks, in a network namespace of
// its own whose lo is shaped as `link` says, within the deadline.
std::string NamespacedCommand(const Settings& s, const Link& link, int hosts,
                              const std::vector<std::string>& argv) {
  std::string script = "ip link set lo up && ";
  if (*link.rate) script += TcCommand(s, link) + " && ";
  script += "exec " + Quote(kMpirun) +
            " --allow-run-as-root --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo"
            " -np " +
            std::to_string(hosts) + " " + Join(argv);
  return "timeout -k 10 " + std::to_string(s.timeout_s) + " unshare --net sh -c " + Quote(script);
}

struct Output {
  int status = -1;                 // the exit code, 128 + N for signal N
  std::vector<std::string> lines;  // everything it printed (stdout and stderr)
  // The first or the last line of a JSON event; "" when none came.
  std::string Event(const std::string& event, bool last = true) const {
    std::string hit;
    for (const std::string& l : lines) {
      if (l.find("\"event\":\"" + event + "\"") == std::string::npos) continue;
      hit = l;
      if (!last) break;
    }
    return hit;
  }
  std::string Last(const std::string& event) const { return Event(event, true); }
  // What a failure said: the message of the first JSON error event (host 0's own), else the
  // last line that is not mpirun's (its boxes between lines of dashes, its "[node:pid] ..."
  // notes), else mpirun's first.
  std::string Said() const {
    const nlohmann::json e =
        nlohmann::json::parse(Event("error", false), nullptr, /*allow_exceptions=*/false);
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
    std::string said, mpirun;
    bool in_box = false;
    for (const std::string& l : lines) {
      if (l.find_first_not_of('-') == std::string::npos) {
        if (!l.empty()) in_box = !in_box;
      } else if (l[0] != '{') {
        if (!in_box && l[0] != '[')
          said = l;
        else if (mpirun.empty())
          mpirun = l;
      }
    }
    return said.empty() ? mpirun : said;
  }
};

Output Run(const std::string& cmd) {
  Output out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) {
    std::perror("hosts_async_bench: popen");
    std::exit(1);
  }
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) {
    line += buf;
    if (line.back() != '\n') continue;
    line.pop_back();
    out.lines.push_back(line);
    line.clear();
  }
  if (!line.empty()) out.lines.push_back(line);
  const int st = pclose(f);
  out.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return out;
}

// ---- One training job's result.

double Get(const Fields& f, const std::string& key) {
  const auto it = f.find(key);
  return it == f.end() ? NAN : it->second;
}

// The numbers of a JSON event: null as NaN, booleans as 0/1, an array's elements as key[i]
// and its length as key#. Strings are left out. False when the line is not a JSON object.
bool Numbers(const std::string& line, Fields* f) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  for (const auto& [key, v] : j.items()) {
    if (v.is_number()) {
      (*f)[key] = v.get<double>();
    } else if (v.is_null()) {
      (*f)[key] = NAN;
    } else if (v.is_boolean()) {
      (*f)[key] = v.get<bool>() ? 1 : 0;
    } else if (v.is_array()) {
      (*f)[key + "#"] = static_cast<double>(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i].is_number()) (*f)[key + "[" + std::to_string(i) + "]"] = v[i].get<double>();
      }
    }
  }
  return true;
}

struct Outcome {
  bool ok = false;
  std::string why;  // a failure: the exit status and what the job said last
  Fields f;         // the summary's numbers, the segment's params, and the derived figures below
};

// Reads a training job's output. Derived: updates_per_s (updates, or sync's steps, over wall_s)
// and wire_gbit_s (the bytes the hosts sent, over wall_s: sync's combine, async's pushes).
Outcome Judge(const Output& out, int hosts, bool sync) {
  Outcome o;
  const std::string summary = out.Last("summary");
  if (out.status != 0 || summary.empty() || !Numbers(summary, &o.f)) {
    const std::string text = out.Said();
    o.why = "exit " + std::to_string(out.status) + (summary.empty() ? ", no summary" : "") +
            (text.empty() ? "" : ": " + text);
    return o;
  }
  Fields seg;
  if (Numbers(out.Last("segment"), &seg)) o.f["params"] = Get(seg, "params");
  const double wall = Get(o.f, "wall_s");
  const double updates = std::isnan(Get(o.f, "updates")) ? Get(o.f, "steps") : Get(o.f, "updates");
  o.f["updates_per_s"] = updates / wall;
  if (sync) {
    // Each host sends 2(H-1)/H of the gradient (float32) per step: reduce-scatter, allgather.
    o.f["wire_gbit_s"] =
        Get(o.f, "steps") * 2.0 * (hosts - 1) * Get(o.f, "params") * 4 * 8 / wall / 1e9;
  } else {
    // Every push (the summary's push_bytes, over all hosts) is answered with the part it
    // updated, the same number of floats.
    o.f["wire_gbit_s"] = 2 * Get(o.f, "push_bytes") * 8 / wall / 1e9;
  }
  o.ok = true;
  return o;
}

// Medians over the runs that succeeded, key by key, NaNs left out (NaN when none has one).
Fields Medians(const std::vector<Outcome>& runs) {
  std::map<std::string, std::vector<double>> all;
  for (const Outcome& o : runs) {
    if (!o.ok) continue;
    for (const auto& [k, v] : o.f) {
      auto& vs = all[k];
      if (!std::isnan(v)) vs.push_back(v);
    }
  }
  Fields m;
  for (const auto& [k, vs] : all) m[k] = vs.empty() ? NAN : Median(vs);
  return m;
}

std::string Fmt(double v, const char* fmt) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// ---- The training cells.

struct Model {
  const char* name;
  const char* text;  // as printed
  std::vector<std::string> args;
};

Model Mlp() {
  return {"mlp", "MLP 784-256-10 (tanh), batch 128", {"--layers", "784,256,10", "--batch", "128"}};
}
Model Cnn() {
  return {"cnn-small", "cnn-small, batch 64", {"--model", kCnnSmall, "--batch", "64"}};
}

struct Cell {
  Model model;
  Link link;
  int hosts = 1, workers = 1;
  std::string mode;  // "sync" or an async rule
  int epochs = 1;
  int push_every = 0;  // 0: not given
  std::vector<Outcome> runs;
  Fields med;
  bool async() const { return mode != "sync"; }
};

std::vector<std::string> TrainArgs(const Settings& s, const Cell& c) {
  std::vector<std::string> a = {s.shmtrain,     "train",
                                "--data",       kData + "train-images-idx3-ubyte.gz",
                                "--labels",     kData + "train-labels-idx1-ubyte.gz",
                                "--val-data",   kData + "t10k-images-idx3-ubyte.gz",
                                "--val-labels", kData + "t10k-labels-idx1-ubyte.gz",
                                "--normalize",  "minmax",
                                "--loss",       "xent"};
  a.insert(a.end(), c.model.args.begin(), c.model.args.end());
  for (const std::string& x :
       {std::string("--lr"), std::string("0.1"), std::string("--epochs"), std::to_string(c.epochs),
        std::string("--workers"), std::to_string(c.workers), std::string("--log-format"),
        std::string("json"), std::string("--log-every"), std::string("0"),
        std::string("--no-progress"), std::string("--no-metrics"), std::string("--mode")}) {
    a.push_back(x);
  }
  if (c.async()) {
    a.insert(a.end(), {"async", "--rule", c.mode});
    if (c.push_every > 0) a.insert(a.end(), {"--push-every", std::to_string(c.push_every)});
  } else {
    a.push_back("sync");
  }
  return a;
}

std::string Label(const Cell& c) {
  std::string l = std::string(c.model.name) + " " + c.link.name + " H=" + std::to_string(c.hosts) +
                  " P=" + std::to_string(c.workers) + " " + c.mode;
  if (c.push_every > 0) l += " K=" + std::to_string(c.push_every);
  return l;
}

// Runs every cell `runs` times, interleaved (run r of every cell before run r + 1 of any), with a
// line of progress on stderr per job; then each cell's medians.
void RunCells(const Settings& s, int runs, std::vector<Cell>* cells) {
  const size_t total = runs * cells->size();
  size_t done = 0;
  for (int r = 0; r < runs; ++r) {
    for (Cell& c : *cells) {
      const std::vector<std::string> argv = TrainArgs(s, c);
      const std::string cmd =
          c.hosts > 1 ? NamespacedCommand(s, c.link, c.hosts, argv)
                      : "timeout -k 10 " + std::to_string(s.timeout_s) + " " + Join(argv);
      const auto t0 = std::chrono::steady_clock::now();
      c.runs.push_back(Judge(Run(cmd), c.hosts, !c.async()));
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Outcome& o = c.runs.back();
      o.f["job_s"] = secs;
      std::fprintf(stderr, "[%zu/%zu] %s: %s (%.1f s)\n", ++done, total, Label(c).c_str(),
                   o.ok ? (Fmt(Get(o.f, "samples_per_s"), "%.0f") + " samples/s, test accuracy " +
                           Fmt(Get(o.f, "val_accuracy"), "%.4f"))
                              .c_str()
                        : ("failed, " + o.why).c_str(),
                   secs);
    }
  }
  for (Cell& c : *cells) c.med = Medians(c.runs);
}

std::string OkText(const Cell& c) {
  int ok = 0;
  std::string why;
  for (const Outcome& o : c.runs) {
    ok += o.ok;
    if (!o.ok) why = o.why;
  }
  if (ok == static_cast<int>(c.runs.size())) return "";
  return "  [" + std::to_string(ok) + "/" + std::to_string(c.runs.size()) + " ran; " + why + "]";
}

std::string HostUpdates(const Fields& m) {
  const double n = Get(m, "host_updates#");
  if (std::isnan(n)) return "-";
  std::string out;
  for (int i = 0; i < static_cast<int>(n); ++i) {
    out += (i ? "/" : "") + Fmt(Get(m, "host_updates[" + std::to_string(i) + "]"), "%.0f");
  }
  return out;
}

void PrintHeader(bool with_k) {
  std::printf(
      "  %-4s %s %s %-9s %s %9s %8s %7s  %6s %5s %5s %5s  %8s %8s %8s %8s %7s %6s %6s  %s\n",
      "link", "H", "P", "mode", with_k ? " K" : "", "samples/s", "upd/s", "test acc", "tau", "p50",
      "p90", "max", "pushes", "applied", "dropped", "push MB", "wire Gb", "wall s", "job s",
      "host updates");
}

void PrintRow(const Cell& c, bool with_k) {
  const Fields& m = c.med;
  const double pb = Get(m, "push_bytes");
  std::printf(
      "  %-4s %d %d %-9s %s %9s %8s %7s  %6s %5s %5s %5s  %8s %8s %8s %8s %7s %6s %6s  %s%s\n",
      c.link.name, c.hosts, c.workers, c.mode.c_str(),
      with_k ? Fmt(c.push_every, "%2.0f").c_str() : "",
      Fmt(Get(m, "samples_per_s"), "%.0f").c_str(), Fmt(Get(m, "updates_per_s"), "%.1f").c_str(),
      Fmt(Get(m, "val_accuracy"), "%.4f").c_str(),
      Fmt(Get(m, "cross_staleness_mean"), "%.2f").c_str(),
      Fmt(Get(m, "cross_staleness_p50"), "%.0f").c_str(),
      Fmt(Get(m, "cross_staleness_p90"), "%.0f").c_str(),
      Fmt(Get(m, "cross_staleness_max"), "%.0f").c_str(),
      Fmt(Get(m, "pushes_sent"), "%.0f").c_str(), Fmt(Get(m, "pushes_applied"), "%.0f").c_str(),
      Fmt(Get(m, "pushes_dropped"), "%.0f").c_str(), Fmt(pb / 1e6, "%.1f").c_str(),
      Fmt(Get(m, "wire_gbit_s"), "%.3f").c_str(), Fmt(Get(m, "wall_s"), "%.1f").c_str(),
      Fmt(Get(m, "job_s"), "%.1f").c_str(), HostUpdates(m).c_str(), OkText(c).c_str());
}

const char* kLegend =
    "  samples/s: the summary's; upd/s: updates (sync: steps) / wall_s; tau: cross-host "
    "staleness mean, p50, p90, max;\n"
    "  pushes: sent, applied by the owner, dropped; push MB: the summary's push_bytes;\n"
    "  wire Gb: Gbit/s all hosts sent over wall_s (sync: the combine, 2(H-1)/H of the parameters "
    "per host and step;\n"
    "  async: the pushes and their replies, 2 x push MB); wall s: the summary's (training and its "
    "validations);\n"
    "  job s: the whole mpirun job (start-up, loading, and the final loss over the 60000 training "
    "rows, after wall s).\n";

std::vector<Cell> MatrixCells(const Settings& s, const Model& model, int epochs,
                              const std::vector<Link>& links, const std::vector<int>& hosts,
                              const std::vector<int>& workers) {
  std::vector<Cell> cells;
  for (const Link& l : links) {
    for (int h : hosts) {
      for (int p : workers) {
        for (const std::string& mode : kModes) {
          Cell c{model, l, h, p, mode, epochs, mode == "sync" ? 0 : s.push_every, {}, {}};
          cells.push_back(c);
        }
      }
    }
  }
  return cells;
}

void PrintMatrix(const Settings& s, const std::vector<Cell>& cells, int epochs, int runs,
                 const char* note) {
  if (cells.empty()) return;
  std::printf(
      "\n%s, Fashion-MNIST (60000 train / 10000 test, minmax), SGD lr 0.1, %d epoch%s, "
      "%s%s; push every: %s:\n",
      cells[0].model.text, epochs, epochs == 1 ? "" : "s",
      runs == 1 ? "1 run" : ("medians of " + std::to_string(runs) + " interleaved runs").c_str(),
      note, s.push_every > 0 ? std::to_string(s.push_every).c_str() : "the binary's default");
  PrintHeader(false);
  for (const Cell& c : cells) PrintRow(c, false);
  std::fputs(kLegend, stdout);
  std::fflush(stdout);
}

const Cell* Find(const std::vector<Cell>& cells, const Cell& like, const std::string& mode) {
  for (const Cell& c : cells) {
    if (c.model.name == like.model.name && std::string(c.link.name) == like.link.name &&
        c.hosts == like.hosts && c.workers == like.workers && c.mode == mode) {
      return &c;
    }
  }
  return nullptr;
}

void PrintRatios(const std::vector<Cell>& cells) {
  if (cells.empty()) return;
  std::printf(
      "\nDC-ASGD-a against ASGD, test accuracy at equal epochs (dc-asgd-a - asgd, and the "
      "ratio):\n");
  for (const Cell& c : cells) {
    if (c.mode != "dc-asgd-a") continue;
    const Cell* a = Find(cells, c, "asgd");
    const double dc = Get(c.med, "val_accuracy"), as = a ? Get(a->med, "val_accuracy") : NAN;
    std::printf("  %-9s %-3s H=%d P=%d: asgd %s, dc-asgd-a %s: %s points (x%s)\n", c.model.name,
                c.link.name, c.hosts, c.workers, Fmt(as, "%.4f").c_str(), Fmt(dc, "%.4f").c_str(),
                Fmt(100 * (dc - as), "%+.2f").c_str(), Fmt(dc / as, "%.3f").c_str());
  }
  std::printf("async against sync on the 1 Gbit/s link, samples/s (async / sync):\n");
  for (const Cell& c : cells) {
    if (c.mode != "sync" || std::string(c.link.name) != "1G") continue;
    const double sync = Get(c.med, "samples_per_s");
    std::printf("  %-9s H=%d P=%d: sync %s samples/s;", c.model.name, c.hosts, c.workers,
                Fmt(sync, "%.0f").c_str());
    for (const char* rule : {"asgd", "dc-asgd-c", "dc-asgd-a"}) {
      const Cell* a = Find(cells, c, rule);
      std::printf(" %s x%s", rule,
                  Fmt(a ? Get(a->med, "samples_per_s") / sync : NAN, "%.2f").c_str());
    }
    std::printf("\n");
  }
}

// ---- The network probe.

struct ProbeResult {
  double allreduce_us = NAN, combine_us = NAN;
};

double ProbeField(const std::string& line, const std::string& key) {
  const size_t p = line.find(" " + key + " ");
  return p == std::string::npos ? NAN : std::atof(line.c_str() + p + key.size() + 2);
}

ProbeResult Probe(const Settings& s, const Link& link) {
  const Output out =
      Run(NamespacedCommand(s, link, 2, {COMBINE_PROBE_BIN, std::to_string(kProbeFloats), "2"}));
  ProbeResult r;
  for (const std::string& l : out.lines) {
    if (l.rfind("combine_probe ", 0) == 0) {
      r.allreduce_us = ProbeField(l, "allreduce_us");
      r.combine_us = ProbeField(l, "combine_us");
    }
  }
  if (out.status != 0 || std::isnan(r.allreduce_us)) {
    std::printf("  %-5s probe failed: exit %d: %s\n", link.name, out.status, out.Said().c_str());
  }
  return r;
}

// The achieved rate, Gbit/s, of moving 2 x the probe's bytes through lo in `us`.
double ProbeGbit(double us) {
  return 2.0 * kProbeFloats * 4 * 8 / (us * 1e3);
}

void PrintProbes(const Settings& s, const char* when) {
  std::printf(
      "\nlink check %s: raw MPI_Allreduce of %.1f MB between 2 ranks (2 x %.1f MB through "
      "lo) in the namespace, tbf burst %s latency %s; median of 20:\n",
      when, kProbeFloats * 4 / 1e6, kProbeFloats * 4 / 1e6, s.burst.c_str(), s.latency.c_str());
  double unshaped = NAN;
  for (const Link& l : {kUnshaped, k10G, k1G}) {
    const ProbeResult r = Probe(s, l);
    if (std::isnan(r.allreduce_us)) continue;
    const double g = ProbeGbit(r.allreduce_us);
    if (!*l.rate) unshaped = g;
    std::printf(
        "  %-11s allreduce %7.1f ms = %6.2f Gbit/s%s; host combine %7.1f ms = %6.2f Gbit/s\n",
        *l.rate ? (std::string("nominal ") + l.name).c_str() : "unshaped", r.allreduce_us / 1e3, g,
        *l.rate ? (" (" + Fmt(g / l.gbit, "%.2f") + " of nominal, " + Fmt(g / unshaped, "%.2f") +
                   " of unshaped)")
                      .c_str()
                : " (the machine's limit now)",
        r.combine_us / 1e3, ProbeGbit(r.combine_us));
  }
  std::printf(
      "  a shaped link delivers at most the lower of its nominal rate and the unshaped one\n");
  std::fflush(stdout);
}

// ---- Preconditions.

// /proc/loadavg's line: other work may share the cores.
std::string LoadAverage() {
  const Output out = Run("cat /proc/loadavg");
  return out.lines.empty() ? "unknown" : out.lines[0];
}

// Empty when a shaped namespace can be made; otherwise what is missing.
std::string NamespaceProblem(const Settings& s) {
  if (geteuid() != 0) return "needs root for unshare --net and tc";
  const Output out =
      Run("unshare --net sh -c " + Quote("ip link set lo up && " + TcCommand(s, k1G)));
  if (out.status != 0) {
    return "unshare --net or tc failed (" + out.Said() +
           "): needs root, util-linux's unshare, iproute2's ip and tc, and the sch_tbf module";
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const Settings s = Parse(argc, argv);
  if (const std::string why = NamespaceProblem(s); !why.empty()) {
    std::printf("hosts_async_bench: %s: skipped\n", why.c_str());
    return 0;
  }
  if (access((kData + "train-images-idx3-ubyte.gz").c_str(), R_OK) != 0) {
    std::printf(
        "hosts_async_bench: no Fashion-MNIST in %s (Debian's dataset-fashion-mnist): "
        "skipped\n",
        kData.c_str());
    return 0;
  }
  std::printf("hosts_async_bench: %s; load average %s\n", s.shmtrain.c_str(),
              LoadAverage().c_str());
  if (s.parts.count("probe")) PrintProbes(s, "before the jobs");

  std::vector<Cell> all;  // every matrix cell, for the ratios
  if (s.parts.count("mlp")) {
    std::vector<Cell> cells = MatrixCells(s, Mlp(), s.mlp_epochs, {k10G, k1G}, {2, 4}, {1, 2});
    RunCells(s, s.runs, &cells);
    PrintMatrix(s, cells, s.mlp_epochs, s.runs, "");
    all.insert(all.end(), cells.begin(), cells.end());
  }
  if (s.parts.count("cnn") && s.cnn != "off") {
    const bool full = s.cnn == "full";
    std::vector<Cell> cells = full
                                  ? MatrixCells(s, Cnn(), s.cnn_epochs, {k10G, k1G}, {2, 4}, {1, 2})
                                  : MatrixCells(s, Cnn(), s.cnn_epochs, {k1G}, {2, 4}, {1});
    RunCells(s, s.runs, &cells);
    PrintMatrix(s, cells, s.cnn_epochs, s.runs,
                full ? "" : "; reduced (1 Gbit/s, P = 1 only; --cnn full for the whole matrix)");
    all.insert(all.end(), cells.begin(), cells.end());
  }
  if (s.parts.count("sweep")) {
    std::vector<Cell> cells;
    for (int k : s.sweep_k)
      cells.push_back({Mlp(), k1G, 2, 2, "dc-asgd-a", s.sweep_epochs, k, {}, {}});
    RunCells(s, s.sweep_runs, &cells);
    std::printf(
        "\n--push-every sweep: MLP 784-256-10, H=2, P=2, 1 Gbit/s, dc-asgd-a, %d epoch%s, "
        "%s:\n",
        s.sweep_epochs, s.sweep_epochs == 1 ? "" : "s",
        s.sweep_runs == 1
            ? "1 run"
            : ("medians of " + std::to_string(s.sweep_runs) + " interleaved runs").c_str());
    PrintHeader(true);
    for (const Cell& c : cells) PrintRow(c, true);
    std::fflush(stdout);
  }

  if (s.parts.count("h1")) {
    std::vector<Cell> cells;
    for (const char* rule : {"asgd", "dc-asgd-c", "dc-asgd-a"}) {
      cells.push_back({Mlp(), kUnshaped, 1, 2, rule, s.h1_epochs, 0, {}, {}});
    }
    RunCells(s, s.h1_runs, &cells);
    std::printf(
        "\none host (no mpirun), async, MLP 784-256-10 on Fashion-MNIST, P=2, %d epochs, "
        "medians of %d interleaved runs:\n",
        s.h1_epochs, s.h1_runs);
    for (const Cell& c : cells) {
      std::vector<double> ups;
      for (const Outcome& o : c.runs) {
        if (o.ok) ups.push_back(Get(o.f, "updates_per_s"));
      }
      std::printf(
          "  %-9s %8s updates/s (min %s, max %s), %8s samples/s, test accuracy %s%s\n",
          c.mode.c_str(), Fmt(Get(c.med, "updates_per_s"), "%.1f").c_str(),
          Fmt(ups.empty() ? NAN : *std::min_element(ups.begin(), ups.end()), "%.1f").c_str(),
          Fmt(ups.empty() ? NAN : *std::max_element(ups.begin(), ups.end()), "%.1f").c_str(),
          Fmt(Get(c.med, "samples_per_s"), "%.0f").c_str(),
          Fmt(Get(c.med, "val_accuracy"), "%.4f").c_str(), OkText(c).c_str());
    }
    std::fflush(stdout);
  }
  if (s.parts.count("probe")) PrintProbes(s, "after the jobs");
  PrintRatios(all);
  std::printf("load average at the end: %s\n", LoadAverage().c_str());
  return 0;
}
