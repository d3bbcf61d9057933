#include "shmtrain/options.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/decimal.h"

namespace shmtrain {

std::optional<char> ParseDelimiter(std::string_view s) {
  if (s == ",") return ',';
  if (s == ";") return ';';
  if (s == "tab" || s == "\t") return '\t';
  return std::nullopt;
}

std::optional<char> ParseDecimal(std::string_view s) {
  if (s == "." || s == ",") return s[0];
  return std::nullopt;
}

Status ParseHostPort(std::string_view addr, HostPort* out) {
  HostPort hp;
  std::string_view port_s;
  if (!addr.empty() && addr.front() == '[') {
    // [IPV6]:PORT, as in URLs: the brackets keep the address's colons apart from the port's.
    const size_t close = addr.find(']');
    if (close == std::string_view::npos || close + 1 >= addr.size() || addr[close + 1] != ':') {
      return Status::Usage("expected [IPV6]:PORT, e.g. [::1]:9464");
    }
    hp.host = std::string(addr.substr(1, close - 1));
    hp.ipv6 = true;
    if (hp.host.empty() ||
        hp.host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos ||
        hp.host.find(':') == std::string::npos) {
      return Status::Usage("'" + hp.host + "' is not an IPv6 address");
    }
    port_s = addr.substr(close + 2);
  } else {
    const size_t colon = addr.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Status::Usage("expected HOST:PORT (or [IPV6]:PORT)");
    }
    hp.host = std::string(addr.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) {
      return Status::Usage("an IPv6 address goes in brackets: [" + hp.host + "]:PORT");
    }
    port_s = addr.substr(colon + 1);
  }
  const auto [p, ec] = std::from_chars(port_s.data(), port_s.data() + port_s.size(), hp.port);
  if (port_s.empty() || ec != std::errc() || p != port_s.data() + port_s.size() || hp.port < 0 ||
      hp.port > 65535) {
    return Status::Usage("port must be a number 0..65535");
  }
  *out = std::move(hp);
  return Status::Ok();
}

std::string TrainOptions::As(std::string_view flag, const std::string& otherwise) const {
  const auto it = given.find(flag);
  return it == given.end() ? otherwise : it->second;
}

std::string TrainOptions::DivergenceHint() const {
  // Values as the run holds them (%g), as every divergence message has always printed them.
  const std::string rate = "--lr " + Fmt("%g", lr);
  // SGD and AdamW scale every weight by (1 - lr * wd) each step besides the gradient's move:
  // from lr * wd >= 2 on, that alone makes the weights grow.
  if (Given("--weight-decay") && lr * weight_decay >= 2) {
    return "the weight decay (--weight-decay " + Fmt("%g", weight_decay) +
           ") is probably too large for " + rate +
           ": each step scales every weight by 1 - lr x weight decay = " +
           Fmt("%g", 1 - lr * weight_decay) + ", which grows it";
  }
  // The compensation lambda * g*g*(w - w_bak) moves a stale copy by about lr * lambda * g^2
  // times its staleness: from lr * lambda >= 1 on it outgrows the gradient itself.
  // (--lambda is refused in sync runs and with --rule asgd.)
  if (rule != AsyncRule::kAsgd && Given("--lambda") && lr * lambda >= 1) {
    return "the delay compensation (--lambda " + Fmt("%g", lambda) +
           ") is probably too large for " + rate + ": lr x lambda = " + Fmt("%g", lr * lambda) +
           ", so the compensation outgrows the gradient wherever a copy is stale";
  }
  return "the learning rate (" + rate + ") is probably too large";
}

double TrainOptions::LambdaOrDefault() const {
  if (!std::isnan(lambda)) return lambda;
  return rule == AsyncRule::kDcAsgdC ? 0.01 : rule == AsyncRule::kDcAsgdA ? 2.0 : 0.0;
}

int64_t TrainOptions::TotalSteps(int64_t rows) const {
  if (steps > 0) return steps;
  return epochs * StepsPerEpoch(rows);
}

}  // namespace shmtrain
