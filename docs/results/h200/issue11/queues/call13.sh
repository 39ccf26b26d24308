# CUDA_DEVICE_MAX_CONNECTIONS=32 set before the first device query (run27 set it too late); CUDA graph with a
# gpu_decode_share; the YCbCr patch (nvJPEG's D2D copies on the copy engines instead of rgba2rgb kernels on the
# SMs) under a graph with 32 queues.
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed; Y=/tmp/build-ycc/app/pinfeed
rm -rf /tmp/src-ycc && mkdir /tmp/src-ycc && tar cf - --exclude=./.gpu . | tar xf - -C /tmp/src-ycc &&
  (cd /tmp/src-ycc && patch -p1 -s < docs/results/h200/issue11/variants/patch-ycbcr-nv12-align-priority-nopipe.diff)
bt() {  # bt DIR SRC: configure + the pinfeed target only
  cmake -S $2 -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev > $R/cmake-$(basename $1).log 2>&1 &&
    cmake --build $1 -j16 --target pinfeed > $R/build-$(basename $1).log 2>&1 || { tail -30 $R/build-$(basename $1).log; return 1; }
}
bt /tmp/build-new . & P1=$!
bt /tmp/build-ycc /tmp/src-ycc & P2=$!
wait $P1 || { echo build failed; pack; exit 1; }; wait $P2 || echo ycc build failed
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME BINARY TIMEOUT ARGS...
  local n=$1 bin=$2 t=$3; shift 3
  timeout $t $bin bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed" $R/$n.log | sort -u | head -4; pack
}
G="--decoder nvjpeg data.workers=2 train.cuda_graph=true"
b g224 $B 60 $G --modes dual_stream,gpu_resident --repeats 2 --warmup 6 --steps 40
b g224ycc $Y 45 $G --modes dual_stream --repeats 2 --warmup 6 --steps 40
b g224s80 $B 45 $G data.gpu_decode_share=0.8 --modes dual_stream --repeats 2 --warmup 6 --steps 40
b g160 $B 60 $G data.image_size=160 --modes dual_stream,gpu_resident --repeats 2 --warmup 10 --steps 40
b g160ycc $Y 45 $G data.image_size=160 --modes dual_stream --repeats 2 --warmup 10 --steps 40
b g224yccs85 $Y 45 $G data.gpu_decode_share=0.85 --modes dual_stream --repeats 2 --warmup 6 --steps 40
