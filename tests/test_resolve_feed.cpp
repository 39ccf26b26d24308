// The feed's "auto" rules live once (pipeline/resolve_feed.h): `pinfeed train`'s plan and the Python loader's
// Feed, given the same asks, resolve the same decoder, pixel format and transfer mode.
#include <gtest/gtest.h>

#include <string>

#include "app/plan/plan.h"
#include "pipeline/resolve_feed.h"
#include "python/feed.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

TEST(ResolveFeed, TheTrainersPlanAndThePythonLoaderResolveTheSameFeed) {
  const std::string root = test::make_dataset("resolve_feed", 2, 4, 1, 32);
  for (const std::string decoder : {"auto", "cpu"}) {
    for (const c10::ScalarType dtype : {at::kFloat, at::kHalf}) {
      SCOPED_TRACE("decoder " + decoder + ", dtype " + c10::toString(dtype));
      // The loader's half batches cross as uint8: the trainer's pipeline.transfer_dtype = "uint8".
      const std::string transfer = dtype == at::kFloat ? "float32" : "uint8";
      const Plan plan = resolve_plan(parse_config_string(
          "[data]\nroot = \"" + root + "\"\n", "cfg.toml",
          {"train.device=cpu", "train.batch_size=2", "data.image_size=32", "data.decoder=" + decoder,
           "pipeline.transfer_dtype=" + transfer}));
      python::FeedOptions o;
      o.root = root + "/train";
      o.decoder = decoder;
      o.dtype = dtype;
      o.transform.size = 32;
      o.loader.batch_size = 2;
      python::Feed feed(o);
      EXPECT_EQ(feed.gpu_decode(), plan.transform.gpu_decode);
      EXPECT_EQ(feed.pixel_format(), plan.transform.format);
      EXPECT_EQ(feed.mode(), pipeline::mode_name(plan.pipeline));
    }
  }
}

TEST(ResolveFeed, NvjpegAskedWhereItCannotRunSaysWhy) {
  pipeline::FeedAsk ask;
  ask.decoder = pipeline::Decoder::kNvjpeg;
  EXPECT_THROW(pipeline::resolve_feed(ask), std::invalid_argument);
  ask.decoder = pipeline::Decoder::kAuto;
  const pipeline::FeedAnswer automatic = pipeline::resolve_feed(ask);
  EXPECT_FALSE(automatic.gpu_decode);
  EXPECT_EQ(automatic.preset, pipeline::Mode::kPageable);
  ask.pixel_ops = true;
  EXPECT_EQ(pipeline::resolve_feed(ask).uint8_because, pipeline::Uint8Because::kPixelOps);
  ask.mode_chosen = true;
  EXPECT_FALSE(pipeline::resolve_feed(ask).preset);
}

}  // namespace
}  // namespace pinfeed::app
