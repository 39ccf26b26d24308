// A HostArena with room for what the GPU decodes (EncodedImage per sample), as the pipeline's ring gives it: what
// a Loader of GPU files needs without a GPU. Shared by tests and benchmarks.
#pragma once

#include "host_arena.h"

namespace pinfeed::test {

class EncodedArena : public HostArena {
 public:
  EncodedArena(int slots, int64_t batch, size_t image_bytes) : HostArena(slots, batch, image_bytes, true) {}
};

}  // namespace pinfeed::test
