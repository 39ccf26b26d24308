# One nvJPEG hardware state instead of two (call 19: graphed 224 px 4,550 against 4,361): eager and 160 px too,
# and 3 batches copied ahead instead of 2. Same patched binary as call 19 (patch-nvjpeg-streams.diff, now with
# PINFEED_EXP_AHEAD in feeder.cpp).
source .gpu/common.sh
trap pack EXIT
P=docs/results/h200/issue11/queues/patch-nvjpeg-streams.diff
rm -rf /tmp/src-exp && mkdir /tmp/src-exp && tar cf - --exclude=./.gpu . | tar xf - -C /tmp/src-exp &&
  (cd /tmp/src-exp && patch -p1 -s < $P) || { echo patch failed; exit 1; }
cmake -S /tmp/src-exp -B /tmp/build-exp -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev > $R/cmake.log 2>&1 &&
  timeout 200 cmake --build /tmp/build-exp -j16 --target pinfeed > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
ln -sfn /tmp/build-exp /tmp/build-new  # gendata's binary
A=/tmp/build-exp/app/pinfeed
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  timeout $t $A bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|EXPERIMENT" $R/$n.log | sort -u | head -6; pack
}
N="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 6 --steps 20"
M="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 10 --steps 40 data.image_size=160"
G=train.cuda_graph=true
PINFEED_EXP_STATES=1 b g224st1 50 $N $G --modes dual_stream,gpu_resident
b g224 45 $N $G --modes dual_stream
PINFEED_EXP_STATES=1 PINFEED_EXP_AHEAD=3 b g224st1a3 45 $N $G --modes dual_stream
b e224 50 $N --modes dual_stream,gpu_resident
PINFEED_EXP_STATES=1 b e224st1 45 $N --modes dual_stream
b g160 50 $M $G --modes dual_stream,gpu_resident
PINFEED_EXP_STATES=1 b g160st1 45 $M $G --modes dual_stream
b e160 50 $M --modes dual_stream,gpu_resident
PINFEED_EXP_STATES=1 b e160st1 45 $M --modes dual_stream
