# Traces: CUDA graph + nvJPEG (YCbCr) at 224, eager nvJPEG at 160, gpu_resident eager at 160 (host time baseline).
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; pack; exit 1; }
timeout 60 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
t() {  # t NAME SIZE GRAPH MODES
  PINFEED_COPY_HIGH=1 timeout 60 $B bench -c configs/bench_resnet50.toml $BS256 data.image_size=$2 --decoder nvjpeg data.workers=2 \
    train.cuda_graph=$3 --modes $4 --repeats 1 --warmup 10 --steps 12 --trace-steps 2-8 --out $R/$1 > $R/$1.log 2>&1; echo "$1 rc=$?"
  grep -E "^\| pinfeed" $R/$1.log; gzip -f $R/$1/trace.*.json
}
t tg224 224 true dual_stream
t te160 160 false dual_stream,gpu_resident
timeout 200 ctest --test-dir /tmp/build-new -L gpu -E Nccl --timeout 90 --output-on-failure > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -20
pack
