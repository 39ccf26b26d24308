# The fused crop + normalisation kernel (f2e6e07: nvJPEG's crops written straight into the model's float32 input)
# and RGBI set once per decode-params object: the GPU tests (verbose, every image's MAD), the four rows against the
# same call's gpu_resident, then the trace prepared last session (graphed 224 px step, one state + ROI + fused):
# do the copier's 43-73 ms pauses inside the nvJPEG call remain, and how much decode-side kernel time is left?
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
timeout 100 ctest --test-dir /tmp/build-new -L gpu -E Nccl --timeout 60 -V > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -20; pack
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  timeout $t $B bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|nvJPEG:|failed" $R/$n.log | sort -u | head -5; pack
}
N="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 6 --steps 20"
M="data.image_size=160 --decoder nvjpeg data.workers=2 --repeats 2 --warmup 10 --steps 40"
G=train.cuda_graph=true
b g224 50 $G $N --modes dual_stream,gpu_resident
b e224 50 $N --modes dual_stream,gpu_resident
b g160 45 $G $M --modes dual_stream,gpu_resident
b e160 45 $M --modes dual_stream,gpu_resident
# The trace prepared as next-call.sh in the last session.
timeout 70 $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=2 train.cuda_graph=true \
  --repeats 1 --warmup 10 --steps 12 --trace-steps 2-8 --modes dual_stream --out $R/tg224 > $R/tg224.log 2>&1
echo "trace rc=$?"; grep -E "^\| pinfeed" $R/tg224.log
python3 scripts/trace_idle.py $R/tg224/trace.dual_stream.json --api > $R/tg224.api.txt 2>&1; tail -40 $R/tg224.api.txt
gzip -9 $R/tg224/trace.dual_stream.json
