#!/bin/sh
# Runs a Python test script with the venv that scripts/setup.sh names in BUILD/.venv_path, or $PINFEED_PYTHON.
# Exits 77 (ctest: skipped) when there is neither. Usage: python_test.sh BUILD SCRIPT [ARGS...]
build=$1
shift
py=${PINFEED_PYTHON:-}
if [ -z "$py" ] && [ -f "$build/.venv_path" ]; then py="$(cat "$build/.venv_path")/bin/python"; fi
if [ -z "$py" ] || [ ! -x "$py" ]; then
  echo "no Python venv (scripts/setup.sh writes $build/.venv_path; or set PINFEED_PYTHON): skipped"
  exit 77
fi
exec "$py" "$@"
