# Calls 29-33 (back to back, the machine kept warm from call 28): `bash .wheelsK/take.sh` with .wheelsK carried,
# K = 1..5 (../shared/gpu/carry-wheels.sh nvidia-dali-cuda130==2.4.0: DALI's 262 MB of wheels in 6 chunks).
# Call 34, with .wheels6 and .gpu carried: the last chunk, then the curve of issue 11 on the final code with
# call 28's build (/tmp/build-new) and data, DALI in the same call.
bash .wheels6/take.sh && export PYTHONPATH=/tmp/site || exit 3
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
[ -x $B ] && [ -f $DS/.complete ] || { echo "the machine was released: no build or data"; exit 4; }
THREADS="1 2 4 8 13" REPEATS=2 WARMUP=6 STEPS=20 PINFEED_BIN=$B \
  timeout 560 scripts/bench_decoder_curve.sh configs/bench_resnet50.toml $R/curve $BS256 > $R/curve.log 2>&1
echo "curve rc=$?"; grep -E "decoder_curve|^\| (pinfeed|dali)" $R/curve.log | tail -40
