// Async across hosts, a host lost (master/hosts/async_state.h): the survivors' states merged by
// hand against the rule, their file's round trip, and damaged or mismatched files.
#include "master/hosts/async_state.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "master/files/model_file.h"
#include "master/hosts/param_server.h"
#include "master/launch/recover.h"
#include "master/log/log.h"
#include "tests/proc_util.h"

namespace shmtrain::master {
namespace {

using test::FileExists;
using test::TempDir;

AsyncPartState Part(uint64_t version, std::vector<uint64_t> settled, float base,
                    uint64_t pending_at = 0, float snap = 0) {
  AsyncPartState p;
  p.version = version;
  p.settled = std::move(settled);
  p.base = {base};
  p.pending_at = pending_at;
  if (pending_at != 0) p.snap = {snap};
  return p;
}

AsyncStopState State(int host, uint64_t updates, std::vector<uint64_t> known,
                     std::vector<float> w) {
  AsyncStopState s;
  s.hosts = 3;
  s.host = host;
  s.updates = updates;
  s.known = std::move(known);
  s.checkpoint.mode = Mode::kAsync;
  s.checkpoint.step = static_cast<int64_t>(updates);
  s.checkpoint.fingerprint = 77;
  s.checkpoint.optimizer = "sgd lr 0.1";
  s.checkpoint.params = std::move(w);
  return s;
}

// Three hosts, one value per part; host 1 (the owner of part 1) lost. Part 0 and 2 start from
// their owners' G; part 1 from host 2's base, the newer (version 9). Every survivor adds its W
// minus its base, or minus the snapshot of a push out whose update the start has.
std::vector<AsyncStopState> Survivors(uint64_t part0_settled_by_2) {
  AsyncStopState h0 = State(0, 9, {9, 12, 8}, {8.5f, 20.75f, 29.5f});
  h0.owned = Part(5, {5, 4, part0_settled_by_2}, 10.0f);
  h0.parts = {Part(5, {5, 4, 3}, 8.0f),             // its own part: W - base = 0.5
              Part(7, {5, 6, 3}, 20.0f, 8, 20.5f),  // a push out, not in the start
              Part(4, {4, 4, 4}, 29.0f)};           // W - base = 0.5
  AsyncStopState h2 = State(2, 10, {8, 11, 10}, {7.5f, 21.25f, 30.25f});
  h2.owned = Part(6, {6, 5, 9}, 30.0f);
  h2.parts = {Part(3, {3, 3, 3}, 7.0f, 6, 7.25f),  // a push out to the live owner 0
              Part(9, {5, 7, 6}, 21.0f),           // the newest base of part 1
              Part(6, {6, 5, 9}, 29.75f)};         // its own part: W - base = 0.5
  return {h0, h2};
}

TEST(AsyncState, MergesTheSurvivorsAndCountsTheLostHostsUpdates) {
  MergedAsync m;
  ASSERT_TRUE(MergeAsyncStates(Survivors(3), {"a", "b"}, &m).ok());
  // Part 0: host 2's push at 6 is not settled at the owner (3): 10 + 0.5 + (7.5 - 7).
  // Part 1: 21 (host 2's base) + (20.75 - 20: host 0's push at 8 is past the start's 5) + 0.25.
  // Part 2: 30 + 0.5 + 0.5.
  EXPECT_EQ(m.checkpoint.params, (std::vector<float>{11.0f, 22.0f, 31.0f}));
  // Host 1 said 12 updates; every part's start has them up to 4 (part 0's): 8 lost.
  EXPECT_EQ(m.lost, 8);
  EXPECT_EQ(m.kept, 9 + 10 + 4);
  EXPECT_EQ(m.checkpoint.step, 21);  // a multiple of the hosts
  EXPECT_EQ(m.missing, std::vector<int>{1});
  EXPECT_EQ(m.checkpoint.fingerprint, 77u);
}

TEST(AsyncState, APushTheOwnerHasAppliedIsNotAddedTwice) {
  MergedAsync m;
  ASSERT_TRUE(MergeAsyncStates(Survivors(6), {"a", "b"}, &m).ok());
  // Host 2's push at 6 is in the owner's G: only what came after its snapshot, 7.5 - 7.25.
  EXPECT_EQ(m.checkpoint.params[0], 10.0f + 0.5f + 0.25f);
}

TEST(AsyncState, ALostOwnersPartComesFromTheNewestBase) {
  std::vector<AsyncStopState> s = Survivors(3);
  s[0].parts[1].version = 10;  // now host 0's base (20) is the newest, and its push at 8 is in
  s[0].parts[1].settled = {8, 6, 3};
  MergedAsync m;
  ASSERT_TRUE(MergeAsyncStates(s, {"a", "b"}, &m).ok());
  // 20 + (20.75 - 20.5) + (21.25 - 21): host 2's base is older and holds nothing host 0 lacks.
  EXPECT_EQ(m.checkpoint.params[1], 20.0f + 0.25f + 0.25f);
}

TEST(AsyncState, RoundTripsThroughItsFile) {
  const AsyncStopState a = Survivors(3)[0];
  AsyncStopState b;
  ASSERT_TRUE(DecodeAsyncState(EncodeAsyncState(a), "f", &b).ok());
  EXPECT_EQ(b.host, 0);
  EXPECT_EQ(b.updates, 9u);
  EXPECT_EQ(b.known, a.known);
  EXPECT_EQ(b.owned.base, a.owned.base);
  EXPECT_EQ(b.owned.settled, a.owned.settled);
  ASSERT_EQ(b.parts.size(), 3u);
  EXPECT_EQ(b.parts[1].pending_at, 8u);
  EXPECT_EQ(b.parts[1].snap, a.parts[1].snap);
  EXPECT_EQ(b.parts[2].version, 4u);
  EXPECT_EQ(b.checkpoint.params, a.checkpoint.params);
  EXPECT_EQ(b.checkpoint.fingerprint, 77u);
}

TEST(AsyncState, ADamagedOrCutFileIsNamedAndRefused) {
  const std::string good = EncodeAsyncState(Survivors(3)[0]);
  AsyncStopState out;
  std::string damaged = good;
  damaged[40] ^= 1;
  Status s = DecodeAsyncState(damaged, "st.async", &out);
  EXPECT_EQ(s.code(), Status::Code::kData);
  EXPECT_NE(s.message().find("st.async: not a usable async stop state: checksum"),
            std::string::npos)
      << s.message();
  for (size_t cut : {size_t{0}, size_t{10}, good.size() / 2, good.size() - 1}) {
    s = DecodeAsyncState(good.substr(0, cut), "st.async", &out);
    EXPECT_EQ(s.code(), Status::Code::kData) << cut;
    EXPECT_NE(s.message().find("st.async"), std::string::npos) << s.message();
  }
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_NE(DecodeAsyncState(magic, "st.async", &out).message().find("wrong magic"),
            std::string::npos);
}

TEST(AsyncState, StatesOfAnotherRunOrTheSameHostTwiceAreRefused) {
  std::vector<AsyncStopState> s = Survivors(3);
  MergedAsync m;
  s[1].checkpoint.fingerprint = 78;
  Status st = MergeAsyncStates(s, {"a.async", "b.async"}, &m);
  EXPECT_EQ(st.code(), Status::Code::kData);
  EXPECT_NE(st.message().find("b.async is not of the run of a.async"), std::string::npos)
      << st.message();
  s = Survivors(3);
  s[1].host = 0;
  st = MergeAsyncStates(s, {"a.async", "b.async"}, &m);
  EXPECT_NE(st.message().find("b.async and a.async are both host 0's"), std::string::npos)
      << st.message();
  EXPECT_FALSE(MergeAsyncStates({}, {}, &m).ok());
}

// The fuzzer's seeds (fuzz/make_corpus.py writes them in Python) are states this build reads,
// and writes back to the same bytes: the fuzzer starts from the decoder's success path.
TEST(AsyncState, TheFuzzersSeedsAreReadAndWrittenBackAlike) {
  for (const char* name : {"two_hosts", "three_hosts_pushes_out"}) {
    const std::string path = std::string(SHMTRAIN_SOURCE_DIR) + "/fuzz/corpus/async_state/" + name;
    std::string bytes;
    ASSERT_TRUE(ReadFileBytes(path, "seed", &bytes).ok()) << path;
    AsyncStopState s;
    const Status st = DecodeAsyncState(bytes, path, &s);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(EncodeAsyncState(s), bytes) << name;
  }
}

// The launcher's step (master/launch/recover.h): the states merged into the checkpoint, a
// damaged one said and left out, and every state file gone afterwards.
TEST(AsyncState, TheLauncherMergesWhatItCanReadSaysWhatItCannotAndKeepsNoStateFile) {
  TempDir dir;
  const std::vector<AsyncStopState> s = Survivors(3);
  const std::string a = dir.Write("ck.host0.async", EncodeAsyncState(s[0]));
  std::string damaged = EncodeAsyncState(s[1]);
  damaged[damaged.size() / 2] ^= 0x40;
  const std::string b = dir.Write("ck.host2.async", damaged);
  const std::string ck = dir.File("ck");
  Logger log(LogFormat::kJson, false);
  testing::internal::CaptureStdout();
  const launch::Recovered r = launch::RecoverAsync({{0, a, 9}, {1, b, 10}}, ck, log);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("\"event\":\"async_state_unusable\""), std::string::npos) << out;
  EXPECT_NE(out.find(b + ": not a usable async stop state: checksum"), std::string::npos) << out;
  EXPECT_FALSE(FileExists(a));
  EXPECT_FALSE(FileExists(b));
  // Host 0's state alone: hosts 1 and 2 count as lost, their updates past their pushes too.
  EXPECT_EQ(r.step, 9 + 4 + 3 - (9 + 4 + 3) % 3);
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(ck, &back).ok());
  EXPECT_EQ(back.step, r.step);
  EXPECT_NE(out.find("\"missing\":[1,2]"), std::string::npos) << out;

