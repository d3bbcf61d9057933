#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang) and runs each from its seed corpus.
#
# Usage: scripts/fuzz.sh [-t TARGET]... [-p N] [-j JOBS] [-k] [SECONDS]
#   SECONDS    per target (default 20)
#   -t TARGET  run only this target (npy, npz, idx, idx_gz, csv, libsvm, model, checkpoint,
#              segment, cli, jpeg, png); repeatable
#   -p N       run N targets at once (default 1): `-p 2` on 2 cores halves the wall time
#   -j JOBS    that many fuzzing processes per target (libFuzzer's -fork): long campaigns
#   -k         keep the grown corpus in $BUILD/corpus/<target> and start from it next time
#              (default: a scratch copy of fuzz/corpus/<target>, removed afterwards)
# Environment: FUZZ_BUILD (default build-fuzz), FUZZ_FINDINGS (default $BUILD/findings).
#
# One line per target on success (executions, coverage), in target order whatever -p; exit 1
# on any finding, with the target, the reproducer and the first lines of the report. Replay a reproducer with
#   $BUILD/fuzz/fuzz_<target> <file>
# The memory limits make a large allocation from a small input a finding: a parser must
# check a declared size against the bytes there are before it allocates.
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(npy npz idx idx_gz csv libsvm model checkpoint async_state init_from segment cli
             jpeg png)
targets=()
jobs=1
parallel=1
keep=0
while getopts "t:p:j:kh" opt; do
  case $opt in
    t) targets+=("$OPTARG") ;;
    p) parallel=$OPTARG ;;
    j) jobs=$OPTARG ;;
    k) keep=1 ;;
    *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
