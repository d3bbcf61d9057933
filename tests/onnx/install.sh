#!/usr/bin/env bash
# Installs ONNX Runtime for Node.js (npm's onnxruntime-node, the version package-lock.json
# pins) into WORKDIR/node_modules, for tests/onnx_test.cc.
#
#   bash tests/onnx/install.sh WORKDIR
#
# WORKDIR is a build directory (CTest gives build/tests/onnxruntime), never the source tree.
# `npm ci --ignore-scripts`: the package carries the CPU runtime for every platform (linux x64
# among them); its install script would only fetch GPU binaries from a host outside the npm
# registry. Skipped when the lock file installed last time is this one. Exits 0 when
# WORKDIR/node_modules/onnxruntime-node loads, 1 otherwise (npm's or node's messages on
# stderr), 2 on a usage error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: bash tests/onnx/install.sh WORKDIR" >&2; exit 2; }
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "install.sh: '$tool' not found: ONNX Runtime's checks need Node.js and npm (Debian:" \
         "apt-get install nodejs npm, which scripts/install-deps.sh does when npm is missing)" \
         "and access to the npm registry." >&2
    exit 1
  fi
done
work=$(realpath -m -- "$1")
mkdir -p "$work"
if ! cmp -s "$here/package-lock.json" "$work/installed-package-lock.json" \
   || [ ! -d "$work/node_modules/onnxruntime-node" ]; then
  rm -f "$work/installed-package-lock.json"
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  if ! (cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
          >npm-ci.log 2>&1); then
    cat "$work/npm-ci.log" >&2
    echo "install.sh: npm ci failed in $work (is the npm registry reachable? npm config get" \
         "registry)" >&2
    exit 1
  fi
  cp "$here/package-lock.json" "$work/installed-package-lock.json"
fi
cd "$work" && node -e 'const ort = require("onnxruntime-node");
                       console.log("onnxruntime-node " + ort.env.versions.node)'
