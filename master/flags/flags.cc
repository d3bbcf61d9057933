// The flag table: every flag once (master/flags/flags.h says what comes from it). The value parsers
// below make every message name the flag and quote the value as typed.
#include "master/flags/flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "core/decimal.h"
#include "data/augment.h"
#include "data/format.h"
#include "nn/cpu.h"
#include "nn/layer.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"

namespace shmtrain::master {
namespace {

// ---- where a value lives: a field of the TrainOptions (Opt; In for a field of one of its
// members, such as the data file's options), or of the Command itself.
template <class T>
struct Field {
  T TrainOptions::*train = nullptr;
  T Command::*command = nullptr;
  T& (*in)(TrainOptions&) = nullptr;
  const T& (*in_const)(const TrainOptions&) = nullptr;
  T& Of(Command* c) const {
    if (in != nullptr) return in(c->train);
    return train != nullptr ? c->train.*train : c->*command;
  }
  const T& Of(const Command& c) const {
    if (in_const != nullptr) return in_const(c.train);
    return train != nullptr ? c.train.*train : c.*command;
  }
};
template <class T>
Field<T> Opt(T TrainOptions::*p) {
  return {p, nullptr};
}
template <class T>
Field<T> Cmd(T Command::*p) {
  return {nullptr, p};
}
// The member at the end of a path of members: In<&TO::file, &DataFileOptions::format>().
template <auto... Members>
auto In() {
  using T = std::remove_cvref_t<decltype((std::declval<TrainOptions&>() .* ... .* Members))>;
  return Field<T>{
      .in = [](TrainOptions& o) -> T& { return (o .* ... .* Members); },
      .in_const = [](const TrainOptions& o) -> const T& { return (o .* ... .* Members); }};
}

Status Expected(const std::string& flag, const char* what, std::string_view got) {
  return Status::Usage(flag + ": expected " + what + ", got '" + std::string(got) + "'");
}

Status OutOfRange(const FlagDef& f, std::string_view v) {
  return Status::Usage(f.name + ": " + std::string(v) + " is out of range (" +
                       std::to_string(f.limits.ilo) + ".." + std::to_string(f.limits.ihi) + ")");
}

// x within f's real limits: "" or what is wrong, quoting x as typed.
std::string RealRefusal(const FlagDef& f, double x, std::string_view typed) {
  const Limits& l = f.limits;
  const bool above = l.lo_open ? x > l.lo : x >= l.lo;
  const bool below = l.hi_open ? x < l.hi : x <= l.hi;
  if (l.kind != Limits::Kind::kReal || (above && below)) return "";
  const bool interval = std::isfinite(l.hi);
  return "must be " + std::string(interval ? "in " : "a finite number ") + l.text + ", got " +
         std::string(typed);
}

// "100ms", "86400s": a duration limit as the help states it.
std::string DurationText(double s) {
  return s > 0 && s < 1 ? Fmt("%gms", s * 1000) : Fmt("%gs", s);
}

template <class T>
FlagValue Int(Field<T> at) {
  return {[at](Command* c, const FlagDef& f, std::string_view v) {
            long long x = 0;
            const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
            if (ec != std::errc() || p != v.data() + v.size()) {
              return Expected(f.name, "an integer", v);
            }
            if (x < f.limits.ilo || x > f.limits.ihi) return OutOfRange(f, v);
            at.Of(c) = static_cast<T>(x);
            return Status::Ok();
          },
          [at](const Command& c, const FlagDef&) { return std::to_string(at.Of(c)); }};
}

// A finite number. kFloat32: one the workers compute with (learning rate, optimizer and async
// rule settings), inside float32's range and not a nonzero value that float32 makes 0 (--eps
// 1e-320 would pass "> 0" here and be 0 for the workers).
enum class Precision { kDouble, kFloat32 };

Status CheckFloat32(const std::string& flag, double x, std::string_view v) {
  if (std::fabs(x) > std::numeric_limits<float>::max()) {
    return Status::Usage(flag + ": " + std::string(v) +
                         " is beyond float32's range (about 3.4e38), the precision the "
                         "workers compute in");
  }
  if (x != 0 && static_cast<float>(x) == 0) {
    return Status::Usage(flag + ": " + std::string(v) +
                         " is 0 in float32, the precision the workers compute in (its "
                         "smallest positive number is about 1.4e-45)");
  }
  return Status::Ok();
}

// The number v, finite, or a refusal naming `flag`.
Status ParseNumber(const std::string& flag, std::string_view v, double* x) {
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *x);
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(*x)) {
    return Expected(flag, "a finite number", v);
  }
  return Status::Ok();
}

std::string ShowReal(double x) { return std::isnan(x) ? "" : ShortestDecimal(x); }

// A default as the help writes it: 1e-8, not 1e-08.
std::string Written(double x) {
  std::string s = ShortestDecimal(x);
  const size_t e = s.find('e');
  if (e != std::string::npos && e + 2 < s.size() && s[e + 2] == '0') s.erase(e + 2, 1);
  return s;
}

FlagValue Real(Field<double> at, Precision precision) {
  return {[at, precision](Command* c, const FlagDef& f, std::string_view v) {
            double x = 0;
            if (Status s = ParseNumber(f.name, v, &x); !s.ok()) return s;
            if (precision == Precision::kFloat32) {
              if (Status s = CheckFloat32(f.name, x, v); !s.ok()) return s;
            }
            if (const std::string why = RealRefusal(f, x, v); !why.empty()) {
              return Status::Usage(f.name + ": " + why);
            }
            at.Of(c) = x;
            return Status::Ok();
          },
          [at](const Command& c, const FlagDef&) { return ShowReal(at.Of(c)); }};
}

// A duration: a number with a unit (us, ms, s, m, h) or plain seconds, e.g. 50ms, 1.5s.
std::optional<double> ParseSeconds(std::string_view v) {
  double x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || !std::isfinite(x) || x < 0) return std::nullopt;
  const std::string_view unit(p, v.data() + v.size() - p);
  if (unit.empty() || unit == "s") return x;
  if (unit == "ms") return x * 1e-3;
  if (unit == "us") return x * 1e-6;
  if (unit == "m") return x * 60;
  if (unit == "h") return x * 3600;
  return std::nullopt;
}

FlagValue Seconds(Field<double> at) {
  return {[at](Command* c, const FlagDef& f, std::string_view v) {
            const std::optional<double> s = ParseSeconds(v);
            if (!s) return Expected(f.name, "a duration such as 50ms, 2s or 1m", v);
            const Limits& l = f.limits;
            if ((l.lo_open ? *s <= l.lo : *s < l.lo) || *s > l.hi) {
              return Status::Usage(f.name + ": " +
                                   (l.refusal.empty() ? "must be between " + DurationText(l.lo) +
                                                            " and " + DurationText(l.hi) +
                                                            ", got " + Fmt("%gs", *s)
                                                      : l.refusal));
            }
            at.Of(c) = *s;
            return Status::Ok();
          },
          [at](const Command& c, const FlagDef&) { return ShortestDecimal(at.Of(c)) + "s"; }};
}

