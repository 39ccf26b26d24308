# Parallel decode lanes (patch-lanes.diff) under a CUDA graph now that nvJPEG's streams have their own hardware
# queues (32); eager 224 px with the new default; the GPU tests of the current code.
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed; L=/tmp/build-lanes/app/pinfeed
rm -rf /tmp/src-lanes && mkdir /tmp/src-lanes && tar cf - --exclude=./.gpu . | tar xf - -C /tmp/src-lanes &&
  (cd /tmp/src-lanes && patch -p1 -s < docs/results/h200/issue11/variants/patch-lanes.diff)
bt() {  # bt DIR SRC [TARGET]
  cmake -S $2 -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev > $R/cmake-$(basename $1).log 2>&1 &&
    cmake --build $1 -j16 ${3:+--target $3} > $R/build-$(basename $1).log 2>&1 || { tail -30 $R/build-$(basename $1).log; return 1; }
}
bt /tmp/build-new . & P1=$!
bt /tmp/build-lanes /tmp/src-lanes pinfeed & P2=$!
wait $P2 || echo lanes build failed; wait $P1 || { echo build failed; pack; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME BINARY TIMEOUT ARGS...
  local n=$1 bin=$2 t=$3; shift 3
  timeout $t $bin bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed" $R/$n.log | sort -u | head -4; pack
}
G="--decoder nvjpeg data.workers=2 train.cuda_graph=true"
PINFEED_NVJPEG_LANES=2 b g224l2 $L 45 $G --modes dual_stream --repeats 2 --warmup 6 --steps 40
PINFEED_NVJPEG_LANES=3 b g224l3 $L 45 $G --modes dual_stream --repeats 2 --warmup 6 --steps 40
b e224 $B 60 --decoder nvjpeg data.workers=2 --modes dual_stream,gpu_resident --repeats 2 --warmup 6 --steps 40
timeout 150 ctest --test-dir /tmp/build-new -L gpu -E Nccl --timeout 90 --output-on-failure > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -20
pack