seconds=${1:-20}
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t'" >&2; exit 2; }
done
[[ $parallel =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: -p wants a count, not '$parallel'" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: -j wants a count, not '$jobs'" >&2; exit 2; }

build=${FUZZ_BUILD:-build-fuzz}
findings=${FUZZ_FINDINGS:-$build/findings}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# The targets live in the ASan build compiled by clang (fuzz/CMakeLists.txt): a build directory
# of their own by default, or the tests' ASan build (scripts/test.sh) when FUZZ_BUILD names it.
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSHMTRAIN_SANITIZE=address -DSHMTRAIN_FUZZ=ON -DSHMTRAIN_TESTS=OFF -DSHMTRAIN_BENCH=OFF \
    -DSHMTRAIN_MPI=OFF "${launcher[@]}" >/dev/null
elif ! grep -q '^SHMTRAIN_FUZZ:BOOL=ON$' "$build/CMakeCache.txt"; then
  echo "fuzz.sh: $build is configured without the fuzz targets (SHMTRAIN_FUZZ=ON, clang," \
       "SHMTRAIN_SANITIZE=address); remove it or name another with FUZZ_BUILD" >&2
  exit 2
fi
# fuzz_all when every target runs: one build, in parallel (a list of targets builds one by one).
build_targets=("${targets[@]/#/fuzz_}")
[ ${#targets[@]} -eq ${#all_targets[@]} ] && build_targets=(fuzz_all)
cmake --build "$build" -j"$(nproc)" --target "${build_targets[@]}" >"$build/fuzz-build.log" 2>&1 ||
  { tail -30 "$build/fuzz-build.log"; echo "fuzz.sh: build failed ($build/fuzz-build.log)" >&2; exit 1; }

scratch=$(mktemp -d /tmp/shmtrain-fuzz.XXXXXX)
# The targets write their input to a file here (tmpfs); a run that dies on a finding leaves
# its last one behind, so the whole directory goes at the end.
export SHMTRAIN_FUZZ_DIR
SHMTRAIN_FUZZ_DIR=$(mktemp -d /dev/shm/fuzz-shmtrain.XXXXXX)
# On an early exit the targets still running are waited for (an interrupt stops them too).
trap 'wait; rm -rf "$scratch" "$SHMTRAIN_FUZZ_DIR"' EXIT
mkdir -p "$build/logs"
# Leaks are findings; UBSan (built not to recover) prints the stack of its report. A smaller
# quarantine than ASan's 256 MiB: freed blocks held there count against -rss_limit_mb.
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0:quarantine_size_mb=32
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# fuzz_one <target>: runs it, and writes its lines of the summary to $scratch/<target>.out;
# exit status 1 on a finding. Several run at once with -p: each writes only files of its own.
fuzz_one() {
  local t=$1 corpus log rc=0 execs cov repro
  if [ $keep -eq 1 ]; then
    corpus=$build/corpus/$t
  else
    corpus=$scratch/$t
  fi
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  mkdir -p "$findings/$t"
  local args=(-max_total_time="$seconds" -rss_limit_mb=512 -malloc_limit_mb=64 -timeout=25
              -print_final_stats=1 -artifact_prefix="$findings/$t/")
  [ -f "fuzz/dict/$t.dict" ] && args+=(-dict="fuzz/dict/$t.dict")
  [ "$jobs" -gt 1 ] && args+=(-fork="$jobs")
  log=$build/logs/$t.log
  "$build/fuzz/fuzz_$t" "${args[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  exec >"$scratch/$t.out"
  if [ $rc -eq 0 ]; then
    printf '%-11s ok   %10s execs  %s  (%ss)\n' "$t" "${execs:-?}" "${cov:-cov: ?}" "$seconds"
    return 0
  fi
  repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  printf '%-11s FAIL %10s execs  %s\n' "$t" "${execs:-?}" "${cov:-cov: ?}"
  echo "  reproducer: ${repro:-none written (see $log)}"
  echo "  log: $log"
  # The report from its first line, without the frames of libFuzzer, the sanitizers, libc and
  # the standard library: what is left is where the code under test went wrong.
  sed -n -E '/^==[0-9]+==.*ERROR|runtime error:|fuzz invariant broken|out-of-memory|^SUMMARY/,/^SUMMARY/p' "$log" |
    grep -v -E 'fuzzer::|__sanitizer|__asan|libc\.so|libc_start|_start |pthread_kill|raise\.c|abort\.c|/include/c\+\+/|To change the out-of-memory|^MS:|^[Bb]ase64|^0x[0-9a-f]+,|^\\[0-9]|NOTE: libFuzzer|Combine libFuzzer|^stat::|artifact_prefix|^$' |
    sed -E 's/ \(BuildId: [0-9a-f]+\)//' | head -14 | sed 's/^/  | /' || true
  return 1
}

# Up to $parallel targets at once. Each one's lines are printed once it and every target before
# it are done ($scratch/<target>.rc written), so the output reads as a serial run's.
failed=0
next=0  # the first target whose lines are not printed yet
print_done() {
  while [ $next -lt ${#targets[@]} ] && [ -f "$scratch/${targets[$next]}.rc" ]; do
    cat "$scratch/${targets[$next]}.out"
    [ "$(cat "$scratch/${targets[$next]}.rc")" = 0 ] || failed=1
    next=$((next + 1))
  done
}
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do
    wait -n || true
    print_done
  done
  ( rc=0; fuzz_one "$t" || rc=$?; echo $rc >"$scratch/$t.rc" ) &
done
while [ $next -lt ${#targets[@]} ]; do
  [ "$(jobs -rp | wc -l)" -eq 0 ] || wait -n || true
  print_done
  if [ "$(jobs -rp | wc -l)" -eq 0 ] && [ $next -lt ${#targets[@]} ] &&
     [ ! -f "$scratch/${targets[$next]}.rc" ]; then
    echo "fuzz.sh: the run of ${targets[$next]} ended without a result" >&2
    exit 1
  fi
done
[ $failed -eq 0 ] || { echo "fuzz.sh: findings above" >&2; exit 1; }