FlagValue Text(Field<std::string> at) {
  return {[at](Command* c, const FlagDef& f, std::string_view v) {
            if (v.empty()) return Status::Usage(f.name + ": needs a value");
            at.Of(c) = std::string(v);
            return Status::Ok();
          },
          [at](const Command& c, const FlagDef&) { return at.Of(c); }};
}

// A flag without a value: given, the field takes `value`.
FlagValue Switch(Field<bool> at, bool value) {
  return {[at, value](Command* c, const FlagDef&, std::string_view) {
            at.Of(c) = value;
            return Status::Ok();
          },
          [at, value](const Command& c, const FlagDef&) {
            return std::string(at.Of(c) == value ? "given" : "");
          }};
}

// "--mode: unknown value 'x' (known: sync, async)"; `known` defaults to f.arg's names.
Status Unknown(const FlagDef& f, std::string_view v, const std::string& known = "") {
  std::string names = known;
  for (size_t i = 0; known.empty() && i < f.arg.size(); ++i) {
    names += f.arg[i] == '|' ? std::string(", ") : std::string(1, f.arg[i]);
  }
  return Status::Usage(f.name + ": unknown value '" + std::string(v) + "' (known: " + names + ")");
}

// f.arg's names: "sync|async" -> sync, async.
std::vector<std::string> Names(const FlagDef& f) {
  std::vector<std::string> names;
  for (size_t pos = 0; pos <= f.arg.size();) {
    const size_t bar = std::min(f.arg.find('|', pos), f.arg.size());
    names.push_back(f.arg.substr(pos, bar - pos));
    pos = bar + 1;
  }
  return names;
}

// One of the names f.arg lists; `known` is how a refusal lists them (default: f.arg's).
template <class T>
FlagValue Choice(Field<T> at, std::optional<T> (*parse)(std::string_view), std::string known = "") {
  return {[at, parse, known](Command* c, const FlagDef& f, std::string_view v) {
            const std::optional<T> e = parse(v);
            if (!e) return Unknown(f, v, known);
            at.Of(c) = *e;
            return Status::Ok();
          },
          [at, parse](const Command& c, const FlagDef& f) {
            for (const std::string& name : Names(f)) {
              if (parse(name) == at.Of(c)) return name;
            }
            return std::string();
          }};
}

// One of E's names (shmtrain/enum_names.h), which the flag's arg lists: EnumNames<E>("|").
template <NamedEnum E>
FlagValue Choice(Field<E> at) {
  return {[at](Command* c, const FlagDef& f, std::string_view v) {
            const std::optional<E> e = ParseEnum<E>(v);
            if (!e) return Unknown(f, v);
            at.Of(c) = *e;
            return Status::Ok();
          },
          [at](const Command& c, const FlagDef&) { return std::string(ToString(at.Of(c))); }};
}

// Comma-separated integers such as 1,5,1; nullopt when v is not that.
std::optional<std::vector<int>> ParseIntList(std::string_view v) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= v.size()) {
    const size_t comma = std::min(v.find(',', pos), v.size());
    const std::string_view cell = v.substr(pos, comma - pos);
    int x = 0;
    const auto [p, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), x);
    if (cell.empty() || ec != std::errc() || p != cell.data() + cell.size()) return std::nullopt;
    out.push_back(x);
    pos = comma + 1;
  }
  return out;
}

std::string ShowList(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// Numbers of updates separated by commas, such as 30,80 (a schedule's list flag): each a whole
// number, refused naming the one that is not; the schedule's check (nn/schedule.h) has the rest.
FlagValue StepList(Field<std::vector<int64_t>> at) {
  return {[at](Command* c, const FlagDef& f, std::string_view v) {
            std::vector<int64_t> out;
            const std::string in = " (in '" + std::string(v) + "')";
            for (size_t pos = 0; pos <= v.size();) {
              const size_t comma = std::min(v.find(',', pos), v.size());
              const std::string_view cell = v.substr(pos, comma - pos);
              int64_t x = 0;
              const auto [p, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), x);
              if (cell.empty()) return Status::Usage(f.name + ": a step is missing" + in);
              if (ec == std::errc::result_out_of_range && p == cell.data() + cell.size()) {
                return Status::Usage(f.name + ": " + std::string(cell) +
                                     " is out of range (1..2^63-1)" + in);
              }
              if (ec != std::errc() || p != cell.data() + cell.size()) {
                return Status::Usage(f.name + ": '" + std::string(cell) +
                                     "' is not a whole number of steps" + in);
              }
              out.push_back(x);
              pos = comma + 1;
            }
            at.Of(c) = std::move(out);
            return Status::Ok();
          },
          [at](const Command& c, const FlagDef&) {
            std::string s;
            for (int64_t x : at.Of(c)) s += (s.empty() ? "" : ",") + std::to_string(x);
            return s;
          }};
}

}  // namespace

const char* CommandName(uint32_t bit) {
  switch (bit) {
    case kTrainCmd: return "train";
    case kExampleCmd: return "example parabola";
    case kSimulateCmd: return "simulate";
    case kEvalCmd: return "eval";
    case kPredictCmd: return "predict";
    case kExportCmd: return "export";
    case kCleanupCmd: return "cleanup";
    case kLaunchCmd:
      return "launch";
  }
  return "?";
}

Limits IntRange(int64_t lo, int64_t hi) {
  Limits l{.kind = Limits::Kind::kInt, .ilo = lo, .ihi = hi};
  l.text = hi == kUnbounded   ? ">= " + std::to_string(lo)
           : hi == INT64_MAX ? std::to_string(lo) + "..2^63-1"
                             : std::to_string(lo) + ".." + std::to_string(hi);
  return l;
}

Limits RealRange(double lo, double hi, bool lo_open, bool hi_open) {
  Limits l{.kind = Limits::Kind::kReal, .lo = lo, .hi = hi, .lo_open = lo_open, .hi_open = hi_open};
  l.text = std::isfinite(hi) ? (lo_open ? "(" : "[") + ShortestDecimal(lo) + ", " +
                                   ShortestDecimal(hi) + (hi_open ? ")" : "]")
                             : (lo_open ? "> " : ">= ") + ShortestDecimal(lo);
  return l;
}

Limits SecondsRange(double lo, double hi) {
  return {.kind = Limits::Kind::kDuration, .lo = lo, .hi = hi,
          .text = DurationText(lo) + ".." + DurationText(hi)};
}

Limits Stated(std::string text) { return {.text = std::move(text)}; }

std::string HelpOf(const FlagDef& f) {
  std::string s = f.help;
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"{limits}", f.limits.text},
                                   {"{default}", f.Default()}}) {
    for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size())) {
      s.replace(at, key.size(), value);
    }
  }
  return s;
}

