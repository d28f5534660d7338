#!/usr/bin/env bash
# Rewrites the project's own includes to the layered form of issue 9: "core/x.h" becomes
# "trident/core/x.h" (likewise backends/, kernels/, models/), and the umbrella <trident.h>
# becomes <trident/trident.h>. Idempotent: a rewritten line no longer matches.
#
# Usage: scripts/dev/rewrite_includes.sh [FILE...]
# Without files: every tracked or untracked-but-not-ignored C/C++/CUDA/OpenCL source and
# Markdown file of the repository (code blocks in the README hold #include lines too).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- \
    '*.h' '*.hpp' '*.c' '*.cc' '*.cpp' '*.cu' '*.cuh' '*.cl' '*.md' | sort -u)
fi
[ ${#files[@]} -gt 0 ] || exit 0
# Only #include lines: "core/..." or <core/...> -> "trident/core/..." (quote style kept).
sed -i -E \
  -e 's@^([[:space:]]*#[[:space:]]*include[[:space:]]*)(["<])(core|backends|kernels|models)/@\1\2trident/\3/@' \
  -e 's@^([[:space:]]*#[[:space:]]*include[[:space:]]*)(["<])trident\.h([">])@\1\2trident/trident.h\3@' \
  "${files[@]}"
