// The read-only view of the segment, held by the compiler: a `const shm::Segment&` gives
// pointers to const, so a unit handed the view (the master's run units, the exporter) cannot
// store into the segment, and only the holder of the Segment itself reaches the mutable_
// accessors (master/unit/segment_writes.h on the master's side, a worker's own loop on its).
// The static_asserts below are the test: this file does not compile when the view gives a
// mutable pointer out. The runtime test shows that both sides reach the same bytes.
#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "gtest/gtest.h"
#include "master/unit/segment_writes.h"
#include "shm/barrier.h"
#include "shm/layout.h"
#include "shm/segment.h"
#include "tests/parabola_layout.h"

namespace shmtrain::shm {
namespace {

using View = const Segment&;
using Holder = Segment&;

// Every accessor of the view gives a pointer to const.
static_assert(std::is_same_v<decltype(std::declval<View>().base()), const char*>);
static_assert(std::is_same_v<decltype(std::declval<View>().header()), const Header*>);
static_assert(std::is_same_v<decltype(std::declval<View>().block(0)), const WorkerBlock*>);
static_assert(std::is_same_v<decltype(std::declval<View>().x()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<View>().y()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<View>().params(0)), const float*>);
static_assert(std::is_same_v<decltype(std::declval<View>().state(0, 0)), const float*>);
static_assert(std::is_same_v<decltype(std::declval<View>().snapshot(0)), const float*>);
static_assert(std::is_same_v<decltype(std::declval<View>().host_sum()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<View>().global_sum()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<View>().stats(0)), const double*>);
static_assert(std::is_same_v<decltype(std::declval<View>().global_stats()), const double*>);
static_assert(std::is_same_v<decltype(std::declval<View>().slot(0)), const SlotHeader*>);
static_assert(std::is_same_v<decltype(std::declval<View>().grad(0)), const float*>);
// The holder's reads are the view's too: a write is always asked for by name.
static_assert(std::is_same_v<decltype(std::declval<Holder>().header()), const Header*>);
static_assert(std::is_same_v<decltype(std::declval<Holder>().params(0)), const float*>);

// Each mutable_ accessor: the holder's, and out of the view's reach. S is Segment or const
// Segment; a requires-expression in a concept turns "does not compile" into false.
#define SHMTRAIN_MUTABLE_ONLY(name, call, type)                                   \
  template <class S>                                                               \
  concept Reaches_##name = requires(S& s) {                                        \
    { s.call } -> std::same_as<type>;                                              \
  };                                                                               \
  static_assert(Reaches_##name<Segment>, #call " gives the holder a " #type);      \
  static_assert(!Reaches_##name<const Segment>, #call " must not be the view's")
SHMTRAIN_MUTABLE_ONLY(header, mutable_header(), Header*);
SHMTRAIN_MUTABLE_ONLY(block, mutable_block(0), WorkerBlock*);
SHMTRAIN_MUTABLE_ONLY(x, mutable_x(), float*);
SHMTRAIN_MUTABLE_ONLY(y, mutable_y(), float*);
SHMTRAIN_MUTABLE_ONLY(params, mutable_params(0), float*);
SHMTRAIN_MUTABLE_ONLY(state, mutable_state(0, 0), float*);
SHMTRAIN_MUTABLE_ONLY(snapshot, mutable_snapshot(0), float*);
SHMTRAIN_MUTABLE_ONLY(host_sum, mutable_host_sum(), float*);
SHMTRAIN_MUTABLE_ONLY(global_sum, mutable_global_sum(), float*);
SHMTRAIN_MUTABLE_ONLY(stats, mutable_stats(0), double*);
SHMTRAIN_MUTABLE_ONLY(global_stats, mutable_global_stats(), double*);
SHMTRAIN_MUTABLE_ONLY(slot, mutable_slot(0), SlotHeader*);
SHMTRAIN_MUTABLE_ONLY(grad, mutable_grad(0), float*);
#undef SHMTRAIN_MUTABLE_ONLY

// What a unit would write through the view does not compile: plain stores, layout.h's atomic
// stores and adds, barrier.h's master-side words. The same writes through the holder's
// mutable_ accessors do.
template <class S>
concept StoresPlainly = requires(S& s) {
  s.header()->eval_ack = 1;
};
template <class S>
concept StoresParams = requires(S& s) {
  s.params(0)[0] = 1.0f;
};
template <class S>
concept StoresPhase = requires(S& s) {
  StorePhase(*s.block(0), 1);
};
template <class S>
concept StoresRelaxed = requires(S& s) {
  StoreRelaxed<uint64_t>(s.block(0)->steps_total, 1);
};
template <class S>
concept AddsSeqCst = requires(S& s) {
  AddSeqCst<uint32_t>(s.header()->wake_seq, 1);
};
template <class S>
concept RaisesAbort = requires(S& s) {
  RaiseAbort(s.header());
};
template <class S>
concept PublishesLoss = requires(S& s) {
  PublishLoss(s.header()->loss_ring[0], 0, 1.0);
};
static_assert(!StoresPlainly<const Segment> && !StoresParams<const Segment> &&
              !StoresPhase<const Segment> && !StoresRelaxed<const Segment> &&
              !AddsSeqCst<const Segment> && !RaisesAbort<const Segment> &&
              !PublishesLoss<const Segment>);
// The holder, too, writes only by name: its header() and params() are the view's.
static_assert(!StoresPlainly<Segment> && !StoresParams<Segment> && !StoresPhase<Segment>);
template <class S>
concept StoresByName = requires(S& s) {
  s.mutable_header()->eval_ack = 1;
  s.mutable_params(0)[0] = 1.0f;
  StorePhase(*s.mutable_block(0), 1);
  StoreRelaxed<uint64_t>(s.mutable_block(0)->steps_total, 1);
  AddSeqCst<uint32_t>(s.mutable_header()->wake_seq, 1);
  RaiseAbort(s.mutable_header());
  PublishLoss(s.mutable_header()->loss_ring[0], 0, 1.0);
};
static_assert(StoresByName<Segment> && !StoresByName<const Segment>);

// Every read of a concurrent word works on the view: layout.h's loads take const words.
template <class S>
concept LoadsEveryWord = requires(S& s, double* loss) {
  LoadPhase(*s.block(0));
  LoadCommit(*s.block(0));
  LoadRelaxed(s.block(0)->steps_total);
  LoadAcquire(s.block(0)->incarnation);
  LoadSeqCst(s.header()->wake_seq);
  LoadAbortEpoch(*s.header());
  ReadLoss(s.header()->loss_ring[0], 0, loss);
  HostSumsComplete(s.block(0), 1, 0);
  StatsComplete(s.block(0), 1, 0);
};
static_assert(LoadsEveryWord<const Segment>);

// The master's writes are made from the Segment it holds, never from a view.
static_assert(std::is_constructible_v<master::SegmentWrites, Segment&>);
static_assert(!std::is_constructible_v<master::SegmentWrites, const Segment&>);

TEST(SegmentView, TheViewReadsWhatTheHolderWrote) {
  Segment seg;
  ASSERT_TRUE(Segment::Create(MakeSegmentName(), test::ParabolaLayout(Mode::kSync, 2, 1), &seg)
                  .ok());
  seg.mutable_params(1)[0] = 2.5f;
  seg.mutable_state(0, 1)[0] = -1.5f;
  StorePhase(*seg.mutable_block(1), 7);
  master::SegmentWrites writes(seg);
  writes.ReleaseCheckpoint(4);

  const Segment& view = seg;
  EXPECT_EQ(view.params(1)[0], 2.5f);
  EXPECT_EQ(view.state(0, 1)[0], -1.5f);
  EXPECT_EQ(LoadPhase(*view.block(1)), 7u);
  EXPECT_EQ(LoadSeqCst(view.header()->released_step), 4);
  EXPECT_EQ(static_cast<const void*>(view.params(1)), static_cast<void*>(seg.mutable_params(1)));
  EXPECT_EQ(static_cast<const void*>(view.block(1)), static_cast<void*>(seg.mutable_block(1)));
  EXPECT_EQ(static_cast<const void*>(view.grad(1)), static_cast<void*>(seg.mutable_grad(1)));
}

}  // namespace
}  // namespace shmtrain::shm