namespace {

constexpr const char* kWorkers = "Workers";
constexpr const char* kData = "Data";
constexpr const char* kModel = "Model";
constexpr const char* kLength = "Learning rate and length";
constexpr const char* kOptim = "Optimizer";
constexpr const char* kSchedule = "Learning-rate schedule";
constexpr const char* kVal = "Held-out data";
constexpr const char* kAsync = "Async mode (--mode async)";
constexpr const char* kOut = "Output and monitoring";
constexpr const char* kFault = "Fault tolerance";

constexpr uint32_t kTrainSim = kTrainCmd | kSimulateCmd;
constexpr uint32_t kTrainExample = kTrainCmd | kExampleCmd;
constexpr uint32_t kReadsData = kTrainSim | kEvalCmd | kPredictCmd;  // data and its format
// `simulate --workers`: how many workers one simulation may play.
constexpr int kMaxSimWorkers = 1024;

// A plain copy of a TrainOptions field into the RunConfig field of the same meaning.
template <auto From, auto To>
void Copy(const TrainOptions& o, shm::RunConfig* c) {
  c->*To = static_cast<std::remove_reference_t<decltype(c->*To)>>(o.*From);
}

// --label-col: an integer is an index, anything else a header name.
FlagValue LabelCol() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            if (v.empty()) return Status::Usage(f.name + ": needs a value");
            long long x = 0;
            const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
            if (ec != std::errc() || p != v.data() + v.size()) {
              c->train.file.label_name = std::string(v);
              c->train.file.label_col = -1;
              return Status::Ok();
            }
            if (x < f.limits.ilo || x > f.limits.ihi) return OutOfRange(f, v);
            c->train.file.label_col = static_cast<int>(x);
            c->train.file.label_name.clear();
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) {
            return c.train.file.label_name.empty() ? std::to_string(c.train.file.label_col)
                                                   : c.train.file.label_name;
          }};
}

// --layers: the sizes; their count and each size are plan::Validate's to check (after BuildModel,
// which refuses --layers with --model first).
FlagValue Layers() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            const std::optional<std::vector<int>> sizes = ParseIntList(v);
            if (!sizes) return Expected(f.name, "comma-separated layer sizes such as 1,5,1", v);
            c->train.mlp_layers = *sizes;
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) { return ShowList(c.train.mlp_layers); }};
}

// --input-shape: each dimension in range as it is read, for c = 0 is "not given" afterwards.
FlagValue InputShape() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            const std::optional<std::vector<int>> d = ParseIntList(v);
            if (!d || d->size() != 3) return Expected(f.name, "C,H,W such as 1,28,28", v);
            for (int x : *d) {
              if (x < 1 || x > kMaxWidth) {
                return Status::Usage(f.name + ": each of C,H,W must be between 1 and " +
                                     std::to_string(kMaxWidth) + ", got " + std::to_string(x) +
                                     " in " + std::string(v));
              }
            }
            c->train.input_shape = {(*d)[0], (*d)[1], (*d)[2]};
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) {
            const Shape& s = c.train.input_shape;
            return s.c == 0 ? std::string()
                            : ShowList({static_cast<int>(s.c), static_cast<int>(s.h),
                                        static_cast<int>(s.w)});
          }};
}

// --augment: its items checked as they are read, kept in their canonical text.
FlagValue Augment() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            data::AugmentSpec spec;
            if (Status s = data::ParseAugment(v, &spec); !s.ok()) {
              return Status::Usage(f.name + ": " + s.message());
            }
            c->train.augment = spec.Text();
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) { return c.train.augment; }};
}

// The segment's words of --augment (validated: it parses).
void AugmentToWorkers(const TrainOptions& o, shm::RunConfig* c) {
  data::AugmentSpec spec;
  if (!o.augment.empty()) (void)data::ParseAugment(o.augment, &spec);  // Validate parsed it
  const auto words = spec.Encode();
  static_assert(sizeof c->augment == sizeof words, "one RunConfig word an item");
  std::copy(words.begin(), words.end(), c->augment);
}

// --loss, remembered as given: --task then checks against it instead of picking it.
FlagValue LossValue() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            c->train.loss_given = true;
            const std::optional<Loss> l = ParseEnum<Loss>(v);
            if (!l) return Unknown(f, v);
            c->train.model.loss = *l;
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) { return std::string(ToString(c.train.model.loss)); }};
}

// --precision: float, bf16, or auto, which resolves here to what the CPU path in use
// (nn::UsedCpu) computes fastest, so that the checkpoint's fingerprint and the workers hold the
// resolved value; `given` keeps "auto" for the run's first line.
FlagValue PrecisionValue() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            if (v == "auto") {
              c->train.precision =
                  nn::UsedCpu().avx512_bf16 ? ComputeType::kBf16 : ComputeType::kFloat;
              return Status::Ok();
            }
            const std::optional<ComputeType> t = ParseEnum<ComputeType>(v);
            if (!t) return Unknown(f, v);
            c->train.precision = *t;
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) { return std::string(ToString(c.train.precision)); }};
}

FlagValue TaskValue() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            const std::optional<Task> t = ParseEnum<Task>(v);
            if (!t) return Unknown(f, v);
            c->train.task = *t;
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) {
            return c.train.task ? std::string(ToString(*c.train.task)) : std::string();
          }};
}

// A hyper-parameter of the optimizers (nn/optimizer.h): its limits are the registry's.
FlagValue Hyper(const nn::HyperParam& p) {
  const std::string flag = p.flag;
  if (p.switch_()) {
    return {[flag](Command* c, const FlagDef&, std::string_view) {
              c->train.hyper[flag] = 1;
              return Status::Ok();
            },
            [flag](const Command& c, const FlagDef&) {
              return std::string(c.train.hyper.count(flag) > 0 ? "given" : "");
            }};
  }
  return {[flag](Command* c, const FlagDef& f, std::string_view v) {
            double x = 0;
            if (Status s = ParseNumber(f.name, v, &x); !s.ok()) return s;
            if (Status s = CheckFloat32(f.name, x, v); !s.ok()) return s;
            c->train.hyper[flag] = x;
            return Status::Ok();
          },
          [flag](const Command& c, const FlagDef&) {
            const auto it = c.train.hyper.find(flag);
            return it == c.train.hyper.end() ? std::string() : ShortestDecimal(it->second);
          }};
}

// `simulate --workers 4,8,16`: each count within the limits.
FlagValue SimWorkers() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            const std::optional<std::vector<int>> ms = ParseIntList(v);
            if (!ms) return Expected(f.name, "worker counts such as 4,8,16", v);
            for (int m : *ms) {
              if (m < f.limits.ilo || m > f.limits.ihi) {
                return Status::Usage(f.name + ": " + std::to_string(m) +
                                     " is out of range (each count " + f.limits.text + ")");
              }
            }
            c->sim_workers = *ms;
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) { return ShowList(c.sim_workers); }};
}

constexpr int64_t kMaxLaunchHosts = 256;  // as many as a resume's message tries

