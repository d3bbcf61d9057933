#!/usr/bin/env bash
# Installs the Debian packages shmtrain needs to build, test and be watched, if missing.
# Boost must be 1.81 (libboost1.81-dev), which replaces Debian's default 1.74 -dev packages.
set -euo pipefail
# python3 runs monitoring/check_assets.py in the tests.
packages=(cmake g++ make python3 libboost1.81-dev libboost-filesystem1.81-dev libeigen3-dev
          libgtest-dev prometheus-cpp-dev prometheus)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
