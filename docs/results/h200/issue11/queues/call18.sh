# Does nvJPEG allocate or free in steady state, and do stream-ordered frees end the copier's pauses under a CUDA
# graph? patch-nvjpeg-allocators.diff beside the current code; one binary, A/B by PINFEED_NVJPEG_ALLOC:
# unset (nvJPEG's own cudaMalloc/cudaFree, counted and timed), "async" (cudaMallocAsync/cudaFreeAsync),
# "torch" (PyTorch's caching allocator on nvJPEG's stream). Counts logged after 4 and 40 decode calls and at the end.
source .gpu/common.sh
trap pack EXIT
P=docs/results/h200/issue11/queues/patch-nvjpeg-allocators.diff
rm -rf /tmp/src-alloc && mkdir /tmp/src-alloc && tar cf - --exclude=./.gpu . | tar xf - -C /tmp/src-alloc &&
  (cd /tmp/src-alloc && patch -p1 -s < $P) || { echo patch failed; exit 1; }
cmake -S /tmp/src-alloc -B /tmp/build-alloc -G Ninja -DCMAKE_BUILD_TYPE=Release -Wno-dev > $R/cmake.log 2>&1 &&
  timeout 200 cmake --build /tmp/build-alloc -j16 --target pinfeed > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
ln -sfn /tmp/build-alloc /tmp/build-new  # gendata's binary
A=/tmp/build-alloc/app/pinfeed
timeout 40 bash -c "$(declare -f gendata); R=$R; DS=$DS; gendata"; echo "gendata rc=$?"
b() {  # b NAME TIMEOUT ARGS...
  local n=$1 t=$2; shift 2
  timeout $t $A bench -c configs/bench_resnet50.toml $BS256 "$@" --out $R/$n > $R/$n.log 2>&1; echo "$n rc=$?"
  grep -E "^\| pinfeed|nvJPEG allocator" $R/$n.log | sort -u | head -12; pack
}
N="--decoder nvjpeg data.workers=2 --repeats 2 --warmup 6 --steps 20"
b g224sync 50 $N train.cuda_graph=true --modes dual_stream,gpu_resident
PINFEED_NVJPEG_ALLOC=async b g224async 50 $N train.cuda_graph=true --modes dual_stream
PINFEED_NVJPEG_ALLOC=torch b g224torch 50 $N train.cuda_graph=true --modes dual_stream
b e224sync 50 $N --modes dual_stream,gpu_resident
PINFEED_NVJPEG_ALLOC=torch b e224torch 50 $N --modes dual_stream
