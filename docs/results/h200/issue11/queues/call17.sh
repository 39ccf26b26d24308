# The compute stream off the legacy default stream with the GPU decoder: graph and eager at 224 px, GPU tests.
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
timeout 170 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  timeout $t $B bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed" $R/$n.log | sort -u | head -4; pack
}
N="--decoder nvjpeg data.workers=2 --modes dual_stream,gpu_resident --repeats 2 --warmup 6 --steps 20"
b g224 50 $N train.cuda_graph=true
b e224 50 $N
timeout 120 ctest --test-dir /tmp/build-new -L gpu -E Nccl --timeout 60 --output-on-failure > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -20; pack
b g160 50 $N train.cuda_graph=true data.image_size=160
