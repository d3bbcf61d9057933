#!/usr/bin/env bash
# Installs the Debian packages shmtrain needs, if missing.
# Usage: scripts/install-deps.sh [trainer|hosts|all]   (default: all)
#   trainer  what building and running the trainer needs (README's first command);
#   hosts    the trainer's, and Open MPI for training over several hosts (docs/hosts.md);
#   all      everything the tests, the sanitizer builds, fuzzing and the monitoring checks
#            need besides (README's second command, CI).
# Only Debian's default versions (Boost 1.74 on Debian 12), and never at the cost of a package
# the user already has: apt-get runs with --no-remove, so an install that would remove anything
# stops with an error and changes nothing. With everything there it does nothing (no apt-get).
set -euo pipefail
what=${1:-all}
# The trainer's build (CMakeLists.txt's REQUIRED find_package calls): the compiler, CMake and
# Ninja, Boost (Process, Interprocess; Filesystem under Process), Eigen, CLI11, nlohmann-json,
# zlib, libjpeg-turbo and libpng (image folders, data/image.h), prometheus-cpp and civetweb (the
# master's metrics and live page, monitoring/exporter.h).
trainer=(cmake g++ ninja-build libboost-dev libboost-filesystem-dev libeigen3-dev libcli11-dev
         nlohmann-json3-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev prometheus-cpp-dev
         libcivetweb-dev)
# Open MPI (openmpi-bin for mpirun, libopenmpi-dev to build with it): several hosts; the build
# works without it, on one host.
hosts=(openmpi-bin libopenmpi-dev)
# The tests' and CI's: make (scripts/test.sh's fallback generator), GoogleTest; python3 runs
# monitoring/check_assets.py and bench/digits_wall.py; prometheus (promtool) checks the alert
# rules and scrape config; dataset-fashion-mnist is real data for the tests, the benchmarks and
# README's examples; python3-numpy writes the NumPy files the tests load; clang and
# libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) build the sanitizer builds and
# scripts/fuzz.sh's targets; python3-pil decodes image files in the tests, as the reference;
# protobuf-compiler, python3-protobuf and python3-crc32c decode TensorBoard event files in the
# tests as TensorBoard reads them; chromium (headless) loads the master's live page in the
# tests; clang-format checks the sources' format (scripts/format-check.sh); python3-onnx's
# checker checks the ONNX exports (tests/onnx_test.cc, which runs them with npm's ONNX Runtime).
rest=(make libgtest-dev python3 prometheus dataset-fashion-mnist python3-numpy clang
      libclang-rt-14-dev python3-pil protobuf-compiler python3-protobuf python3-crc32c chromium
      clang-format python3-onnx)
case $what in
  trainer) packages=("${trainer[@]}") ;;
  hosts) packages=("${trainer[@]}" "${hosts[@]}") ;;
  all) packages=("${trainer[@]}" "${hosts[@]}" "${rest[@]}") ;;
  *) echo "usage: scripts/install-deps.sh [trainer|hosts|all]" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm run the dashboard's type check (monitoring/schema/check.sh) and ONNX Runtime
# (tests/onnx/install.sh). Debian's nodejs and
# npm only when there is no npm at all: a nodejs from elsewhere (nodesource's) brings its own
# npm, and Debian's npm package conflicts with it.
[[ $what != all ]] || command -v npm >/dev/null || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
       --no-remove "${missing[@]}"; then
  echo "install-deps: apt-get could not install ${missing[*]} without removing or breaking" \
       "installed packages; nothing was removed. Install them by hand, resolving the conflict" \
       "apt-get reports above." >&2
  exit 1
fi