  // Nothing readable: nothing merged, the checkpoint untouched, the files gone all the same.
  const std::string c = dir.Write("ck.host1.async", "not a state");
  const launch::Recovered none = launch::RecoverAsync({{0, c, 1}}, dir.File("other"), log);
  EXPECT_EQ(none.step, -1);
  EXPECT_FALSE(FileExists(c));
  EXPECT_FALSE(FileExists(dir.File("other")));
}

// The owner's settled versions, which the replies carry to every pusher: each host's latest
// push, applied or dropped, from the run's first version on.
TEST(OwnedPart, SettlesEachHostsPushesAppliedOrDropped) {
  const std::vector<float> w0 = {0.0f};
  nn::RuleParams rp;
  rp.rule = AsyncRule::kAsgd;
  OwnedPart part(w0.data(), 1, 2, rp, 40);
  EXPECT_EQ(part.settled(), (std::vector<uint64_t>{40, 40}));
  const float d = 1.0f;
  part.Apply(0, &d, 4, 0.1, -1, 44);
  part.Apply(0, &d, 2, 0.1, -1, 46);
  EXPECT_EQ(part.settled(), (std::vector<uint64_t>{46, 40}));
  part.Apply(1, &d, 3, 0.1, 0, 43);  // dropped (tau 2 > 0): settled all the same
  EXPECT_EQ(part.settled(), (std::vector<uint64_t>{46, 43}));
}

}  // namespace
}  // namespace shmtrain::master