// `launch --hosts a,b,c`: the slots of the host masters, each a machine's name (given twice, two
// host masters on it), as many as the limits allow.
FlagValue HostSlots() {
  return {[](Command* c, const FlagDef& f, std::string_view v) {
            std::vector<std::string> names;
            for (size_t pos = 0; pos <= v.size();) {
              const size_t comma = std::min(v.find(',', pos), v.size());
              const std::string_view name = v.substr(pos, comma - pos);
              if (name.empty() || name.find_first_of(" :\t") != std::string_view::npos) {
                return Expected(f.name, "host names such as a,b,c (a name twice: two ranks on it)",
                                v);
              }
              names.emplace_back(name);
              pos = comma + 1;
            }
            if (static_cast<int64_t>(names.size()) > kMaxLaunchHosts) {
              return Status::Usage(f.name + ": " + std::to_string(names.size()) +
                                   " hosts, more than " + std::to_string(kMaxLaunchHosts));
            }
            c->hosts = std::move(names);
            return Status::Ok();
          },
          [](const Command& c, const FlagDef&) {
            std::string s;
            for (const std::string& h : c.hosts) s += (s.empty() ? "" : ",") + h;
            return s;
          }};
}

// The registered data formats, for --data's help: "CSV files, LIBSVM files, IDX data, NumPy
// data or image folders" (formats of one noun, .npy and .npz, once).
std::string DataFormatList() {
  std::vector<std::string> nouns;
  for (const data::DataFormatDef* d : data::Formats()) {
    if (std::find(nouns.begin(), nouns.end(), d->noun) == nouns.end()) nouns.push_back(d->noun);
  }
  std::string s;
  for (size_t i = 0; i < nouns.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == nouns.size() ? " or " : ", ") + nouns[i];
  }
  return s;
}

// The registered layers with their arguments, for --model's help: "linear(out), conv2d(out,
// kernel, stride=1, padding=0), ..., residual(LAYERS[|SHORTCUT])".
std::string LayerList() {
  std::string s;
  for (const nn::LayerType* t : nn::LayerTypes()) {
    if (!s.empty()) s += ", ";
    s += t->name;
    if (t->spatial == nn::Spatial::kBlock) s += "(LAYERS[|SHORTCUT])";
    std::string args;
    for (const nn::LayerArg& a : t->args) {
      if (!args.empty()) args += ",";
      args += a.name;
      if (!a.required && a.boolean) args += a.default_value != 0 ? "=true" : "=false";
      if (!a.required && !a.boolean) args += Fmt("=%g", a.default_value);
    }
    if (!args.empty()) s += "(" + args + ")";
  }
  return s;
}

using TO = TrainOptions;
using DF = DataFileOptions;
using AS = ArraySource;
using RC = shm::RunConfig;

std::vector<FlagDef> DataFlags() {
  return {
      {.name = "--workers", .arg = "P", .help = "worker processes, {limits} (default {default})",
       .deflt = "1", .limits = IntRange(1, shm::kMaxWorkers), .value = Int(Opt(&TO::workers)),
       .group = kWorkers, .commands = kTrainExample, .workers = true,
       .to_workers = Copy<&TO::workers, &RC::workers>, .trajectory = true},
      {.name = "--mode", .arg = EnumNames<Mode>("|"), .help = "how workers combine gradients (default {default})",
       .deflt = "sync", .value = Choice(Opt(&TO::mode)), .group = kWorkers,
       .commands = kTrainCmd, .workers = true, .to_workers = Copy<&TO::mode, &RC::mode>,
       .trajectory = true},
      {.name = "--data", .arg = "FILE",
       .help = "training data: " + DataFormatList() + " ({default})",
       .deflt_words = "required, or --example", .value = Text(Opt(&TO::data_path)), .group = kData,
       .commands = kTrainSim},
      {.name = "--data", .arg = "FILE",
       .help = "data to evaluate: " + DataFormatList() + " ({default})", .deflt_words = "required",
       .value = Text(Opt(&TO::data_path)), .group = kData, .commands = kEvalCmd},
      {.name = "--data", .arg = "FILE",
       .help = "data to predict: " + DataFormatList() + " ({default})", .deflt_words = "required",
       .value = Text(Opt(&TO::data_path)), .group = kData, .commands = kPredictCmd},
      {.name = "--labels", .arg = "FILE",
       .help = "the labels of IDX or .npy data: an IDX, .npy or .npz file (default: {default})",
       .deflt_words = "an .npz's own",
       .value = Text(In<&TO::file, &DF::arrays, &AS::labels_path>()), .group = kData,
       .commands = kTrainSim | kEvalCmd},
      {.name = "--npz-x", .arg = "NAME", .help = "the features' array in an .npz (default {default})",
       .deflt = "x", .value = Text(In<&TO::file, &DF::arrays, &AS::x_key>()), .group = kData,
       .commands = kReadsData},
      {.name = "--npz-y", .arg = "NAME", .help = "the labels' array in an .npz (default {default})",
       .deflt = "y", .value = Text(In<&TO::file, &DF::arrays, &AS::y_key>()), .group = kData,
       .commands = kTrainSim | kEvalCmd},
      {.name = "--example", .arg = "parabola|blobs",
       .help = "a built-in dataset instead of --data (default: {default})", .deflt_words = "none",
       .value = Text(Opt(&TO::example)), .group = kData, .commands = kTrainSim},
      {.name = "--rows", .arg = "N", .help = "rows of the built-in example, {limits} (default {default})",
       .deflt = "50", .limits = IntRange(1, 10'000'000), .value = Int(Opt(&TO::example_rows)),
       .group = kData, .commands = kTrainSim},
      {.name = "--features", .arg = "F",
       .help = "features of the blobs example, {limits} (default {default})", .deflt = "16",
       .limits = IntRange(1, kMaxWidth), .value = Int(Opt(&TO::example_features)), .group = kData,
       .commands = kTrainSim},
      {.name = "--augment", .arg = "ITEMS",
       .help = "augment each training row in the workers, items in the order given: crop=P "
               "(RandomCrop with zero padding P, {limits}), hflip (RandomHorizontalFlip(0.5)); "
               "image models only; validation, eval and predict never augment (default: "
               "{default})",
       .deflt_words = "none", .limits = Stated("1..min(H, W) - 1"), .value = Augment(),
       .group = kData, .commands = kTrainCmd, .workers = true, .to_workers = AugmentToWorkers,
       .trajectory = true},
  };
}

