# CUDA_DEVICE_MAX_CONNECTIONS: nvJPEG's ~30 internal streams share the default 8 hardware queues with the compute
# stream (false dependencies); 32 queues, eager and graph, 224 px, 2 workers. Then the GPU tests of the final code.
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed
timeout 150 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; pack; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME CONNECTIONS GRAPH SIZE
  env ${2:+CUDA_DEVICE_MAX_CONNECTIONS=$2} timeout 60 $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg \
    data.workers=2 train.cuda_graph=$3 data.image_size=$4 --modes dual_stream,gpu_resident --repeats 2 --warmup 6 --steps 20 \
    --out $R/$1 > $R/$1.log 2>&1; echo "$1 rc=$?"
  grep -E "^\| pinfeed" $R/$1.log | sort -u | head -4; pack
}
b e224 "" false 224
b e224c32 32 false 224
b g224 "" true 224
b g224c32 32 true 224
timeout 150 ctest --test-dir /tmp/build-new -L gpu -E Nccl --timeout 90 --output-on-failure > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -20
pack
