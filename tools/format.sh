#!/usr/bin/env bash
# tools/format.sh - clang-format over every C/CUDA source of the repo.
#   tools/format.sh          reformat in place
#   tools/format.sh --check  fail (exit 1) listing the files that differ
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.c' '*.h' '*.cu' '*.cuh')
((${#files[@]})) || exit 0
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    echo "format: these files are not clang-formatted (run tools/format.sh):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files clean"
else
  clang-format -i "${files[@]}"
fi
