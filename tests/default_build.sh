#!/usr/bin/env bash
# README's first command builds the trainer alone: a build directory configured with the
# defaults has the two programs and no test or benchmark target. Configures a fresh directory
# with Ninja (a few seconds; nothing is compiled) and lists what it would make.
# Usage: default_build.sh SOURCE_DIR
set -euo pipefail
src=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake -S "$src" -B "$dir" -G Ninja >/dev/null
# Every file the build would make, "path: rule" a line.
targets=$(ninja -C "$dir" -t targets all)
status=0
for want in shmtrain shmtrain-worker; do
  grep -qE "^$want: CXX_EXECUTABLE" <<<"$targets" ||
    { echo "default_build: the default build has no $want target"; status=1; }
done
for unwanted in tests/unit_tests tests/cli_tests bench/kernel_bench bench/conv_bench; do
  if grep -qE "^$unwanted: CXX_EXECUTABLE" <<<"$targets"; then
    echo "default_build: the default build has $unwanted: tests and benchmarks are asked for"
    status=1
  fi
done
[ $status -eq 0 ] && echo "default_build: the trainer alone"
exit $status
