# CUDA_DEVICE_MAX_CONNECTIONS=32 now set by plan.cpp for the GPU decoder. Graph + gpu_decode_share; another
# process decoding (nvJPEG loader_only) beside an eager gpu_resident run (is a separate decode process free?);
# 160 px eager and graph.
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed
timeout 150 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; pack; exit 1; }
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  timeout $t $B bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed" $R/$n.log | sort -u | head -4; pack
}
N="--decoder nvjpeg data.workers=2"
b g224s85 70 $N train.cuda_graph=true data.gpu_decode_share=0.85 --modes dual_stream,gpu_resident --repeats 2 --warmup 6 --steps 40
b g224s75 45 $N train.cuda_graph=true data.gpu_decode_share=0.75 --modes dual_stream --repeats 2 --warmup 6 --steps 40
b g224 45 $N train.cuda_graph=true --modes dual_stream --repeats 2 --warmup 6 --steps 40
b Asolo 45 --modes gpu_resident --repeats 3 --warmup 6 --steps 30
timeout 70 $B bench -c configs/bench_resnet50.toml $BS256 $N --modes loader_only --repeats 60 --warmup 2 --steps 40 \
  --out $R/Bdec > $R/Bdec.log 2>&1 &
BP=$!; sleep 10; grep -c samples/s $R/Bdec.log
b AwithB 45 --modes gpu_resident --repeats 3 --warmup 6 --steps 30
kill $BP; wait $BP; grep "samples/s" $R/Bdec.log | head -40 | tr '\n' ' '; echo
b e160 70 $N data.image_size=160 --modes dual_stream,gpu_resident --repeats 2 --warmup 10 --steps 40
b g160 70 $N data.image_size=160 train.cuda_graph=true --modes dual_stream,gpu_resident --repeats 2 --warmup 10 --steps 40
