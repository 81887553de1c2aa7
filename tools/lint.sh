#!/usr/bin/env bash
# tools/lint.sh - the linters CI runs on what is not C (clang-format checks the C):
#   ruff on every tracked Python file (rules in ruff.toml: pyflakes and
#   pycodestyle's errors), and shellcheck on every tracked shell script at
#   severity warning (.shellcheckrc; a file-level disable says why). Its
#   informational notes (style) are not enforced: `shellcheck -S info` lists
#   them.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t py < <(git ls-files '*.py')
ruff check --quiet "${py[@]}"
echo "ruff: ${#py[@]} Python files clean"
mapfile -t sh < <(git ls-files '*.sh' .ci/run)
shellcheck -x -S warning "${sh[@]}"
echo "shellcheck: ${#sh[@]} shell scripts clean at severity warning"
