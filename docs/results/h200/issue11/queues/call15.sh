# x2 (NVLink, NCCL): all GPU tests incl. NCCL; 2-rank bench and training with the nvJPEG decoder.
source .gpu/common.sh
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; date -u; } > $R/env.txt 2>&1
B=/tmp/build-new/app/pinfeed
gendata_bg() { :; }
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
(cd /tmp/build-new && timeout 200 ctest -L gpu --timeout 90 --output-on-failure > $R/ctest_gpu.log 2>&1); echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*|Not Run" $R/ctest_gpu.log | head -12
TR="torchrun --standalone --nproc-per-node=2 --no-python"
timeout 100 $TR $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=2 \
  --modes dual_stream,gpu_resident --repeats 2 --warmup 6 --steps 20 --out $R/x2bench > $R/x2bench.log 2>&1; echo "x2bench rc=$?"
grep -E "^\| pinfeed|total|per rank" $R/x2bench.log | head -8
timeout 150 $TR $B train -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=2 train.epochs=2 \
  train.max_steps_per_epoch=12 run.dir=\"/tmp/runs\" > $R/x2train.log 2>&1; echo "x2train rc=$?"; tail -5 $R/x2train.log
