#!/usr/bin/env bash
# mypy resolves modules by directory layout and cannot follow setuptools' package-dir
# mapping (tickwheel.wheel lives in ./wheel). Lay the import package out as it is
# installed, with symlinks under .typecheck/, and check that tree strictly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tree="$root/.typecheck"
rm -rf "$tree" && mkdir -p "$tree/tickwheel"
for entry in "$root"/tickwheel/*; do
  ln -s "$entry" "$tree/tickwheel/$(basename "$entry")"
done
for sub in wheel shards workers registry_api bench; do
  ln -s "$root/$sub" "$tree/tickwheel/$sub"
done
cd "$tree"
exec "$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" -p tickwheel "$@"
