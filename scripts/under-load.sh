#!/usr/bin/env bash
# Runs one test executable's filter N times with B busy loops beside it (the loaded machine a
# test must hold on), and prints how many runs passed.
# Usage: scripts/under-load.sh <test executable> <gtest filter> [N=20] [B=4]
set -uo pipefail
exe=$1 filter=$2 n=${3:-20} busy=${4:-4}
pids=()
for _ in $(seq "$busy"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
pass=0 log=$(mktemp)
for i in $(seq "$n"); do
  if "$exe" --gtest_filter="$filter" >"$log" 2>&1; then
    pass=$((pass + 1))
  else
    echo "run $i failed:"; grep -E "Failure|Expected|Which is|Actual|actual|FAILED|error" "$log" | head -20
  fi
done
rm -f "$log"
echo "$filter: $pass of $n passed with $busy busy loops"
[ "$pass" -eq "$n" ]
