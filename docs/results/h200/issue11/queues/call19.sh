# Do nvJPEG's internal streams still share a hardware queue with the compute stream (32 queues, graphed 224 px)?
# patch-nvjpeg-streams.diff beside the current code; one binary, A/B by environment: K pad streams created before
# nvJPEG's (shifting which queues its streams land on), one hardware state instead of two (half the streams),
# the memory-pool flag, and 24 queues instead of 32.
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
N="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 6 --steps 20 train.cuda_graph=true"
b g224 50 $N --modes dual_stream,gpu_resident
for k in 4 8 16 24; do PINFEED_EXP_PAD_STREAMS=$k b g224pad$k 45 $N --modes dual_stream; done
PINFEED_EXP_STATES=1 b g224st1 45 $N --modes dual_stream
PINFEED_EXP_FLAGS=2 b g224pool 45 $N --modes dual_stream
CUDA_DEVICE_MAX_CONNECTIONS=24 b g224c24 45 $N --modes dual_stream
