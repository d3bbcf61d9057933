#include "master/unit/segment_writes.h"

#include "shm/barrier.h"
#include "shm/futex.h"

namespace shmtrain::master {

void SegmentWrites::PrepareRank(int r, uint32_t incarnation) {
  shm::WorkerBlock* b = seg_.mutable_block(r);
  shm::StoreRelaxed<uint32_t>(b->attached, 0);
  shm::StoreRelease(b->incarnation, incarnation);
}

void SegmentWrites::RaiseAbort() { shm::RaiseAbort(seg_.mutable_header()); }

void SegmentWrites::SetCommit(int r, uint64_t commit) {
  shm::StoreRelaxed<uint64_t>(seg_.mutable_block(r)->commit, commit);
}

void SegmentWrites::SetTicket(int r, int64_t ticket) {
  shm::StoreRelaxed<int64_t>(seg_.mutable_block(r)->ticket, ticket);
}

void SegmentWrites::SetFirstEvalAck(int64_t k) { seg_.mutable_header()->eval_ack = k; }

void SegmentWrites::AckEval(int64_t k) { shm::AckEval(seg_.mutable_header(), k); }

void SegmentWrites::RequestStop(int64_t stop_eval) {
  shm::RequestStop(seg_.mutable_header(), stop_eval);
}

void SegmentWrites::ReleaseCheckpoint(int64_t step) {
  shm::ReleaseCheckpoint(seg_.mutable_header(), step);
}

}  // namespace shmtrain::master
