#!/usr/bin/env bash
# Writes docs/config-keys.md's table from the key table (`pinfeed help config --markdown`), between its markers,
# after a key changes. A test (Cli.ConfigKeysPageIsTheTableHelpConfigPrints) fails when the two differ.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
exe=${PINFEED_EXE:-${PINFEED_BUILD_DIR:-$repo/build}/app/pinfeed}
table=$("$exe" help config --markdown)
TABLE="$table" python3 - "$repo/docs/config-keys.md" <<'PY'
import os, sys
path = sys.argv[1]
text = open(path).read()
begin, end = "<!-- config-keys:begin -->\n", "<!-- config-keys:end -->"
a, b = text.index(begin) + len(begin), text.index(end)
open(path, "w").write(text[:a] + os.environ["TABLE"] + "\n" + text[b:])
PY
