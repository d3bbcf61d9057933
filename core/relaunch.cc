#include "shmtrain/relaunch.h"

#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

namespace shmtrain {
namespace {

using nlohmann::json;

constexpr RelaunchReason kRelaunchReasonList[kRelaunchReasons] = {RelaunchReason::kHostDied,
                                                                  RelaunchReason::kHostSilent};

Status RelaunchError(const std::string& what) {
  return Status::Usage(std::string(kRelaunchEnv) + ": " + what +
                       " (the variable is set by `shmtrain launch` for a relaunched job; unset it "
                       "to run without)");
}

std::string FieldName(const char* name) {
  return std::string("\"") + name + "\"";
}

// The reason named s, or false.
bool RelaunchReasonOf(const std::string& s, RelaunchReason* out) {
  for (RelaunchReason r : kRelaunchReasonList) {
    if (s == ToString(r)) {
      *out = r;
      return true;
    }
  }
  return false;
}

std::string KnownRelaunchReasons() {
  std::string out;
  for (RelaunchReason r : kRelaunchReasonList)
    out += std::string(out.empty() ? "" : ", ") + ToString(r);
  return out;
}

// v as an integer >= lowest, or why not (`what` names it).
Status ReadRelaunchInteger(const json& v, const std::string& what, int64_t lowest, int64_t* out) {
  const bool fits =
      v.is_number_integer() &&
      (!v.is_number_unsigned() ||
       v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  if (!fits || v.get<int64_t>() < lowest) {
    return RelaunchError(what + " must be an integer >= " + std::to_string(lowest) + ", got " +
                         v.dump());
  }
  *out = v.get<int64_t>();
  return Status::Ok();
}

// The member `name` of object j, or why it is missing.
Status RelaunchMember(const json& j, const char* name, const json** out) {
  const auto it = j.find(name);
  if (it == j.end()) return RelaunchError(FieldName(name) + " is missing");
  *out = &*it;
  return Status::Ok();
}

Status ReadRelaunchReasons(const json& v, Relaunch* r) {
  if (!v.is_object()) {
    return RelaunchError(FieldName("reasons") + " must be an object of counts by reason, got " +
                         v.dump());
  }
  for (const auto& [key, count] : v.items()) {
    RelaunchReason why;
    if (!RelaunchReasonOf(key, &why)) {
      return RelaunchError(FieldName("reasons") + ": unknown reason \"" + key +
                           "\" (known: " + KnownRelaunchReasons() + ")");
    }
    if (Status s =
            ReadRelaunchInteger(count, "\"reasons\"." + key, 0, &r->reasons[static_cast<int>(why)]);
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

Status ReadRelaunchLost(const json& v, Relaunch* r) {
  if (!v.is_array() || v.empty()) {
    return RelaunchError(FieldName("lost") + " must be a non-empty array of host names, got " +
                         v.dump());
  }
  for (const json& host : v) {
    if (!host.is_string() || host.get<std::string>().empty()) {
      return RelaunchError(FieldName("lost") + ": every entry must be a non-empty string, got " +
                           host.dump());
    }
    r->lost.push_back(host.get<std::string>());
  }
  return Status::Ok();
}

// The fields of an object, each checked alone, then against each other.
Status ReadRelaunchFields(const json& j, Relaunch* r) {
  const json* v = nullptr;
  if (Status s = RelaunchMember(j, "relaunches", &v); !s.ok()) return s;
  if (Status s = ReadRelaunchInteger(*v, FieldName("relaunches"), 1, &r->relaunches); !s.ok())
    return s;
  if (Status s = RelaunchMember(j, "reason", &v); !s.ok()) return s;
  if (!v->is_string() || !RelaunchReasonOf(v->get<std::string>(), &r->reason)) {
    return RelaunchError(FieldName("reason") + " must be one of " + KnownRelaunchReasons() +
                         ", got " + v->dump());
  }
  if (Status s = RelaunchMember(j, "reasons", &v); !s.ok()) return s;
  if (Status s = ReadRelaunchReasons(*v, r); !s.ok()) return s;
  if (Status s = RelaunchMember(j, "lost", &v); !s.ok()) return s;
  if (Status s = ReadRelaunchLost(*v, r); !s.ok()) return s;
  if (Status s = RelaunchMember(j, "step", &v); !s.ok()) return s;
  if (Status s = ReadRelaunchInteger(*v, FieldName("step"), 0, &r->step); !s.ok()) return s;
  int64_t sum = 0;
  for (int64_t n : r->reasons) sum += n;
  if (sum != r->relaunches) {
    return RelaunchError("the counts of \"reasons\" sum to " + std::to_string(sum) +
                         ", not to \"relaunches\" (" + std::to_string(r->relaunches) + ")");
  }
  if (r->reasons[static_cast<int>(r->reason)] < 1) {
    return RelaunchError("\"reasons\" counts no relaunch of this one's reason \"" +
                         std::string(ToString(r->reason)) + "\"");
  }
  return Status::Ok();
}

}  // namespace

const char* ToString(RelaunchReason r) {
  switch (r) {
    case RelaunchReason::kHostDied:
      return "host_died";
    case RelaunchReason::kHostSilent:
      return "host_silent";
  }
  return "?";
}

std::string Relaunch::LostText() const {
  std::string out;
  for (const std::string& host : lost) out += (out.empty() ? "" : ", ") + host;
  return out + " lost";
}

std::string Relaunch::Label() const {
  return "relaunch " + std::to_string(relaunches) + ": " + LostText();
}

std::string Relaunch::Line() const {
  return "relaunch " + std::to_string(relaunches) + " (" + ToString(reason) + "): " + LostText() +
         "; continuing from step " + std::to_string(step);
}

Status ParseRelaunch(std::string_view text, Relaunch* out) {
  if (text.empty()) {
    *out = Relaunch{};
    return Status::Ok();
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // nlohmann's text after its "[json.exception.parse_error.N] " says where and why.
    const std::string what = e.what();
    const size_t at = what.find("] ");
    return RelaunchError("not valid JSON: " +
                         (at == std::string::npos ? what : what.substr(at + 2)));
  }
  if (!j.is_object()) return RelaunchError("must be a JSON object, got " + j.dump());
  Relaunch r;
  if (Status s = ReadRelaunchFields(j, &r); !s.ok()) return s;
  *out = std::move(r);
  return Status::Ok();
}

Status RelaunchFromEnvironment(Relaunch* out) {
  const char* v = std::getenv(kRelaunchEnv);
  return ParseRelaunch(v == nullptr ? "" : v, out);
}

std::string RelaunchJson(const Relaunch& r) {
  json reasons = json::object();
  for (RelaunchReason why : kRelaunchReasonList)
    reasons[ToString(why)] = r.reasons[static_cast<int>(why)];
  return json{{"relaunches", r.relaunches},
              {"reason", ToString(r.reason)},
              {"reasons", reasons},
              {"lost", r.lost},
              {"step", r.step}}
      .dump();
}

}  // namespace shmtrain
