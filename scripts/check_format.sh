#!/usr/bin/env bash
# Checks C++/CUDA sources against .clang-format without changing them: lists each file that
# clang-format would change, with the changed line count, and exits 1 if there is any.
#
# Usage: scripts/check_format.sh [--diff] [FILE...]
#   no FILE: every tracked or untracked-but-not-ignored *.h *.cpp *.cu *.cuh of the repository
#   --diff:  also print what clang-format would change
# CLANG_FORMAT picks the binary (default: clang-format-14, else clang-format).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
show_diff=0
if [ "${1:-}" = "--diff" ]; then show_diff=1; shift; fi
clang_format=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$clang_format" ]; then
  echo "check_format: clang-format not found (apt-get install clang-format-14, or set CLANG_FORMAT)" >&2
  exit 2
fi
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- \
    '*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh' | sort -u)
fi
bad=0 lines=0
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "check_format: no such file: $f" >&2; exit 2; }
  if ! d=$("$clang_format" --style=file "$f" | diff -u "$f" -); then
    n=$(tail -n +3 <<< "$d" | grep -c '^-' || true)
    echo "$f: $n line(s) to reformat"
    [ $show_diff -eq 0 ] || echo "$d"
    bad=$((bad + 1)) lines=$((lines + n))
  fi
done
if [ $bad -gt 0 ]; then
  echo "check_format: $bad of ${#files[@]} file(s) differ from .clang-format ($lines line(s)); fix with: $clang_format -i --style=file FILE" >&2
  exit 1
fi
echo "check_format: ${#files[@]} file(s) match .clang-format"
