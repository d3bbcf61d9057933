#!/usr/bin/env bash
# Type-checks the Grafana dashboard against Grafana's own types (@grafana/schema) at each
# Grafana version package.json names, with TypeScript's compiler.
#
#   bash monitoring/schema/check.sh WORKDIR [DASHBOARD]
#
# WORKDIR is a build directory (CTest gives build/tests/dashboard-schema), never the source
# tree: package.json and package-lock.json are copied there and `npm ci` installs the pinned
# packages into WORKDIR/node_modules from the npm registry (again only when the lock file
# changed). DASHBOARD defaults to monitoring/grafana-dashboard.json.
#
# For each dependency named grafana-schema-* (an npm alias of @grafana/schema at one version)
# it writes WORKDIR/<alias>/check.ts, which assigns the dashboard's JSON text, as an object
# literal (so that unknown keys are errors), to a variable of the type dashboard-types.ts
# builds from Grafana's (its Dashboard type with each panel's plugin types), and that variable
# to Grafana's Dashboard type; then runs tsc --strict --noEmit on it with "@grafana/schema"
# mapped to that alias. The JSON starts on line 1 of check.ts, so a message's line is the
# dashboard's, and such messages name the dashboard's file. Exits 0 when every version passes,
# 1 otherwise (tsc's messages on stderr), 2 on a usage error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: bash monitoring/schema/check.sh WORKDIR [DASHBOARD]"
[ $# -ge 1 ] && [ $# -le 2 ] && [ -n "$1" ] || { echo "$usage" >&2; exit 2; }
dashboard=${2:-$here/../grafana-dashboard.json}
[ -r "$dashboard" ] || { echo "check.sh: cannot read $dashboard" >&2; exit 2; }
dashboard=$(cd "$(dirname "$dashboard")" && pwd)/$(basename "$dashboard")

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "check.sh: '$tool' not found: the dashboard's type check needs Node.js and npm" \
         "(Debian: apt-get install nodejs npm, which scripts/install-deps.sh does when npm is" \
         "missing) and access to the npm registry." >&2
    exit 1
  fi
done

# Inside a git checkout, WORKDIR must be outside it or ignored by it (build*/ is).
top=$(cd "$here/../.." && pwd)
work=$(realpath -m -- "$1")
ignored=0
case "$work/" in
  "$top"/*) git -C "$top" check-ignore -q "$work" 2>/dev/null || ignored=$? ;;
esac
if [ "$ignored" -eq 1 ]; then
  echo "check.sh: WORKDIR $work is in the source tree; give a build directory (node_modules" \
       "goes there)" >&2
  exit 2
fi
mkdir -p "$work"

# npm ci deletes node_modules and installs exactly the lock file. Skipped when the lock file
# installed last time is this one.
if ! cmp -s "$here/package-lock.json" "$work/installed-package-lock.json" \
   || [ ! -x "$work/node_modules/.bin/tsc" ]; then
  rm -f "$work/installed-package-lock.json"
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  if ! (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >npm-ci.log 2>&1); then
    cat "$work/npm-ci.log" >&2
    echo "check.sh: npm ci failed in $work (is the npm registry reachable? npm config get" \
         "registry: $(npm config get registry 2>/dev/null))" >&2
    exit 1
  fi
  cp "$here/package-lock.json" "$work/installed-package-lock.json"
fi
cp "$here/dashboard-types.ts" "$work/"

# JSON, not merely a JavaScript expression: TypeScript would also take comments and trailing
# commas.
node -e 'try { JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); }
  catch (e) { console.error(`check.sh: ${process.argv[1]} is not valid JSON: ${e.message}`);
              process.exit(1); }' "$dashboard"

aliases=$(node -e 'const p = require(process.argv[1]);
  console.log(Object.keys(p.dependencies).filter(n => n.startsWith("grafana-schema-")).join(" "))' \
  "$here/package.json")
tsc_version=$(node -p 'require(process.argv[1]).version' \
  "$work/node_modules/typescript/package.json")
lines=$(awk 'END { print NR }' "$dashboard")
prefix="const dashboard: FromJson<ShmtrainDashboard> = "
failed=0
for alias in $aliases; do
  version=$(node -p 'require(process.argv[1]).version' "$work/node_modules/$alias/package.json")
  dir=$work/$alias
  mkdir -p "$dir"
  cat >"$dir/tsconfig.json" <<EOF
{
  "compilerOptions": {
    "target": "es2022",
    "module": "esnext",
    "moduleResolution": "bundler",
    "skipLibCheck": true,
    "types": [],
    "paths": {
      "@grafana/schema": ["../node_modules/$alias"],
      "@grafana/schema/*": ["../node_modules/$alias/*"]
    }
  },
  "files": ["check.ts"]
}
EOF
  {
    printf '%s' "$prefix"
    cat "$dashboard"
    cat <<EOF

;
// Every panel as ShmtrainDashboard types it is also one of Grafana's Dashboard type.
export const asGrafana: FromJson<Dashboard> = dashboard;

import type { Dashboard } from "$alias";
import type { FromJson, ShmtrainDashboard } from "../dashboard-types";
EOF
  } >"$dir/check.ts"
  if out=$(cd "$dir" && "$work/node_modules/.bin/tsc" --strict --noEmit --pretty false -p . 2>&1)
  then
    echo "dashboard type-checks against @grafana/schema $version (TypeScript $tsc_version)"
  else
    failed=1
    echo "check.sh: $dashboard does not type-check against @grafana/schema $version:" >&2
    # tsc names files relative to $dir. check.ts(L,C) with L within the JSON is the dashboard's
    # line L (column C less the prefix on line 1).
    printf '%s\n' "$out" | awk -v f="$dashboard" -v n="$lines" -v p="${#prefix}" -v d="$dir/" '
      match($0, /^[^ (]+\([0-9]+,[0-9]+\)/) {
        file = substr($0, 1, index($0, "(") - 1)
        split(substr($0, length(file) + 2, RLENGTH - length(file) - 2), lc, ",")
        if (file == "check.ts" && lc[1] + 0 <= n + 0) {
          c = lc[1] == 1 ? lc[2] - p : lc[2]
          print f "(" lc[1] "," c ")" substr($0, RLENGTH + 1)
        } else {
          print d $0
        }
        next
      }
      { print }' >&2
  fi
done
exit "$failed"