// How a data file is read: format, CSV cells, what the labels are and how features scale.
std::vector<FlagDef> FormatFlags() {
  return {
      {.name = "--format", .arg = data::FormatNames("|"),
       .help = "data file format (default {default}: by name, then by content)", .deflt = "auto",
       .value = Choice(In<&TO::file, &DF::format>(), data::ParseFormatName), .group = kData,
       .commands = kReadsData},
      {.name = "--label-col", .arg = "K|NAME",
       .help = "label column of a CSV: 0-based index {limits} (-1 = the last), or its name in "
               "the header (default {default})",
       .deflt = "-1", .limits = IntRange(-1, 1000000), .value = LabelCol(), .group = kData,
       .commands = kReadsData},
      {.name = "--header", .arg = EnumNames<HeaderMode>("|"),
       .help = "whether a CSV has a header line (default {default}: detected)", .deflt = "auto",
       .value = Choice(In<&TO::file, &DF::header>()), .group = kData, .commands = kReadsData},
      {.name = "--delimiter", .arg = ",|;|tab", .help = "CSV cell separator (default: {default})",
       .deflt_words = "detected from the first lines",
       .value = Choice(In<&TO::file, &DF::delimiter>(), ParseDelimiter, ", ; tab"),
       .group = kData,
       .commands = kReadsData},
      {.name = "--decimal", .arg = ".|,", .help = "CSV decimal separator (default: {default})",
       .deflt_words = "',' in a ';' file with numbers like 1,5",
       .value = Choice(In<&TO::file, &DF::decimal>(), ParseDecimal, ". ,"), .group = kData,
       .commands = kReadsData},
      {.name = "--task", .arg = EnumNames<Task>("|"),
       .help = "what the labels are; picks the loss (default: {default})",
       .deflt_words = "by --loss", .value = TaskValue(), .group = kData, .commands = kTrainSim,
       .workers = true, .trajectory = true},
      {.name = "--normalize", .arg = EnumNames<Normalize>("|"),
       .help = "scale features with statistics of the training rows (default {default})",
       .deflt = "none", .value = Choice(Opt(&TO::normalize)), .group = kData,
       .commands = kTrainSim},
  };
}

std::vector<FlagDef> ModelFlags() {
  return {
      {.name = "--layers", .arg = "N0,N1,...",
       .help = "an MLP's layer sizes, inputs first: {limits}, e.g. 1,5,1 ({default})",
       .deflt_words = "this or --model is required",
       .limits = Stated("2.." + std::to_string(kMaxMlpSizes) + " sizes, each 1.." +
                        std::to_string(kMaxWidth)),
       .value = Layers(), .group = kModel, .commands = kTrainSim, .workers = true,
       .trajectory = true},
      {.name = "--activation", .arg = EnumNames<Activation>("|"),
       .help = "--layers' hidden-layer activation (default {default})", .deflt = "tanh",
       .value = Choice(Opt(&TO::activation)), .group = kModel,
       .commands = kTrainSim, .workers = true, .trajectory = true},
      {.name = "--model", .arg = "LAYERS",
       .help = "the layers, PyTorch's names and arguments separated by commas, e.g. "
               "\"conv2d(32,5,padding=2),relu,maxpool2d(2),flatten,linear(10)\"; layers: " +
               LayerList() + " ({default}; docs/models.md)",
       .deflt_words = "this or --layers is required", .value = Text(Opt(&TO::model_text)),
       .group = kModel, .commands = kTrainSim, .workers = true, .trajectory = true},
      {.name = "--input-shape", .arg = "C,H,W",
       .help = "--model's input: C channels of H x W, for flat data (CSV, LIBSVM, 2-D .npy) "
               "(default: {default})",
       .deflt_words = "the data's: IDX images and .npy of shape (n, H, W) are 1,H,W, (n, C, H, "
                      "W) is C,H,W",
       .limits = Stated("each 1.." + std::to_string(kMaxWidth)),
       .value = InputShape(), .group = kModel, .commands = kTrainSim, .workers = true,
       .trajectory = true},
      {.name = "--loss", .arg = EnumNames<Loss>("|"),
       .help = "mse (one output) or xent (softmax, one output per class) (default {default}, or "
               "by --task)",
       .deflt = "mse", .value = LossValue(), .group = kModel, .commands = kTrainSim,
       .workers = true, .trajectory = true},
      // A checkpoint holds the parameters, so the initialisation is not in the fingerprint.
      {.name = "--init", .arg = EnumNames<Init>("|"),
       .help = "initialisation: torch = W, b ~ U(+-1/sqrt(fan_in)); normal = N(0, 1); xavier, "
               "he: scaled normal W, b = 0 (default {default})",
       .deflt = "torch", .value = Choice(Opt(&TO::init)), .group = kModel,
       .commands = kTrainSim},
      // Not in the fingerprint either: a checkpoint of a run started from it resumes without it.
      {.name = "--init-from",
       .arg = "FILE.npz",
       .help = "start from these weights: an .npz of the export's names and shapes (a PyTorch "
               "state_dict saved with numpy.savez), every array checked against the model "
               "before the run starts; not with --resume (default: {default})",
       .deflt_words = "--init's",
       .value = Text(Opt(&TO::init_from_path)),
       .group = kModel,
       .commands = kTrainSim},
      {.name = "--precision", .arg = EnumNames<ComputeType>("|") + "|auto",
       .help = "the inputs of the products of linear and conv2d layers in the workers: float, "
               "or bf16 (rounded to nearest even, summed in float; weights, optimizer, loss and "
               "the sums across workers stay float; needs a CPU with avx512_bf16), or auto "
               "(bf16 where the CPU has avx512_bf16, else float; the run's first line says "
               "which) (default {default})",
       .deflt = "float", .value = PrecisionValue(),
       .group = kModel, .commands = kTrainCmd, .workers = true,
       .to_workers = Copy<&TO::precision, &RC::precision>, .trajectory = true},
  };
}

// The run's rate and length. The length reaches the fingerprint only where the schedule spans
// the run (nn::SpansRun).
std::vector<FlagDef> LengthFlags() {
  return {
      {.name = "--lr", .arg = "X", .help = "(base) learning rate, a finite number {limits} ({default})",
       .deflt_words = "required", .limits = RealRange(0, INFINITY, true, false),
       .value = Real(Opt(&TO::lr), Precision::kFloat32), .group = kLength,
       .commands = kTrainSim, .workers = true, .trajectory = true},
      {.name = "--steps", .arg = "N",
       .help = "number of updates, {limits}; 0 with --init-from: save its weights as --save's "
               "model without training ({default})",
       .deflt_words = "required, or --epochs", .limits = IntRange(0, kUnbounded),
       .value = Int(Opt(&TO::steps)), .group = kLength, .commands = kTrainSim, .workers = true,
       .trajectory = true},
      {.name = "--epochs", .arg = "E", .help = "passes over the data, {limits} ({default})",
       .deflt_words = "required, or --steps", .limits = IntRange(1, kUnbounded),
       .value = Int(Opt(&TO::epochs)), .group = kLength, .commands = kTrainSim, .workers = true,
       .trajectory = true},
      {.name = "--batch", .arg = "B",
       .help = "global minibatch size, 1..rows (default: {default})",
       .deflt_words = "the whole dataset each step", .limits = IntRange(1, kUnbounded),
       .value = Int(Opt(&TO::batch)), .group = kLength, .commands = kTrainSim, .workers = true,
       .to_workers = Copy<&TO::batch, &RC::batch>, .trajectory = true},
      {.name = "--seed", .arg = "S",
       .help = "seed of initialisation and shuffling, {limits} (default {default})", .deflt = "1",
       .limits = IntRange(0, INT64_MAX), .value = Int(Opt(&TO::seed)), .group = kLength,
       .commands = kTrainSim, .workers = true, .to_workers = Copy<&TO::seed, &RC::seed>,
       .trajectory = true},
      {.name = "--seed", .arg = "S", .help = "seed of the initialisation, {limits} (default {default})",
       .deflt = "1", .limits = IntRange(0, INT64_MAX), .value = Int(Opt(&TO::seed)),
       .group = kLength, .commands = kExampleCmd, .workers = true,
       .to_workers = Copy<&TO::seed, &RC::seed>, .trajectory = true},
  };
}

