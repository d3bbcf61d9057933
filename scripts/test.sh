#!/usr/bin/env bash
# Builds and runs the tests in three configurations, each with what it can find
# (tests/CMakeLists.txt labels every test executable):
#   plain  the normal build: every test, the benchmarks built;
#   asan   ASan+UBSan: parsers, model files, checkpoints, layers, every process and fault
#          path;
#   tsan   TSan: the master's threads (CSV loader, validation evaluator, metrics exporter,
#          cross-host combiner and parameter server);
# then fuzzes every parser for a short fixed time (scripts/fuzz.sh, with the targets of the
# ASan build; any finding fails).
# Usage: scripts/test.sh [all|plain|asan|tsan|fuzz]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
jobs=$(nproc)

# run <build dir> <label or ""> <targets or ""> <cmake args...>; $tests_at_once tests run at
# once (ctest -j).
run() {
  local dir=$1 label=$2 targets=$3; shift 3
  local t0=$SECONDS
  configure "$dir" "$@"
  if [ -n "$targets" ]; then
    # shellcheck disable=SC2086
    cmake --build "$dir" -j"$jobs" --target $targets
  else
    cmake --build "$dir" -j"$jobs"
  fi
  local t1=$SECONDS
  ctest --test-dir "$dir" --output-on-failure -j"$tests_at_once" --timeout 600 ${label:+-L "$label"}
  echo "test.sh: $dir: built in $((t1 - t0)) s, tested in $((SECONDS - t1)) s"
}

# configure <build dir> <cmake args...>: the compiler is $CXX's (cmake's default when unset),
# the generator Ninja where it is installed (scripts/install-deps.sh installs it; Make
# otherwise); a directory configured with another compiler or generator is made anew.
configure() {
  local dir=$1; shift
  local cxx generator="Unix Makefiles"
  cxx=$(command -v "${CXX:-c++}")
  command -v ninja >/dev/null && generator=Ninja
  if [ -f "$dir/CMakeCache.txt" ] &&
     { ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$cxx" "$dir/CMakeCache.txt" ||
       ! grep -qx "CMAKE_GENERATOR:INTERNAL=$generator" "$dir/CMakeCache.txt"; }; then
    echo "test.sh: $dir was configured with another compiler or generator than $cxx," \
         "$generator; configuring it anew"
    rm -rf "$dir"
  fi
  cmake -S . -B "$dir" -G "$generator" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
}

# What each sanitizer build compiles: what its label runs (tests/CMakeLists.txt).
asan_targets="shmtrain shmtrain-worker unit_tests threaded_unit_tests cli_tests fuzz_all"
tsan_targets="shmtrain shmtrain-worker threaded_unit_tests realdata_tests metrics_tests hosts_tests"
# Three tests at once on two cores: most of a test is a process starting or waiting for
# another (ASan's 707 tests: 131 s at -j2, 110 s at -j3). TSan's tests start mpirun jobs whose
# host timeouts they measure: two at once.
tests_at_once=3
[[ $what == all || $what == plain ]] && run build "" "" -DCMAKE_BUILD_TYPE=Release
# Sanitizer builds skip the benchmarks. halt_on_error makes a report fail the test.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# The sanitizer builds are clang's (the normal build is the default compiler's): clang compiles
# them faster than g++ and its instrumented code runs faster (docs/testing.md), and
# the fuzz targets (libFuzzer is clang's) share the ASan build.
export CC=clang CXX=clang++
asan=(-DSHMTRAIN_SANITIZE=address -DSHMTRAIN_FUZZ=ON -DSHMTRAIN_BENCH=OFF)
[[ $what == all || $what == asan ]] &&
  run build-asan asan "$asan_targets" "${asan[@]}"
[[ $what == all || $what == tsan ]] &&
  tests_at_once=2 run build-tsan tsan "$tsan_targets" -DSHMTRAIN_SANITIZE=thread -DSHMTRAIN_BENCH=OFF
# 6 s a target (was 20, 15, then 10): the whole run must stay under 15 minutes on 2 cores,
# where each second here is 5 of the wall; the seeded corpora (every past finding among them)
# keep a short run meaningful, and longer campaigns run by hand (docs/fuzzing.md).
if [[ $what == all || $what == fuzz ]]; then
  [[ $what == all ]] || configure build-asan "${asan[@]}"
  FUZZ_BUILD=build-asan bash scripts/fuzz.sh -p 2 6
fi
echo "all test configurations passed ($what)"
