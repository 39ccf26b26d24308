# One nvJPEG hardware state (the code as committed): its GPU tests and rows, and YCbCr planes on top of it
# (patch-ycbcr-one-state.diff: the variants/ YCbCr patch rebased; nvJPEG's rgba2rgb kernels, ~1.5 ms of SM time
# per 224 px batch in the call 16 trace, become plane copies and the conversion moves into the crop kernel).
source .gpu/common.sh
trap pack EXIT
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
P=docs/results/h200/issue11/queues/patch-ycbcr-one-state.diff
rm -rf /tmp/src-ycc && mkdir /tmp/src-ycc && tar cf - --exclude=./.gpu . | tar xf - -C /tmp/src-ycc &&
  (cd /tmp/src-ycc && patch -p1 -s < $P) || { echo patch failed; exit 1; }
(cmake -S /tmp/src-ycc -B /tmp/build-ycc -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev > $R/cmake-ycc.log 2>&1 &&
  timeout 200 cmake --build /tmp/build-ycc -j8 --target pinfeed > $R/build-ycc.log 2>&1; echo "ycc build rc=$?") &
timeout 150 ctest --test-dir /tmp/build-new -L gpu -E Nccl --timeout 60 --output-on-failure > $R/ctest_gpu.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|\*\*\*" $R/ctest_gpu.log | head -20; pack
wait
b() {  # b BINARY NAME TIMEOUT ARGS...
  local x=$1 n=$2 t=$3; shift 3
  timeout $t $x bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed" $R/$n.log | sort -u | head -4; pack
}
Y=/tmp/build-ycc/app/pinfeed
N="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 6 --steps 20"
M="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 10 --steps 40 data.image_size=160"
G=train.cuda_graph=true
b $B g224 50 $N $G --modes dual_stream,gpu_resident
b $Y g224ycc 45 $N $G --modes dual_stream
b $B e224 50 $N --modes dual_stream,gpu_resident
b $Y e224ycc 45 $N --modes dual_stream
b $B g160 50 $M $G --modes dual_stream,gpu_resident
b $Y g160ycc 45 $M $G --modes dual_stream
b $B e160 50 $M --modes dual_stream,gpu_resident
b $Y e160ycc 45 $M --modes dual_stream
