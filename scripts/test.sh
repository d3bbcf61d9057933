#!/usr/bin/env bash
# Builds and runs every test in three configurations: the normal build, ASan+UBSan and TSan.
# Usage: scripts/test.sh [all|plain|asan|tsan]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
jobs=$(nproc)

run() {  # run <build dir> <cmake args...>
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
  ctest --test-dir "$dir" --output-on-failure -j2 --timeout 600
}

[[ $what == all || $what == plain ]] && run build
# Sanitizer builds skip the benchmarks. halt_on_error makes a report fail the test.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
[[ $what == all || $what == asan ]] && run build-asan -DSHMTRAIN_SANITIZE=address -DSHMTRAIN_BENCH=OFF
[[ $what == all || $what == tsan ]] && run build-tsan -DSHMTRAIN_SANITIZE=thread -DSHMTRAIN_BENCH=OFF
echo "all test configurations passed ($what)"
