#!/usr/bin/env bash
# A new user's config (data.root alone) against the shipped ImageNet config, trained on the same JPEG files in one
# call: the defaults ("auto" decoder, channels_last, CUDA graph and transfer mode) should train at the shipped
# config's samples/s at the same precision. Rows: the minimal config in its default precision (tf32) and in fp16,
# configs/resnet50_imagenet.toml at tf32 and at its own fp16, and the defaults before they were "auto" (CPU
# decoder, contiguous, eager, pageable). Each run: EPOCHS epochs without evaluation; samples/s is the mean over
# the epochs after the first. Writes OUT_DIR/defaults.json and prints the table.
#   usage: scripts/bench_defaults.sh OUT_DIR [key=value ...]   (overrides go to every run)
#   PINFEED_BIN   pinfeed executable (default: build/app/pinfeed, built by setup.sh if missing)
#   DATA          ImageFolder (default: generated once, 100 classes x 96 photo-like JPEGs of 500x375 + 4 val)
#   EPOCHS        default 3
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/bench_defaults.sh OUT_DIR [key=value ...]}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${PINFEED_BIN:-$repo/build/app/pinfeed}
[ -x "$bin" ] || "$repo/scripts/setup.sh"
cache=${PINFEED_CACHE:-$HOME/.cache/pinfeed}
data=${DATA:-$cache/datasets/bench-photo-v1}
if [ ! -f "$data/.complete" ] && [ -z "${DATA:-}" ]; then
  rm -rf "$data"
  "$bin" gen-data --out "$data" --classes 100 --train-per-class 96 --val-per-class 4 --size 500x375 --photo \
    --quality 92 >/dev/null
  touch "$data/.complete"
fi
printf '[data]\nroot = "%s"\n' "$data" > "$out/minimal.toml"
common=("train.epochs=${EPOCHS:-3}" "train.eval=false" "$@")
shipped=("$repo/configs/resnet50_imagenet.toml" "data.root=\"$data\"" "model.num_classes=0")
run() {  # name config overrides...
  local name=$1 config=$2
  shift 2
  "$bin" train -c "$config" "$@" "${common[@]}" "run.dir=\"$out/runs-$name\"" > "$out/$name.log" 2>&1 ||
    { echo "[bench_defaults] $name failed: see $out/$name.log" >&2; tail -5 "$out/$name.log" >&2; exit 1; }
  echo "[bench_defaults] $name: $(grep -m1 'start-up took' "$out/$name.log" || true)"
}
run minimal-tf32 "$out/minimal.toml"
run shipped-tf32 "${shipped[@]}" 'train.precision="tf32"'
run minimal-fp16 "$out/minimal.toml" 'train.precision="fp16"'
run shipped-fp16 "${shipped[@]}"
run old-defaults-tf32 "$out/minimal.toml" 'data.decoder="cpu"' train.channels_last=false train.cuda_graph=false \
  'pipeline.mode="pageable"'
python3 - "$out" <<'EOF'
import glob, json, statistics, sys
out = sys.argv[1]
rows = []
for name in ["minimal-tf32", "shipped-tf32", "minimal-fp16", "shipped-fp16", "old-defaults-tf32"]:
    metrics = sorted(glob.glob(f"{out}/runs-{name}/*/metrics.jsonl"))[-1]
    epochs = [json.loads(line) for line in open(metrics)]
    later = [e["samples_per_s"] for e in epochs[1:]]
    rows.append({"run": name, "samples_per_s": statistics.mean(later), "min": min(later), "max": max(later),
                 "first_epoch_s": epochs[0]["epoch_s"], "mode": epochs[-1]["mode"], "epochs": epochs})
json.dump(rows, open(f"{out}/defaults.json", "w"), indent=1)
by = {r["run"]: r for r in rows}
print("| run | samples/s (epochs 2+) [min-max] | against the shipped config | first epoch s | mode |")
print("| --- | --- | --- | --- | --- |")
for r in rows:
    prec = r["run"].rsplit("-", 1)[1]
    ratio = r["samples_per_s"] / by[f"shipped-{prec}"]["samples_per_s"]
    print(f"| {r['run']} | {r['samples_per_s']:,.0f} [{r['min']:,.0f}-{r['max']:,.0f}] | {ratio:.3f} | "
          f"{r['first_epoch_s']:.1f} | {r['mode']} |")
EOF
