#include "master/launch/recover.h"

#include <unistd.h>

#include "master/files/checkpoint.h"
#include "master/files/model_file.h"
#include "master/files/output_write.h"
#include "master/hosts/async_state.h"

namespace shmtrain::master::launch {
namespace {

std::string Listed(const std::vector<uint64_t>& hosts) {
  std::string s;
  for (uint64_t h : hosts) s += (s.empty() ? "" : ", ") + std::to_string(h);
  return s;
}

// Every readable state, each named by its path; what is wrong with the others is said.
void ReadStates(const std::vector<SavedState>& states, Logger& log,
                std::vector<AsyncStopState>* out, std::vector<std::string>* names) {
  for (const SavedState& st : states) {
    std::string bytes;
    AsyncStopState s;
    Status got = ReadFileBytes(st.path, "async stop state", &bytes);
    if (got.ok()) got = DecodeAsyncState(bytes, st.path, &s);
    if (!got.ok()) {
      log.Info("launch: warning: an async stop state is left out: " + got.message(),
               JsonLine("async_state_unusable").Str("path", st.path).Str("message", got.message()));
      continue;
    }
    out->push_back(std::move(s));
    names->push_back(st.path);
  }
}

}  // namespace

Recovered RecoverAsync(const std::vector<SavedState>& states, const std::string& checkpoint,
                       Logger& log) {
  Recovered r;
  std::vector<AsyncStopState> read;
  std::vector<std::string> names;
  ReadStates(states, log, &read, &names);
  for (const SavedState& st : states) (void)unlink(st.path.c_str());
  if (read.empty()) return r;
  MergedAsync m;
  Status s = MergeAsyncStates(read, names, &m);
  if (s.ok()) s = WriteFileDurably(checkpoint, EncodeCheckpoint(m.checkpoint), {});
  if (!s.ok()) {
    log.Info("launch: warning: the async stop states were not merged: " + s.message(),
             JsonLine("async_state_unusable").Str("path", checkpoint).Str("message", s.message()));
    return r;
  }
  std::vector<uint64_t> from, missing(m.missing.begin(), m.missing.end());
  for (const AsyncStopState& st : read) from.push_back(static_cast<uint64_t>(st.host));
  const std::string lost =
      m.missing.empty() ? "no update lost"
                        : "every update of theirs kept; of host" +
                              std::string(m.missing.size() == 1 ? " " : "s ") + Listed(missing) +
                              ", those since the last push of each part lost (at least " +
                              std::to_string(m.lost) + ")";
  log.Info("launch: the async states of hosts " + Listed(from) + " merged into " + checkpoint +
               " at update " + std::to_string(m.checkpoint.step) + ": " + lost,
           JsonLine("async_recovered")
               .Str("path", checkpoint)
               .Int("step", m.checkpoint.step)
               .Int("kept", m.kept)
               .Int("lost_updates", m.lost)
               .Ints("from", from)
               .Ints("missing", missing));
  r.step = m.checkpoint.step;
  r.lost = m.lost;
  return r;
}

}  // namespace shmtrain::master::launch
