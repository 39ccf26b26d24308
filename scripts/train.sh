#!/usr/bin/env bash
# Trains the default config (configs/quickstart.toml) on the built-in generated sample dataset, on the GPU if
# there is one, else on the CPU. Extra arguments go to `pinfeed train` (e.g. --mode dual_stream train.epochs=2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
"$repo/scripts/setup.sh"
build=${PINFEED_BUILD_DIR:-$repo/build}
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
data=$cache/datasets/quickstart-v1
if [ ! -f "$data/.complete" ]; then
  echo "[train] generating the sample dataset in $data" >&2
  rm -rf "$data"
  "$build/app/pinfeed" gen-data --out "$data" --classes 10 --train-per-class 260 --val-per-class 50 --size 48x48 --seed 1
  touch "$data/.complete"
fi
cd "$repo"
exec "$build/app/pinfeed" train --config configs/quickstart.toml "data.root=\"$data\"" "$@"
