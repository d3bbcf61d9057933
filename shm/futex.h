// Cross-process futex wait/wake on a 32-bit word in shared memory, with deadlines.
//
// Raw syscall(SYS_futex) without FUTEX_PRIVATE_FLAG: libstdc++'s atomic::wait and
// std::barrier use private futexes, which never wake a waiter in another process.
#pragma once

#include <cstdint>

namespace shmtrain::shm {

// CLOCK_MONOTONIC in nanoseconds: the clock of every deadline and heartbeat.
int64_t MonotonicNs();

// Sleeps while *word == expected, until woken or until deadline_ns (absolute,
// CLOCK_MONOTONIC). Returns 0 when woken or when the word already differed (the caller
// re-checks its condition either way), ETIMEDOUT at the deadline, EINTR on a signal.
int FutexWaitUntil(uint32_t* word, uint32_t expected, int64_t deadline_ns);

// Wakes up to n waiters on word. Returns the number woken.
int FutexWake(uint32_t* word, int n);

// A pause for spin loops.
inline void CpuRelax() { __builtin_ia32_pause(); }

}  // namespace shmtrain::shm
