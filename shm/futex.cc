#include "shm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace shmtrain::shm {

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int FutexWaitUntil(uint32_t* word, uint32_t expected, int64_t deadline_ns) {
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout, so a wait that is
  // interrupted and retried does not stretch the deadline.
  timespec abs{};
  abs.tv_sec = deadline_ns / 1'000'000'000;
  abs.tv_nsec = deadline_ns % 1'000'000'000;
  const long r = syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expected, &abs, nullptr,
                         FUTEX_BITSET_MATCH_ANY);
  if (r == 0) return 0;
  if (errno == EAGAIN) return 0;
  return errno;
}

int FutexWake(uint32_t* word, int n) {
  const long r = syscall(SYS_futex, word, FUTEX_WAKE, n, nullptr, nullptr, 0);
  return r < 0 ? 0 : static_cast<int>(r);
}

}  // namespace shmtrain::shm
