// The global operator new and delete, replaced so that LargestAllocation can see every request
// (tests/largest_allocation.h). Every form that could meet a plain operator delete goes through
// malloc and free, so that a sanitizer sees matching pairs; the aligned forms keep the
// runtime's own.
#include "tests/largest_allocation.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "gtest/gtest.h"

namespace {

std::atomic<bool> g_open{false};
std::atomic<size_t> g_largest{0};

void* Allocate(size_t n) {
  if (g_open.load(std::memory_order_relaxed)) {
    size_t seen = g_largest.load(std::memory_order_relaxed);
    while (n > seen && !g_largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
    }
  }
  return std::malloc(n == 0 ? 1 : n);
}

}  // namespace

void* operator new(size_t n) {
  if (void* p = Allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  return operator new(n);
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return Allocate(n);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return Allocate(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace shmtrain::test {

LargestAllocation::LargestAllocation() {
  const bool was_open = g_open.exchange(true);
  EXPECT_FALSE(was_open) << "allocation probes do not nest";
  g_largest.store(0);
}

LargestAllocation::~LargestAllocation() {
  g_open.store(false);
}

size_t LargestAllocation::bytes() const {
  return g_largest.load();
}

}  // namespace shmtrain::test
