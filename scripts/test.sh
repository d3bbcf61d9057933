#!/usr/bin/env bash
# Checks the sources' format (scripts/format-check.sh), then builds and runs the tests in three
# configurations, each with what it can find (tests/CMakeLists.txt labels every test
# executable):
#   plain  the normal build: every test, the benchmarks built (the build's defaults leave both
#          out: the trainer alone, README's first command);
#   asan   ASan+UBSan: parsers, model files, checkpoints, layers, every process and fault
#          path;
#   tsan   TSan: the master's threads (CSV loader, validation evaluator, metrics exporter,
#          cross-host combiner and parameter server);
# then fuzzes every parser for a short fixed time (scripts/fuzz.sh, with the targets of the
# ASan build; any finding fails).
# Usage: scripts/test.sh [all|format|plain|asan|tsan|fuzz]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
jobs=$(nproc)

# The kernels' paths (nn/cpu.h, docs/kernels.md). On a CPU with AVX-512 the normal build's
# tests run on it (what the CPU has), and the sanitizer builds' tests and the normal build's
# model tests run again on the AVX2 path (SHMTRAIN_CPU=avx2, as on a CPU without AVX-512): every
# test executable then runs on both paths, for the time of one more run of the model tests. On
# a CPU without AVX-512 every test runs on the AVX2 path, and the tests of AVX-512 kernels or of
# bf16 skip, saying why.
avx2_path=()
grep -qw avx512f /proc/cpuinfo && avx2_path=(env SHMTRAIN_CPU=avx2)

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

# build <build dir> <targets or ""> <cmake args...>: configures and builds.
build() {
  local dir=$1 targets=$2; shift 2
  configure "$dir" "$@"
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$jobs" ${targets:+--target $targets}
}

# run_tests <build dir> <label or ""> <tests at once> [env ...]: ctest, on the kernel path the
# env words choose (none: what the CPU has).
# A build directory that has not run its tests yet gets tests/ctest-costs.txt as its cost data:
# the seconds each test of 2 s or more took in a CI run, so that ctest starts the long ones
# (mpirun jobs, the live page, ONNX Runtime on a test set) first instead of last, when the
# rest are done and they alone keep two cores waiting (30 s of CI's plain stage). ctest then
# keeps the directory's costs up to date itself.
run_tests() {
  local dir=$1 label=$2 at_once=$3; shift 3
  local t0=$SECONDS path="the kernels the CPU has"
  local costs=$dir/Testing/Temporary/CTestCostData.txt
  [ -f "$costs" ] || { mkdir -p "$(dirname "$costs")" && cp tests/ctest-costs.txt "$costs"; }
  [ $# -eq 0 ] || path="$*"
  echo "test.sh: $dir: testing${label:+ label $label} with $path"
  "$@" ctest --test-dir "$dir" --output-on-failure -j"$at_once" --timeout 600 \
    ${label:+-L "$label"}
  echo "test.sh: $dir: tested in $((SECONDS - t0)) s"
}

# The sanitizer builds are clang's (the normal build is the default compiler's): clang compiles
# them faster than g++ and its instrumented code runs faster (docs/testing.md), and the fuzz
# targets (libFuzzer is clang's) share the ASan build. What each compiles is what its label
# runs (tests/CMakeLists.txt); they skip the benchmarks.
asan_build() {
  CC=clang CXX=clang++ build build-asan \
    "shmtrain shmtrain-worker unit_tests threaded_unit_tests cli_tests fuzz_all" "${asan_args[@]}"
}
asan_args=(-DSHMTRAIN_SANITIZE=address -DSHMTRAIN_FUZZ=ON -DSHMTRAIN_TESTS=ON -DSHMTRAIN_BENCH=OFF)
tsan_build() {
  CC=clang CXX=clang++ build build-tsan \
    "shmtrain shmtrain-worker threaded_unit_tests realdata_tests metrics_tests hosts_tests" \
    -DSHMTRAIN_SANITIZE=thread -DSHMTRAIN_TESTS=ON -DSHMTRAIN_BENCH=OFF
}
# halt_on_error makes a report fail the test.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

if [[ $what == all || $what == format ]]; then
  bash scripts/format-check.sh
fi
if [[ $what == all || $what == plain ]]; then
  t0=$SECONDS
  build build "" -DCMAKE_BUILD_TYPE=Release -DSHMTRAIN_TESTS=ON -DSHMTRAIN_BENCH=ON
  echo "test.sh: build: built in $((SECONDS - t0)) s"
  # Three tests at once on two cores: most of a test is a process starting or waiting for
  # another (ASan's 707 tests: 131 s at -j2, 110 s at -j3).
  run_tests build "" 3
  # The model tests (what the models compute: the normal build's alone) on the AVX2 path too.
  if [ ${#avx2_path[@]} -gt 0 ]; then
    t0=$SECONDS
    echo "test.sh: build: the model tests again with ${avx2_path[*]}"
    "${avx2_path[@]}" ctest --test-dir build --output-on-failure -j3 --timeout 600 \
      -L plain-only -E '^(monitoring|code)\.'
    echo "test.sh: build: the model tests on the AVX2 path in $((SECONDS - t0)) s"
  fi
fi
if [[ $what == all || $what == asan ]]; then
  t0=$SECONDS
  asan_build
  echo "test.sh: build-asan: built in $((SECONDS - t0)) s"
  run_tests build-asan asan 3 "${avx2_path[@]}"
fi
if [[ $what == all || $what == tsan ]]; then
  t0=$SECONDS
  tsan_build
  echo "test.sh: build-tsan: built in $((SECONDS - t0)) s"
  # TSan's tests start mpirun jobs whose host timeouts they measure: two at once.
  run_tests build-tsan tsan 2 "${avx2_path[@]}"
fi
# 6 s a target (was 20, 15, then 10): the whole run must stay under 15 minutes on 2 cores,
# where each second here is 5 of the wall; the seeded corpora (every past finding among them)
# keep a short run meaningful, and longer campaigns run by hand (docs/fuzzing.md).
if [[ $what == all || $what == fuzz ]]; then
  [[ $what == all ]] || CC=clang CXX=clang++ configure build-asan "${asan_args[@]}"
  FUZZ_BUILD=build-asan bash scripts/fuzz.sh -p 2 6
fi
echo "all test configurations passed ($what)"