// The optimizer and the schedule, with every flag their registries declare (nn/optimizer.h,
// nn/schedule.h), whose checks are the registries' own.
std::vector<FlagDef> OptimFlags() {
  std::vector<FlagDef> f = {
      {.name = "--optimizer", .arg = "NAME",
       .help = "the update rule: " + nn::OptimizerNames() +
               " (default {default}; docs/guide.md, \"Optimizers\")",
       .deflt = "sgd", .value = Text(Opt(&TO::optimizer)), .group = kOptim,
       .commands = kTrainCmd, .workers = true, .trajectory = true},
      {.name = "--weight-decay", .arg = "W",
       .help = "L2 penalty {limits}: added to the gradient (sgd, adam), decoupled (adamw) "
               "(default {default})",
       .deflt_words = "0; adamw: 0.01", .limits = Stated(">= 0"),
       .value = Real(Opt(&TO::weight_decay), Precision::kFloat32), .group = kOptim,
       .commands = kTrainCmd, .workers = true, .trajectory = true},
      {.name = "--clip-norm", .arg = "C",
       .help = "scale the mean gradient to global norm C {limits} when it is longer (default: "
               "{default})",
       .deflt_words = "off", .limits = Stated("> 0"),
       .value = Real(Opt(&TO::clip_norm), Precision::kFloat32), .group = kOptim,
       .commands = kTrainCmd, .workers = true, .trajectory = true},
      {.name = "--lr-schedule", .arg = nn::ScheduleNames("|"), .help = nn::ScheduleHelp(),
       .deflt = "constant", .value = Text(Opt(&TO::lr_schedule)), .group = kSchedule,
       .commands = kTrainCmd, .workers = true, .trajectory = true},
  };
  for (const nn::ScheduleFlag& p : nn::ScheduleFlags()) {
    const bool whole = p.given_int != nullptr;
    const bool list = p.given_list != nullptr;
    f.push_back({.name = p.flag, .arg = p.value_name, .help = nn::ScheduleFlagHelp(p),
                 .deflt_words = nn::ScheduleFlagDefaults(p),
                 .limits = whole ? IntRange(1, kUnbounded) : Stated(p.limits),
                 .value = whole  ? Int(Opt(p.given_int))
                          : list ? StepList(Opt(p.given_list))
                                 : Real(Opt(p.given_real), Precision::kFloat32),
                 .group = kSchedule, .commands = kTrainCmd, .workers = true, .trajectory = true});
  }
  f.push_back({.name = "--warmup-steps", .arg = "N",
               .help = "raise the rate linearly over the first N {limits} steps, fewer than the "
                       "run's (default {default})",
               .deflt = "0", .limits = IntRange(0, kUnbounded), .value = Int(Opt(&TO::warmup_steps)),
               .group = kSchedule, .commands = kTrainCmd, .workers = true, .trajectory = true});
  for (const nn::HyperParam& p : nn::AllHyperParams()) {
    Limits checked = RealRange(p.lo, p.hi, p.lo_open, p.hi_open);
    checked.kind = Limits::Kind::kNone;  // CheckOptimizerOptions's
    f.push_back({.name = p.flag, .arg = p.switch_() ? "" : p.value_name,
                 .help = std::string(p.help) + " [" + nn::OptimizersWith(p.flag) + "]",
                 .deflt_words = p.switch_() ? "off" : Written(p.default_value),
                 .limits = p.switch_() ? Limits{} : checked, .value = Hyper(p), .group = kOptim,
                 .commands = kTrainCmd, .workers = true, .trajectory = true});
  }
  return f;
}

std::vector<FlagDef> AsyncFlags() {
  return {
      {.name = "--rule", .arg = EnumNames<AsyncRule>("|"),
       .help = "async update rule (default {default})", .deflt = "dc-asgd-a",
       .value = Choice(Opt(&TO::rule)), .group = kAsync, .commands = kTrainSim,
       .workers = true, .to_workers = Copy<&TO::rule, &RC::rule>, .trajectory = true},
      {.name = "--lambda", .arg = "X",
       .help = "DC-ASGD lambda {limits}: dc-asgd-c's constant (default 0.01), dc-asgd-a's "
               "lambda0 (default 2)",
       .deflt_words = "0.01 for dc-asgd-c, 2 for dc-asgd-a",
       .limits = RealRange(0, INFINITY, false, false),
       .value = Real(Opt(&TO::lambda), Precision::kFloat32), .group = kAsync,
       .commands = kTrainSim, .workers = true,
       .to_workers = [](const TO& o, RC* c) { c->lambda = o.LambdaOrDefault(); },
       .trajectory = true},
      {.name = "--ms-decay", .arg = "M",
       .help = "dc-asgd-a: MeanSquare decay in {limits} (default {default})", .deflt = "0.95",
       .limits = RealRange(0, 1, false, true),
       .value = Real(Opt(&TO::ms_decay), Precision::kFloat32), .group = kAsync,
       .commands = kTrainSim, .workers = true, .to_workers = Copy<&TO::ms_decay, &RC::ms_decay>,
       .trajectory = true},
      {.name = "--epsilon", .arg = "E",
       .help = "dc-asgd-a: epsilon {limits} inside the square root (default {default})",
       .deflt = "1e-7", .limits = RealRange(0, INFINITY, true, false),
       .value = Real(Opt(&TO::epsilon), Precision::kFloat32), .group = kAsync,
       .commands = kTrainSim, .workers = true, .to_workers = Copy<&TO::epsilon, &RC::epsilon>,
       .trajectory = true},
      // -1, the default, is never.
      {.name = "--max-staleness", .arg = "S",
       .help = "drop gradients more than S >= 0 versions old (default: {default})",
       .deflt_words = "never", .limits = IntRange(-1, kUnbounded),
       .value = Int(Opt(&TO::max_staleness)), .group = kAsync, .commands = kTrainCmd,
       .workers = true, .to_workers = Copy<&TO::max_staleness, &RC::max_staleness>,
       .trajectory = true},
      {.name = "--push-every", .arg = "K",
       .help = "several hosts (mpirun): push this host's update of each part of the parameters "
               "to its owner every K local updates, {limits} (default {default})",
       .deflt = "4", .limits = IntRange(1, 1'000'000), .value = Int(Opt(&TO::push_every)),
       .group = kAsync, .commands = kTrainCmd},  // the hosts agree on it (AgreeWithHosts)
  };
}

