# nvJPEG hardware decode in lanes (threads + states + streams): 1 vs 2 vs 3 with a CUDA graph and eager; GPU tests;
# then the nvJPEG curve points on the default (2 lanes), same settings as bench_decoder_curve.sh.
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; pack; exit 1; }
timeout 60 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
timeout 120 ctest --test-dir /tmp/build-new -L gpu -R "GpuDecode|GpuPipeline|GpuTrain" --timeout 60 --output-on-failure > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -10
pack
b() {  # b NAME SIZE GRAPH MODES WORKERS [ENV...]
  local n=$1 s=$2 g=$3 m=$4 w=$5; shift 5
  env "$@" timeout 45 $B bench -c configs/bench_resnet50.toml $BS256 data.image_size=$s --decoder nvjpeg data.workers=$w train.cuda_graph=$g \
    --modes $m --repeats 2 --warmup 6 --steps 20 --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|rror|fail" $R/$n.log | sort -u | head -4
}
b g224-l2 224 true dual_stream,gpu_resident 2 X=1
b g224-l1 224 true dual_stream 2 PINFEED_NVJPEG_LANES=1
b g224-l3 224 true dual_stream 2 PINFEED_NVJPEG_LANES=3
b e224-l1 224 false dual_stream,gpu_resident 2 PINFEED_NVJPEG_LANES=1
b e224-l3 224 false dual_stream 2 PINFEED_NVJPEG_LANES=3
b g160-l2 160 true dual_stream,gpu_resident 2 X=1
b e160-l2 160 false dual_stream,gpu_resident 2 X=1
pack
C="--repeats 2 --warmup 6 --steps 20"
for w in 1 2 4 8 13; do
  timeout 45 $B bench -c configs/bench_resnet50.toml $BS256 --modes dual_stream --decoder nvjpeg $C data.workers=$w --out $R/curve/pinfeed-nvjpeg-w$w > $R/n$w.log 2>&1; echo "w$w rc=$?"
  grep -E "^\| pinfeed" $R/n$w.log
done
timeout 40 $B bench -c configs/bench_resnet50.toml $BS256 --modes gpu_resident $C --out $R/curve/resident > $R/resident.log 2>&1; echo "resident rc=$?"
grep -E "^\| pinfeed" $R/resident.log
pack
