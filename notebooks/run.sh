#!/bin/sh
# Executes every notebook headless; fails if any cell raises.
# Needs (Debian): jupyter-nbconvert python3-nbformat python3-ipykernel jupyter-client, and Go.
set -eu
cd "$(dirname "$0")"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for nb in 0*.ipynb; do
	echo "== $nb"
	jupyter-nbconvert --to notebook --execute --ExecutePreprocessor.timeout=300 \
		--output-dir "$out" "$nb"
done
echo "all notebooks ran"
