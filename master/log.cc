#include "master/log.h"

#include <unistd.h>

#include <charconv>
#include <cmath>

#include "core/utf8.h"

namespace shmtrain::master {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8Length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD: JSON text is UTF-8, and this byte is not
      ++i;
      continue;
    }
    i += n;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.append(s, i - n, n);
        }
    }
  }
  return out;
}

JsonLine::JsonLine(std::string_view event) {
  body_ = "{\"event\":\"" + JsonEscape(event) + "\"";
}

void JsonLine::Key(std::string_view key) {
  body_ += ",\"";
  body_ += JsonEscape(key);
  body_ += "\":";
}

JsonLine& JsonLine::Str(std::string_view key, std::string_view v) {
  Key(key);
  body_ += "\"" + JsonEscape(v) + "\"";
  return *this;
}

JsonLine& JsonLine::Int(std::string_view key, int64_t v) {
  Key(key);
  body_ += std::to_string(v);
  return *this;
}

JsonLine& JsonLine::Num(std::string_view key, double v) {
  Key(key);
  if (!std::isfinite(v)) {
    body_ += "null";
  } else {
    // The shortest text that reads back as the same double: a JSON log loses no bits (two
    // losses that differ print differently) and prints no noise digits.
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    body_.append(buf, r.ptr);
  }
  return *this;
}

JsonLine& JsonLine::Raw(std::string_view key, std::string_view json) {
  Key(key);
  body_ += json;
  return *this;
}

Logger::Logger(LogFormat format, bool progress)
    : format_(format), live_(progress && isatty(STDERR_FILENO)) {}

void Logger::SetSecondary(std::string who) {
  who_ = std::move(who);
  live_ = false;
}

void Logger::Always(const JsonLine& json) {
  if (format_ != LogFormat::kJson) return;
  std::fputs((json.Done() + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void Logger::Line(const std::string& text, const JsonLine& json) {
  if (secondary()) return;
  ClearProgress();
  const std::string s = (format_ == LogFormat::kJson ? json.Done() : text) + "\n";
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

void Logger::Info(const std::string& text, const JsonLine& json) {
  if (secondary()) return;
  if (format_ == LogFormat::kJson) {
    JsonOnly(json);
    return;
  }
  ClearProgress();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

void Logger::JsonOnly(const JsonLine& json) {
  if (!secondary()) Always(json);
}

void Logger::Progress(const std::string& text) {
  if (!live_) return;
  std::fprintf(stderr, "\r\033[K%s", text.c_str());
  std::fflush(stderr);
  live_shown_ = true;
}

void Logger::ClearProgress() {
  if (!live_shown_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  live_shown_ = false;
}

void Logger::Error(const std::string& msg) {
  ClearProgress();
  const std::string full = Printable(secondary() ? who_ + ": " + msg : msg, "\n\t");
  std::fprintf(stderr, "shmtrain: error: %s\n", full.c_str());
  std::fflush(stderr);
  Always(JsonLine("error").Str("message", full));
}

}  // namespace shmtrain::master
