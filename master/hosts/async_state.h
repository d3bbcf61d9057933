// Async across hosts, a host lost: what each surviving host master keeps of the parameter
// server (master/hosts/param_server.h) when its run stops, and how `shmtrain launch` makes one
// checkpoint of the survivors' states (master/launch/launch.h).
//
// No copy is pushed anywhere for this: every host already holds a replica of every part. A
// pusher's base B_j is the owner's G_j as of the owner's reply to its latest push (version
// v), and the reply says, for every host, up to which of its local updates its pushes of the
// part are in G_j (`settled`: the local version its latest push applied or dropped there was
// taken at). So the state of part j is rebuilt from the survivors alone:
//   start: the owner's G_j when the owner survived, else the survivors' base of the highest
//          version (a lost owner's part as of its latest reply to anyone);
//   then every surviving host s adds what of its own updates start lacks: W_j - X, where X is
//   the snapshot of a push of j still unanswered when that push is settled in start, else its
//   base. Its W holds every update its workers applied, so none of a survivor's is lost.
// What is lost are the lost hosts' updates past their latest push of some part: counted up to
// the latest local version the survivors know of (the beats, the pushes), so at least that
// many; the few since are lost unseen. A survivor that wrote no state counts as lost.
//
// Resuming: the merged parameters, at the run's update t = the updates they hold (every host's
// own, the lost ones' up to their pushes in every part), rounded down to a multiple of H, every
// host from its update t / H (as a checkpoint of async across hosts resumes). Each host's share
// of the run's updates is then that of the run that lost nothing from t on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "master/files/checkpoint.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// One host's side of one part of the parameters.
struct AsyncPartState {
  uint64_t version = 0;           // the owner's version of `base`
  std::vector<uint64_t> settled;  // per host: its local version its pushes of the part reach
  uint64_t pending_at = 0;        // a push out and unanswered: the local version it was taken
  std::vector<float> base;        // the part as last pulled (the owner's part: its G)
  std::vector<float> snap;        // that push's snapshot of W_j; empty when none is out
};

// One host master's state when its async run stopped.
struct AsyncStopState {
  int hosts = 0;                      // H
  int host = 0;                       // this one's index
  uint64_t updates = 0;               // its local version: every update of its workers is in W
  std::vector<uint64_t> known;        // per host: the local version it last said (own: updates)
  AsyncPartState owned;               // its part as the owner holds it (snap empty)
  std::vector<AsyncPartState> parts;  // per part: this host's side as a pusher
  Checkpoint checkpoint;  // this host's W as a checkpoint of its run (step: its updates)
};

std::string EncodeAsyncState(const AsyncStopState& s);
// kData naming `path` and what is wrong: truncated, damaged, fields out of range, parts that
// do not cut the parameters as H hosts do.
Status DecodeAsyncState(const std::string& bytes, const std::string& path, AsyncStopState* out);

// The survivors' states merged (above).
struct MergedAsync {
  Checkpoint checkpoint;     // the parameters; step: `kept` rounded down to a multiple of H
  int64_t kept = 0;          // the run's updates the parameters hold
  int64_t lost = 0;          // the lost hosts' updates they lack (at least)
  std::vector<int> missing;  // the hosts with no state, in order
};
// kData when the states are not of one run (their H, parameter count or fingerprint differ),
// name one host twice, or are none. `names` names each state in messages (its path).
Status MergeAsyncStates(const std::vector<AsyncStopState>& states,
                        const std::vector<std::string>& names, MergedAsync* out);

}  // namespace shmtrain::master
