# nvJPEG output layouts: planar YUV vs NV12, pitches as they come vs aligned to 256 bytes; with a CUDA graph (where
# nvJPEG's per-image output copies wait for the GPU) and eager.
source .gpu/common.sh
B=/tmp/build-new/app/pinfeed
timeout 200 bash -c "$(declare -f build); R=$R; build /tmp/build-new ." || { echo build failed; pack; exit 1; }
timeout 60 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME SIZE GRAPH MODES [ENV...]
  local n=$1 s=$2 g=$3 m=$4; shift 4
  env PINFEED_COPY_HIGH=1 "$@" timeout 45 $B bench -c configs/bench_resnet50.toml $BS256 data.image_size=$s --decoder nvjpeg data.workers=2 train.cuda_graph=$g \
    --modes $m --repeats 2 --warmup 6 --steps 20 --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|rror|fail" $R/$n.log | sort -u | head -4
}
b gyuv224 224 true dual_stream,gpu_resident X=1
b gnv12 224 true dual_stream PINFEED_NVJPEG_NV12=1
b gyuva 224 true dual_stream PINFEED_NVJPEG_ALIGN=256
b gnv12a 224 true dual_stream PINFEED_NVJPEG_NV12=1 PINFEED_NVJPEG_ALIGN=256
b grgbia 224 true dual_stream PINFEED_NVJPEG_RGBI=1 PINFEED_NVJPEG_ALIGN=256
b env12 224 false dual_stream,gpu_resident PINFEED_NVJPEG_NV12=1
b env12a 224 false dual_stream PINFEED_NVJPEG_NV12=1 PINFEED_NVJPEG_ALIGN=256
PINFEED_COPY_HIGH=1 PINFEED_NVJPEG_NV12=1 timeout 60 $B bench -c configs/bench_resnet50.toml $BS256 --decoder nvjpeg data.workers=2 \
  train.cuda_graph=true --modes dual_stream --repeats 1 --warmup 8 --steps 8 --trace-steps 2-6 --out $R/tnv12 > $R/tnv12.log 2>&1; echo "trace rc=$?"
gzip -f $R/tnv12/trace.*.json
pack