std::vector<FlagDef> HeldOutFlags() {
  return {
      {.name = "--val-split", .arg = "F",
       .help = "hold out this fraction of the rows, in {limits} (default {default}: none)",
       .deflt = "0", .limits = RealRange(0, 1, false, true),
       .value = Real(Opt(&TO::val_split), Precision::kDouble), .group = kVal,
       .commands = kTrainSim},
      {.name = "--val-data", .arg = "FILE",
       .help = "held-out rows from a file of their own, not with --val-split (default: {default})",
       .deflt_words = "none", .value = Text(Opt(&TO::val_data_path)), .group = kVal,
       .commands = kTrainSim},
      {.name = "--val-labels", .arg = "FILE",
       .help = "the labels of IDX or .npy --val-data (default: {default})",
       .deflt_words = "an .npz's own",
       .value = Text(In<&TO::val_arrays, &AS::labels_path>()), .group = kVal,
       .commands = kTrainSim},
      {.name = "--val-npz-x", .arg = "NAME",
       .help = "the held-out features' array in an .npz (default {default})", .deflt = "x",
       .value = Text(In<&TO::val_arrays, &AS::x_key>()), .group = kVal, .commands = kTrainSim},
      {.name = "--val-npz-y", .arg = "NAME",
       .help = "the held-out labels' array in an .npz (default {default})", .deflt = "y",
       .value = Text(In<&TO::val_arrays, &AS::y_key>()), .group = kVal, .commands = kTrainSim},
      {.name = "--eval-every", .arg = "N",
       .help = "validate every N {limits} steps (default: {default})", .deflt_words = "every epoch",
       .limits = IntRange(1, kUnbounded), .value = Int(Opt(&TO::eval_every)), .group = kVal,
       .commands = kTrainCmd, .workers = true},
      {.name = "--early-stop", .arg = "PATIENCE",
       .help = "stop after PATIENCE {limits} validations without a better val loss and keep the "
               "best model (default: {default})",
       .deflt_words = "never", .limits = IntRange(1, kUnbounded),
       .value = Int(Opt(&TO::early_stop)), .group = kVal, .commands = kTrainCmd,
       .workers = true},
  };
}

std::vector<FlagDef> OutputFlags() {
  return {
      {.name = "--log-every", .arg = "K",
       .help = "print the loss every K {limits} steps; 0 = only the summary (default {default})",
       .deflt = "50", .limits = IntRange(0, kUnbounded), .value = Int(Opt(&TO::log_every)),
       .group = kOut, .commands = kTrainSim, .workers = true,
       .to_workers = Copy<&TO::log_every, &RC::log_every>},
      {.name = "--log-format", .arg = EnumNames<LogFormat>("|"),
       .help = "plain lines or one JSON object per line (default {default})", .deflt = "text",
       .value = Choice(Opt(&TO::log_format)), .group = kOut,
       .commands = kTrainSim | kExampleCmd | kEvalCmd | kPredictCmd},
      {.name = "--no-progress", .arg = "",
       .help = "never show the live progress line (default: {default})",
       .deflt_words = "shown on a terminal", .value = Switch(Opt(&TO::progress), false),
       .group = kOut, .commands = kTrainExample},
      {.name = "--save", .arg = "FILE", .help = "write the trained model to FILE (default: {default})",
       .deflt_words = "not saved", .value = Text(Opt(&TO::save_path)), .group = kOut,
       .commands = kTrainExample},
      {.name = "--metrics-addr", .arg = "HOST:PORT",
       .help = "serve Prometheus metrics here; [IPV6]:PORT for IPv6; port {limits}, 0 = any "
               "free one (default {default})",
       .deflt = "127.0.0.1:9464", .limits = Stated("0..65535"),
       .value = Text(Opt(&TO::metrics_addr)), .group = kOut, .commands = kTrainExample},
      {.name = "--no-metrics", .arg = "", .help = "serve no metrics (default: {default})",
       .deflt_words = "served", .value = Switch(Opt(&TO::metrics), false), .group = kOut,
       .commands = kTrainExample},
      {.name = "--tensorboard", .arg = "DIR",
       .help = "write TensorBoard event files into DIR as the run goes (default: {default})",
       .deflt_words = "none", .value = Text(Opt(&TO::tensorboard_dir)), .group = kOut,
       .commands = kTrainExample},
  };
}

std::vector<FlagDef> FaultFlags() {
  Limits window = SecondsRange(0, 7 * 86400);
  window.lo_open = true;
  window.text = "up to 7 days";
  window.refusal = "must be between 0 and 7 days";
  Limits chaos = SecondsRange(0, 86400);
  chaos.text = "up to 86400s";
  chaos.refusal = "must be a duration up to 86400s";
  return {
      {.name = "--barrier-timeout", .arg = "D",
       .help = "deadline of a worker's barrier wait, {limits} (default {default})", .deflt = "120s",
       .limits = SecondsRange(0.1, 86400), .value = Seconds(Opt(&TO::barrier_timeout_s)),
       .group = kFault, .commands = kTrainCmd, .workers = true,
       .to_workers = Copy<&TO::barrier_timeout_s, &RC::barrier_timeout_s>},
      {.name = "--heartbeat-timeout", .arg = "D",
       .help = "kill and replace a worker silent this long, {limits} and shorter than "
               "--barrier-timeout (default: {default})",
       .deflt_words = "30s or half the barrier timeout, whichever is shorter",
       .limits = SecondsRange(0.05, 86400), .value = Seconds(Opt(&TO::heartbeat_timeout_s)),
       .group = kFault, .commands = kTrainCmd},
      {.name = "--max-restarts", .arg = "N",
       .help = "give up after more than N restarts within the window, {limits} (default {default})",
       .deflt = "10", .limits = IntRange(0, 1000000), .value = Int(Opt(&TO::max_restarts)),
       .group = kFault, .commands = kTrainCmd},
      {.name = "--restart-window", .arg = "D",
       .help = "the window of --max-restarts, {limits} (default {default})", .deflt = "60s",
       .limits = window, .value = Seconds(Opt(&TO::restart_window_s)), .group = kFault,
       .commands = kTrainCmd},
      {.name = "--chaos-kill-every", .arg = "D",
       .help = "SIGKILL a random worker about this often, {limits} (demos, soak tests; default: "
               "{default})",
       .deflt_words = "never", .limits = chaos, .value = Seconds(Opt(&TO::chaos_every_s)),
       .group = kFault, .commands = kTrainCmd},
      {.name = "--chaos-seed", .arg = "S",
       .help = "seed of the chaos kills, {limits} (default {default})", .deflt = "1",
       .limits = IntRange(0, INT64_MAX), .value = Int(Opt(&TO::chaos_seed)), .group = kFault,
       .commands = kTrainCmd},
      {.name = "--checkpoint", .arg = "PATH",
       .help = "write checkpoints here, on a stop signal and every --checkpoint-every (default: "
               "{default})",
       .deflt_words = "none", .value = Text(Opt(&TO::checkpoint_path)), .group = kFault,
       .commands = kTrainCmd},
      {.name = "--checkpoint-every", .arg = "N",
       .help = "write a checkpoint at every multiple of N {limits} steps (sync) or updates "
               "(async; the workers pause for the copy) (default: {default})",
       .deflt_words = "only on a signal", .limits = IntRange(1, kUnbounded),
       .value = Int(Opt(&TO::checkpoint_every)), .group = kFault, .commands = kTrainCmd,
       .workers = true, .to_workers = Copy<&TO::checkpoint_every, &RC::checkpoint_every>},
      {.name = "--resume", .arg = "PATH",
       .help = "continue the run saved in this checkpoint (default: {default})",
       .deflt_words = "a new run", .value = Text(Opt(&TO::resume_path)), .group = kFault,
       .commands = kTrainCmd},
  };
}

