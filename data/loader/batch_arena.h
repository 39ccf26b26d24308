// Where the loader assembles batches. The pipeline owns this memory (pageable or page-locked); the data
// module only sees raw pointers and knows nothing of CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "data/transform/encoded_image.h"

namespace pinfeed::data {

// Completion of the last reader of a buffer (a CUDA event after an asynchronous copy, in the pipeline).
class Fence {
 public:
  virtual ~Fence() = default;
  virtual bool ready() = 0;  // non-blocking
  virtual void wait() = 0;
};

struct BatchMemory {
  void* images = nullptr;     // batch_size images in the loader's PixelFormat, back to back
  int64_t* labels = nullptr;  // (batch_size,)
  EncodedImage* encoded = nullptr;  // (batch_size,) when the GPU decodes (TransformOptions::gpu_decode), else null
};

class BatchArena {
 public:
  virtual ~BatchArena() = default;
  virtual int slots() const = 0;
  virtual BatchMemory memory(int slot) = 0;
  // A free slot whose last reader has finished, or nullopt; never blocks.
  virtual std::optional<int> try_acquire() = 0;
  // Like try_acquire but waits on the oldest released slot's fence if needed; nullopt if every slot is out.
  virtual std::optional<int> acquire() = 0;
  // Returns a slot; it becomes reusable once `fence` (if any) is ready.
  virtual void release(int slot, std::shared_ptr<Fence> fence) = 0;
};

}  // namespace pinfeed::data
