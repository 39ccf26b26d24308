# Prepared for the next session's first call (not run yet): a trace of the graphed 224 px step on the one-state +
# ROI code, beside call 16's (two states). Question: do the copier's 43-73 ms pauses inside the nvJPEG call remain
# with one state, and how much kernel time does the decode side take per batch now (rgba2rgb over crops only)?
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
cmake -S . -B /tmp/build-new -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev > $R/cmake.log 2>&1 &&
  cmake --build /tmp/build-new -j16 --target pinfeed > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
timeout 70 $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=2 train.cuda_graph=true \
  --repeats 1 --warmup 10 --steps 12 --trace-steps 2-8 --modes dual_stream --out $R/tg224one > $R/tg224one.log 2>&1
echo "trace rc=$?"; grep -E "^\| pinfeed" $R/tg224one.log
python3 scripts/trace_idle.py $R/tg224one/trace.dual_stream.json --api > $R/tg224one.api.txt 2>&1; tail -40 $R/tg224one.api.txt
gzip -9 $R/tg224one/trace.dual_stream.json
