# x2 (NVLink, NCCL) on the committed code (one nvJPEG state): all GPU tests incl. NCCL; the 2-rank nvjpeg bench;
# then, on one of its GPUs (CUDA_VISIBLE_DEVICES=0), a sustained gpu_decode_share curve, eager 224 px,
# 2 repeats x (10 + 40) steps, with enough threads for the CPU's share.
source .gpu/common.sh
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; date -u; } > $R/env.txt 2>&1
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
(cd /tmp/build-new && timeout 200 ctest -L gpu --timeout 90 --output-on-failure > $R/ctest_gpu.log 2>&1); echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*|Not Run" $R/ctest_gpu.log | head -12; pack
TR="torchrun --standalone --nproc-per-node=2 --no-python"
timeout 100 $TR $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=2 \
  --modes dual_stream,gpu_resident --repeats 2 --warmup 6 --steps 20 --out $R/x2bench > $R/x2bench.log 2>&1; echo "x2bench rc=$?"
grep -E "^\| pinfeed|total|per rank" $R/x2bench.log | head -8; pack
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  CUDA_VISIBLE_DEVICES=0 timeout $t $B bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed" $R/$n.log | sort -u | head -4; pack
}
S="--decoder nvjpeg --repeats 2 --warmup 10 --steps 40 --modes dual_stream"
b resident 50 --repeats 2 --warmup 10 --steps 40 --modes gpu_resident
b s100t2 45 $S data.workers=2
b s085t2 45 $S data.workers=2 data.gpu_decode_share=0.85
b s085t4 45 $S data.workers=4 data.gpu_decode_share=0.85
b s075t4 45 $S data.workers=4 data.gpu_decode_share=0.75
b s050t8 45 $S data.workers=8 data.gpu_decode_share=0.5
