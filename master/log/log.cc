#include "master/log/log.h"

#include <stdio_ext.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/utf8.h"

namespace shmtrain::master {

Status WriteStdout(std::string_view s) {
  errno = 0;
  if (std::fwrite(s.data(), 1, s.size(), stdout) == s.size() && std::fflush(stdout) == 0) {
    return Status::Ok();
  }
  const int e = errno != 0 ? errno : EIO;
  __fpurge(stdout);
  std::clearerr(stdout);
  return Status::Resource(std::string("cannot write standard output: ") + std::strerror(e));
}

namespace {

// s as a JSON string, quotes included, appended to *out.
void AppendString(std::string_view s, std::string* out) {
  *out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

JsonLine::JsonLine(std::string_view event) {
  body_ = "{\"event\":";
  AppendString(event, &body_);
}

void JsonLine::Key(std::string_view key) {
  body_ += ',';
  AppendString(key, &body_);
  body_ += ':';
}

JsonLine& JsonLine::Str(std::string_view key, std::string_view v) {
  Key(key);
  AppendString(v, &body_);
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
    // The shortest text that reads back as the same double (log.h: why not nlohmann::json's).
    body_ += ShortestText(v);
  }
  return *this;
}

JsonLine& JsonLine::Bool(std::string_view key, bool v) {
  Key(key);
  body_ += v ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::Ints(std::string_view key, const std::vector<uint64_t>& v) {
  Key(key);
  body_ += nlohmann::json(v).dump();
  return *this;
}

JsonLine& JsonLine::Strs(std::string_view key, const std::vector<std::string>& v) {
  Key(key);
  body_ += nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return *this;
}

Logger::Logger(LogFormat format, bool progress)
    : format_(format),
      live_(progress && isatty(STDERR_FILENO)),
      plain_(progress && !isatty(STDERR_FILENO) && format == LogFormat::kText) {}

void Logger::SetSecondary(std::string who) {
  who_ = std::move(who);
  live_ = false;
  plain_ = false;
}

void Logger::Out(const std::string& s) {
  if (bg_) {
    bg_->Put(OutputThread::Stream::kOut, s);
  } else if (stdout_.ok()) {
    stdout_ = WriteStdout(s);
  }
}

void Logger::Err(const std::string& s) {
  if (bg_) {
    bg_->Put(OutputThread::Stream::kErr, s);
    return;
  }
  std::fputs(s.c_str(), stderr);
  std::fflush(stderr);
}

void Logger::Always(const JsonLine& json) {
  Report(json);
  if (format_ != LogFormat::kJson) return;
  Out(json.Done() + "\n");
}

void Logger::Line(const std::string& text, const JsonLine& json) {
  if (secondary()) return;
  ClearProgress();
  Out((format_ == LogFormat::kJson ? json.Done() : text) + "\n");
}

void Logger::Text(const std::string& text) {
  if (secondary() || format_ == LogFormat::kJson) return;
  ClearProgress();
  Out(text);
}

void Logger::Info(const std::string& text, const JsonLine& json) {
  if (secondary()) return;
  if (format_ == LogFormat::kJson) {
    JsonOnly(json);
    return;
  }
  ClearProgress();
  Err(text + "\n");
}

void Logger::Notice(const std::string& text, const JsonLine& json) {
  if (format_ == LogFormat::kJson) {
    Always(json);
    return;
  }
  Report(json);
  ClearProgress();
  Err((secondary() ? who_ + ": " + text : text) + "\n");
}

void Logger::JsonOnly(const JsonLine& json) {
  if (!secondary()) Always(json);
}

void Logger::Progress(const std::string& text) {
  if (!live_) return;
  Err("\r\033[K" + text);
  live_shown_ = true;
}

void Logger::ClearProgress() {
  if (!live_shown_) return;
  Err("\r\033[K");
  live_shown_ = false;
}

void Logger::ProgressDone(const std::string& text) {
  if (!live_ && !plain_) return;
  Err((live_ ? "\r\033[K" : "") + text + "\n");
  live_shown_ = false;
}

void Logger::Error(const std::string& msg) {
  ClearProgress();
  // One line: a value the user gave (a flag's, a file name, a model's text) is quoted as it
  // came, and a line break in it would pass for the message's end.
  const std::string full = Printable(secondary() ? who_ + ": " + msg : msg, "\t");
  Err("shmtrain: error: " + full + "\n");
  Always(JsonLine("error").Str("message", full));
}

}  // namespace shmtrain::master
