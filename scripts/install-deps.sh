#!/usr/bin/env bash
# Installs the Debian packages shmtrain needs to build, test and be watched, if missing.
# Only Debian's default versions (Boost 1.74 on Debian 12), and never at the cost of a package
# the user already has: apt-get runs with --no-remove, so an install that would remove anything
# stops with an error and changes nothing.
set -euo pipefail
# libcivetweb-dev (which prometheus-cpp-dev depends on) is the master's HTTP server
# (monitoring/exporter.h). python3 runs monitoring/check_assets.py and bench/digits_wall.py.
# Open MPI (openmpi-bin for mpirun, libopenmpi-dev to build with it) gives several hosts; the
# build works without it.
# clang and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) build scripts/fuzz.sh's
# targets. ninja-build runs the builds (scripts/test.sh): 10% less wall than make's on 2 cores.
# libjpeg62-turbo-dev and libpng-dev decode image folders (data/image.h); python3-pil decodes
# the same files in the tests, as the reference. protobuf-compiler, python3-protobuf and
# python3-crc32c decode TensorBoard event files in the tests as TensorBoard reads them;
# chromium (headless) loads the master's live page in the tests.
packages=(cmake g++ make ninja-build python3 libboost-dev libboost-filesystem-dev libeigen3-dev
          libcli11-dev nlohmann-json3-dev zlib1g-dev libgtest-dev prometheus-cpp-dev libcivetweb-dev
          prometheus openmpi-bin libopenmpi-dev dataset-fashion-mnist python3-numpy
          clang libclang-rt-14-dev libjpeg62-turbo-dev libpng-dev python3-pil
          protobuf-compiler python3-protobuf python3-crc32c chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm run the dashboard's type check (monitoring/schema/check.sh). Debian's nodejs and
# npm only when there is no npm at all: a nodejs from elsewhere (nodesource's) brings its own
# npm, and Debian's npm package conflicts with it.
command -v npm >/dev/null || missing+=(nodejs npm)
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
