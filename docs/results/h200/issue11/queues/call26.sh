# nvjpegDecodeBatchedPreAllocate (what nvImageCodec's hardware decoder calls at creation, "to use memory pool for
# HW decoder even if hint is 0 ... >20% for 8GPU training"): the call 25 trace showed the copier stopped inside
# nvJPEG for up to 96 ms, until the graph replay running then ended, with the training thread's event record
# blocked as long: nvJPEG freeing/allocating device memory (synchronous) would do that. One binary, switch
# PINFEED_EXP_PREALLOC (this call only): 0 = as now, 1 = 1x1 (pool only), max = the first batch's largest image.
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  timeout $t $B bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|nvJPEG:|EXPERIMENT|failed" $R/$n.log | sort -u | head -6; pack
}
N="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 6 --steps 20"
M="data.image_size=160 --decoder nvjpeg data.workers=2 --repeats 2 --warmup 10 --steps 40"
G=train.cuda_graph=true
PINFEED_EXP_PREALLOC=0 b g224p0 50 $G $N --modes dual_stream,gpu_resident
PINFEED_EXP_PREALLOC=1 b g224p1 40 $G $N --modes dual_stream
PINFEED_EXP_PREALLOC=max b g224pmax 40 $G $N --modes dual_stream
PINFEED_EXP_PREALLOC=0 b e224p0 50 $N --modes dual_stream,gpu_resident
PINFEED_EXP_PREALLOC=1 b e224p1 40 $N --modes dual_stream
PINFEED_EXP_PREALLOC=0 b g160p0 45 $G $M --modes dual_stream,gpu_resident
PINFEED_EXP_PREALLOC=1 b g160p1 35 $G $M --modes dual_stream
PINFEED_EXP_PREALLOC=1 b e160p1 45 $M --modes dual_stream,gpu_resident
PINFEED_EXP_PREALLOC=1 timeout 70 $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=2 \
  train.cuda_graph=true --repeats 1 --warmup 10 --steps 12 --trace-steps 2-8 --modes dual_stream --out $R/tg224p1 \
  > $R/tg224p1.log 2>&1
echo "trace rc=$?"; grep -E "^\| pinfeed" $R/tg224p1.log
python3 scripts/trace_idle.py $R/tg224p1/trace.dual_stream.json --api > $R/tg224p1.api.txt 2>&1
gzip -9 $R/tg224p1/trace.dual_stream.json
