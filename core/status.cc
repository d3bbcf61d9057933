#include "shmtrain/status.h"

#include <cstdio>
#include <cstdlib>

namespace shmtrain {

const char* WorkerExitName(int code) {
  switch (code) {
    case kWorkerOk: return "finished";
    case kWorkerBadArgs: return "bad arguments";
    case kWorkerNoSegment: return "cannot open the segment";
    case kWorkerBadMagic: return "segment has a wrong magic number";
    case kWorkerBadAbi: return "segment has another ABI version";
    case kWorkerBadLayout: return "segment layout does not match this build";
    case kWorkerAborted: return "aborted by the master";
    case kWorkerBarrierTimeout: return "barrier wait passed its deadline";
    case kWorkerOrphaned: return "master is gone";
    case kWorkerBadRank: return "rank or incarnation out of range";
    case kWorkerInternal: return "internal error";
    case kWorkerInjectedFault: return "injected fault (test hook)";
    case kWorkerDiverged: return "the loss or gradient became non-finite";
    default: return "unknown exit code";
  }
}

void Die(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "shmtrain: internal error at %s:%d: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

int Status::exit_code() const {
  switch (code_) {
    case Code::kOk: return kExitOk;
    case Code::kUsage:
    case Code::kData: return kExitUsage;
    case Code::kResource: return kExitResource;
    case Code::kWorkerFailed: return kExitWorkerFailed;
    case Code::kInterrupted: return kExitInterrupted;
    case Code::kInternal: return kExitInternal;
    case Code::kDiverged: return kExitDiverged;
    case Code::kHostLost: return kExitHostLost;
  }
  return kExitInternal;
}

}  // namespace shmtrain
