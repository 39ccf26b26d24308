# ROI decode on the hardware engines (nvjpegDecodeBatchedEx, each image's crop as its ROI): nvJPEG's colour
# conversion and the decode buffer cover the crop only. One binary; PINFEED_NVJPEG_FULL=1 (a switch for this call
# only) decodes whole images through the same call. Then the GPU tests (verbose: the per-image MADs) on ROI.
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  timeout $t $B bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|nvJPEG:|failed" $R/$n.log | sort -u | head -5; pack
}
N="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 6 --steps 20"
M="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 10 --steps 40 data.image_size=160"
G=train.cuda_graph=true
b g224roi 50 $N $G --modes dual_stream,gpu_resident
PINFEED_NVJPEG_FULL=1 b g224full 40 $N $G --modes dual_stream
b e224roi 50 $N --modes dual_stream,gpu_resident
PINFEED_NVJPEG_FULL=1 b e224full 40 $N --modes dual_stream
timeout 100 ctest --test-dir /tmp/build-new -L gpu -E Nccl --timeout 60 -V > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -20; pack
PINFEED_NVJPEG_FULL=1 timeout 30 /tmp/build-new/tests/test_gpu_decode --gtest_filter='*Pixels*' > $R/pixels_full.log 2>&1; echo "pixels full rc=$?"; pack
b g160roi 45 $M $G --modes dual_stream,gpu_resident
b e160roi 45 $M --modes dual_stream,gpu_resident
