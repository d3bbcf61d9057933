// What the master prints: plain text lines, or one JSON object per line (--log-format json),
// and on a terminal a live progress line on stderr. Errors always go to stderr.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/decimal.h"
#include "master/log/output_thread.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// One JSON object, built field by field in the order the fields are given, printed on one
// line. Keys and strings are written by nlohmann::json (Debian's nlohmann-json3-dev), which
// escapes them and keeps the line valid UTF-8 whatever bytes they hold: each ill-formed
// sequence becomes U+FFFD. Numbers are written by std::to_chars, not by nlohmann::json, whose
// Grisu2 prints "8.0" for 8 and, for 0.06% of doubles, more digits than the shortest text that
// reads back as the same double (0.40624729672619603 for 0.406247296726196): to_chars always
// prints the shortest, so a JSON log loses no bits and prints no noise digits.
class JsonLine {
 public:
  explicit JsonLine(std::string_view event);
  JsonLine& Str(std::string_view key, std::string_view v);
  JsonLine& Int(std::string_view key, int64_t v);
  JsonLine& Num(std::string_view key, double v);  // non-finite values become null
  JsonLine& Bool(std::string_view key, bool v);
  JsonLine& Ints(std::string_view key, const std::vector<uint64_t>& v);     // [1,2,3]
  JsonLine& Strs(std::string_view key, const std::vector<std::string>& v);  // ["a","b"]
  std::string Done() const { return body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// Writes s to standard output and flushes it. kResource "cannot write standard output:
// <reason>" when that fails: a full disk (ENOSPC), a pipe whose reader has gone (EPIPE: every
// command ignores the SIGPIPE it raises itself, master/run/signals.h and main.cc). What stdio still
// holds of s is then dropped, so that the exit does not write it again.
Status WriteStdout(std::string_view s);

class Logger {
 public:
  // progress: show the live line when stderr is a terminal.
  Logger(LogFormat format, bool progress);
  bool json() const { return format_ == LogFormat::kJson; }

  // A line for stdout: the text form, or the JSON form in json mode.
  void Line(const std::string& text, const JsonLine& json);
  // Text for stdout in text mode only (a table; json mode has events instead).
  void Text(const std::string& text);
  // Ok, or the first write to stdout that failed (WriteStdout); nothing more is written to
  // stdout after it. A command ends with it once its work is done (docs/failures.md, "Exit codes").
  Status stdout_status() const { return bg_ ? bg_->stdout_status() : stdout_; }
  // From now on the lines are written by a thread of their own (master/log/output_thread.h), so
  // a reader that stops reading never blocks the caller: train's run loop. Drain before the
  // process ends; stopping() says when a stopped run may leave unwritten lines behind.
  void WriteInBackground() { bg_ = std::make_unique<OutputThread>(); }
  bool Drain(bool (*stopping)()) { return bg_ ? bg_->Drain(stopping) : true; }
  // A diagnostic: the text on stderr in text mode (stdout stays the training log), the JSON
  // event on stdout in json mode.
  void Info(const std::string& text, const JsonLine& json);
  // Only in json mode (events that text mode does not show, e.g. worker pids).
  void JsonOnly(const JsonLine& json);
  // A diagnostic every host master prints, as Info (a host other than host 0 prefixes the text
  // with its name): what only that host knows, such as where it wrote a file on its machine.
  void Notice(const std::string& text, const JsonLine& json);
  // Replaces the live line (terminal only; nothing otherwise).
  void Progress(const std::string& text);
  void ClearProgress();
  // A progress line that stays (an epoch's end): on a terminal it replaces the live line and
  // ends it; when stderr is not a terminal, a plain line there (text format only, so that
  // stdout stays the log and no control character reaches a file or pipe). Nothing with
  // --no-progress or on a host other than host 0.
  void ProgressDone(const std::string& text);
  // "shmtrain: error: ..." on stderr (and a JSON "error" event in json mode), the message
  // made Printable (core/utf8.h; line breaks and tabs kept).
  void Error(const std::string& msg);

  // Several hosts: this logger serves a host master other than host 0, named `who` ("host 1
  // (node-b)"). It prints only errors (prefixed with who) and Always() events: host 0 prints
  // the run's log and summary.
  void SetSecondary(std::string who);
  bool secondary() const { return !who_.empty(); }
  // A JSON event printed by every host master in json mode (e.g. "host": where its segment
  // and workers are).
  void Always(const JsonLine& json);

 private:
  // Writes s to stdout unless a write failed before (stdout_), or queues it (bg_).
  void Out(const std::string& s);
  // Writes s to stderr and flushes it, or queues it (bg_).
  void Err(const std::string& s);

  LogFormat format_;
  bool live_;   // the live line: progress shown, stderr a terminal
  bool plain_;  // progress shown, stderr not a terminal, text format: plain lines
  Status stdout_;
  bool live_shown_ = false;
  std::string who_;  // empty on host 0 and in single-host runs
  std::unique_ptr<OutputThread> bg_;
};

}  // namespace shmtrain::master