// Test hooks (worker/fault.h), hidden from --help; and the deadline between hosts.
std::vector<FlagDef> HookFlags() {
  const auto hook = [](const char* name, const char* arg, const char* deflt, Limits limits,
                       FlagValue value) {
    return FlagDef{.name = name, .arg = arg, .help = "test hook", .deflt = deflt,
                   .limits = std::move(limits), .value = std::move(value), .group = "",
                   .commands = kTrainCmd};
  };
  std::vector<FlagDef> f = {
      hook("--fault-rank", "R", "-1", IntRange(-1, shm::kMaxWorkers - 1), Int(Opt(&TO::fault_rank))),
      hook("--fault-step", "T", "-1", IntRange(-1, kUnbounded), Int(Opt(&TO::fault_step))),
      hook("--fault-incarnations", "K", "1", IntRange(0, 1 << 30), Int(Opt(&TO::fault_incarnations))),
      hook("--fault-master-throw", "T", "-1", IntRange(-1, kUnbounded),
           Int(Opt(&TO::fault_master_throw))),
      hook("--fault-point", "K", "1", IntRange(0, 11), Int(Opt(&TO::fault_point))),
      hook("--fault-host", "H", "0", IntRange(0, 255), Int(Opt(&TO::fault_host))),
  };
  // Worker fault_rank of host fault_host dies: the other hosts' workers have no fault rank.
  f[0].to_workers = [](const TO& o, RC* c) {
    c->fault_rank = o.host_index == o.fault_host ? o.fault_rank : -1;
  };
  f[1].to_workers = Copy<&TO::fault_step, &RC::fault_step>;
  f[2].to_workers = Copy<&TO::fault_incarnations, &RC::fault_incarnations>;
  f[4].to_workers = Copy<&TO::fault_point, &RC::fault_point>;
  for (size_t i : {0, 1, 2, 4, 5}) f[i].workers = true;
  f.push_back({.name = "--host-timeout", .arg = "D",
               // Accepted on one host, where nothing waits on another host: the host count
               // is MPI's, known after the flags are read, and one job script serves mpirun
               // -np 1 and -np H alike (docs/guide.md).
               .help = "several hosts (mpirun): end the job when another host's sum of a step has "
                       "not arrived within D, {limits} (default {default}); on one host it has "
                       "nothing to wait for and changes nothing",
               .deflt = "60s", .limits = SecondsRange(0.1, 86400),
               .value = Seconds(Opt(&TO::host_timeout_s)), .group = kFault,
               .commands = kTrainSim});
  return f;
}

// launch's own: where the job's host masters run, and when it gives up.
std::vector<FlagDef> LaunchFlags() {
  return {
      {.name = "--hosts",
       .arg = "A,B,C",
       .help = "the machines of the job's host masters, one rank each, {limits}; a name given "
               "twice runs two on it ({default})",
       .deflt_words = "required",
       .limits = Stated("1 to 256 names"),
       .value = HostSlots(),
       .group = kWorkers,
       .commands = kLaunchCmd},
      {.name = "--min-hosts",
       .arg = "N",
       .help = "give up (exit 7) when fewer of them are left, {limits} (default {default})",
       .deflt = "1",
       .limits = IntRange(1, kMaxLaunchHosts),
       .value = Int(Cmd(&Command::min_hosts)),
       .group = kFault,
       .commands = kLaunchCmd},
      {.name = "--max-relaunches",
       .arg = "K",
       .help = "give up (exit 7) at a loss after K relaunches, {limits} (default {default})",
       .deflt = "3",
       .limits = IntRange(0, 1000),
       .value = Int(Cmd(&Command::max_relaunches)),
       .group = kFault,
       .commands = kLaunchCmd},
  };
}

// The flags of one command only, beside the training's.
std::vector<FlagDef> CommandFlags() {
  return {
      {.name = "--workers", .arg = "M[,M...]",
       .help = "simulated worker counts, each {limits}, e.g. 4,8,16 ({default})",
       .deflt_words = "required", .limits = IntRange(1, kMaxSimWorkers), .value = SimWorkers(),
       .group = kWorkers, .commands = kSimulateCmd},
      {.name = "--compare", .arg = "",
       .help = "every rule and sequential SGD in one table (default: {default})",
       .deflt_words = "only --rule", .value = Switch(Cmd(&Command::compare), true),
       .group = kWorkers, .commands = kSimulateCmd},
      {.name = "--model", .arg = "FILE",
       .help = "a model file written by shmtrain train --save ({default})",
       .deflt_words = "required", .value = Text(Cmd(&Command::model_path)), .group = kData,
       .commands = kEvalCmd | kPredictCmd | kExportCmd},
      {.name = "--val-split", .arg = "F",
       .help = "use only the rows a training run with --val-split F --seed S held out, F in "
               "{limits} (default {default}: every row)",
       .deflt = "0", .limits = RealRange(0, 1, false, true),
       .value = Real(Opt(&TO::val_split), Precision::kDouble), .group = kData,
       .commands = kEvalCmd | kPredictCmd},
      {.name = "--seed", .arg = "S", .help = "the seed of that split, {limits} (default {default})",
       .deflt = "1", .limits = IntRange(0, INT64_MAX), .value = Int(Opt(&TO::seed)),
       .group = kData, .commands = kEvalCmd | kPredictCmd},
      {.name = "--out", .arg = "FILE",
       .help = "write the predictions here, whole or not at all (default: {default})",
       .deflt_words = "stdout", .value = Text(Cmd(&Command::out_path)), .group = kOut,
       .commands = kPredictCmd},
      {.name = "--out", .arg = "FILE",
       .help = "the file to write, whole or not at all: an ONNX model if its name ends in .onnx, "
               "else an .npz archive ({default})",
       .deflt_words = "required", .value = Text(Cmd(&Command::out_path)), .group = kOut,
       .commands = kExportCmd},
      {.name = "--dry-run", .arg = "",
       .help = "list only; remove nothing (default: {default})", .deflt_words = "remove the stale",
       .value = Switch(Cmd(&Command::dry_run), true), .group = kOut, .commands = kCleanupCmd},
  };
}

}  // namespace

const std::vector<FlagDef>& Flags() {
  static const std::vector<FlagDef> all = [] {
    std::vector<FlagDef> v;
    for (auto part :
         {DataFlags, FormatFlags, ModelFlags, LengthFlags, OptimFlags, AsyncFlags, HeldOutFlags,
          OutputFlags, FaultFlags, HookFlags, CommandFlags, LaunchFlags}) {
      for (FlagDef& f : part()) v.push_back(std::move(f));
    }
    return v;
  }();
  return all;
}

}  // namespace shmtrain::master
