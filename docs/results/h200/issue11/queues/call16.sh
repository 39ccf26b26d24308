# Trace of the graphed 224 px step with nvJPEG and 32 hardware queues (the current default): where the copier's
# remaining ~50 ms per batch go.
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
cmake -S . -B /tmp/build-new -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev > $R/cmake.log 2>&1 &&
  cmake --build /tmp/build-new -j16 --target pinfeed > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
timeout 70 $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=2 train.cuda_graph=true \
  --modes dual_stream --repeats 1 --warmup 10 --steps 12 --trace-steps 2-8 --out $R/tg224q32 > $R/tg224q32.log 2>&1; echo "trace rc=$?"
grep -E "^\| pinfeed" $R/tg224q32.log
python3 scripts/trace_idle.py $R/tg224q32/trace.dual_stream.json --api > $R/tg224q32.api.txt 2>&1; tail -40 $R/tg224q32.api.txt
gzip -9 $R/tg224q32/trace.dual_stream.json
