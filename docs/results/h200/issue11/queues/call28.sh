# The final code: nvJPEG's hardware pool sized by nvjpegDecodeBatchedPreAllocate from the batches seen (calls 26-27
# measured it behind a switch), the fused crop + normalisation kernel. GPU tests (verbose: every image's MAD; the
# pixel test's small budget makes the pool grow and shrink to fit), then the four 2-thread rows.
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
timeout 100 ctest --test-dir /tmp/build-new -L gpu -E Nccl --timeout 60 -V > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*|could not size" $R/ctest_gpu.log | head -20; pack
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  timeout $t $B bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|nvJPEG|failed" $R/$n.log | sort -u | head -6; pack
}
N="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 6 --steps 20"
M="data.image_size=160 --decoder nvjpeg data.workers=2 --repeats 2 --warmup 10 --steps 40"
G=train.cuda_graph=true
b g224 50 $G $N --modes dual_stream,gpu_resident
b e224 50 $N --modes dual_stream,gpu_resident
b g160 45 $G $M --modes dual_stream,gpu_resident
b e160 45 $M --modes dual_stream,gpu_resident
