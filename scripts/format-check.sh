#!/usr/bin/env bash
# Checks the C++ sources (every tracked .cc and .h: what .clang-format claims) against
# .clang-format in check mode: no line over 100 columns, and `clang-format --dry-run` finds
# nothing to change. Files that did not pass when the check began are listed, each with its
# count of long lines and of clang-format's findings, in scripts/format-debt.txt; a listed file
# is held to its counts (a change that adds a long line or a misformatted one fails), and
# every count only goes down: the check fails when a listed file does better than its line
# says, until the line is lowered (--update lowers it) or, clean, removed.
# Usage: scripts/format-check.sh [--update | --reset]
#   --update  lowers the list's counts to what the files now have and drops the clean files;
#             it never adds a file nor raises a count.
#   --reset   writes the list anew from the tree as it is (every file that is not clean, with
#             its counts): once, when branches begun before the check merge, never to let a
#             change through.
set -euo pipefail
cd "$(dirname "$0")/.."
list=scripts/format-debt.txt
update=0
reset=0
[[ ${1:-} == --update ]] && update=1
[[ ${1:-} == --reset ]] && reset=1
# The findings are clang-format 14's (Debian 12's): another version formats otherwise.
want_version=14
command -v clang-format >/dev/null || {
  echo "format-check: clang-format is missing (scripts/install-deps.sh all installs it)" >&2
  exit 1
}
version=$(clang-format --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [[ $version != "$want_version" ]]; then
  echo "format-check: clang-format $version; the check and $list are clang-format" \
       "$want_version's (Debian 12's clang-format package)" >&2
  exit 1
fi

# Each file's counts: "path long findings". Columns are characters (UTF-8), as clang-format
# counts them.
counts=$(mktemp)
trap 'rm -f "$counts"' EXIT
count_one() {
  local long findings
  long=$(LC_ALL=C.UTF-8 grep -cP '^.{101,}' "$1" || true)
  findings=$(clang-format --dry-run "$1" 2>&1 | grep -c ': warning: code should be' || true)
  echo "$1 $long $findings"
}
export -f count_one
git ls-files -z '*.cc' '*.h' | xargs -0 -P"$(nproc)" -n1 bash -c 'count_one "$0"' |
  sort >"$counts"

if ((reset)); then
  sed -n '/^#/p' "$list" >"$list.new"
  awk '$2 > 0 || $3 > 0' "$counts" >>"$list.new"
  mv "$list.new" "$list"
  echo "format-check: $list written anew: $(grep -vc '^#' "$list") files not clean"
  exit 0
fi

# The listed counts, then each file against them.
declare -A listed_long listed_findings
while read -r path long findings; do
  [[ -z $path || $path == \#* ]] && continue
  listed_long[$path]=$long
  listed_findings[$path]=$findings
done <"$list"
failed=0
kept=()
while read -r path long findings; do
  listed=${listed_long[$path]+x}
  max_long=${listed_long[$path]:-0} max_findings=${listed_findings[$path]:-0}
  unset "listed_long[$path]"
  if ((long > max_long)); then
    echo "format-check: $path: $long lines over 100 columns (allowed: $max_long), lines" \
         "$(LC_ALL=C.UTF-8 grep -nP '^.{101,}' "$path" | cut -d: -f1 | paste -sd,)"
    failed=1
  fi
  if ((findings > max_findings)); then
    echo "format-check: $path: clang-format would change it in $findings places (allowed:" \
         "$max_findings); clang-format --dry-run $path shows where"
    failed=1
  fi
  [[ -n $listed ]] || continue
  long=$((long < max_long ? long : max_long))
  findings=$((findings < max_findings ? findings : max_findings))
  ((long == 0 && findings == 0)) || kept+=("$path $long $findings")
  if ((update == 0 && (long < max_long || findings < max_findings))); then
    echo "format-check: $path does better than $list says: $long and $findings instead of" \
         "$max_long and $max_findings; lower its line (scripts/format-check.sh --update)"
    failed=1
  fi
done <"$counts"
if ((update == 0)); then
  for path in "${!listed_long[@]}"; do
    echo "format-check: $list lists $path, which is not a tracked C++ source: remove its line"
    failed=1
  done
fi
if ((update)); then
  sed -n '/^#/p' "$list" >"$list.new"
  printf '%s\n' "${kept[@]}" | sort >>"$list.new"
  mv "$list.new" "$list"
  echo "format-check: $list: ${#kept[@]} files left"
fi
if ((failed)); then
  echo "format-check: failed" >&2
  exit 1
fi
echo "format-check: $(wc -l <"$counts") files checked; ${#kept[@]} still listed in $list"
