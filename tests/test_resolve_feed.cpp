// The Python loader's Feed against `pinfeed train`'s feed: the "auto" rules live once (pipeline/resolve_feed.h), so
// the same asks resolve the same decoder, pixel format and transfer mode; and the same seed and augmentation
// options give the same pixels and soft targets.
#include <gtest/gtest.h>

#include <ATen/ops/equal.h>

#include <string>

#include "app/plan/datasets.h"
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

TEST(PythonFeed, AugmentsAsTheTrainerDoesWithTheSameSeed) {
  const std::string root = test::make_dataset("python_feed_augment", 3, 6, 1, 40);
  const Plan plan = resolve_plan(parse_config_string(
      "[data]\nroot = \"" + root + "\"\n", "cfg.toml",
      {"train.device=cpu", "train.batch_size=4", "data.image_size=32", "data.workers=2", "train.seed=7",
       "data.auto_augment=\"rand-m9-n2\"", "data.random_erasing=0.5", "data.mixup_alpha=0.2",
       "data.cutmix_alpha=1.0", "train.label_smoothing=0.1"}));
  const Datasets sets = open_datasets(plan, /*with_val=*/false);
  pipeline::Feeder trainer(sets.train, plan.train_loader, plan.pipeline, plan.feeder,
                           train_augment(plan, sets.num_classes));

  python::FeedOptions o;
  o.root = root + "/train";
  o.dtype = at::kFloat;
  o.channels_last = plan.feeder.channels_last;
  o.transform = plan.transform;  // the Feed resolves its own pixel format
  o.loader = plan.train_loader;
  o.augment = train_augment(plan, sets.num_classes);
  python::Feed feed(o);
  ASSERT_EQ(feed.pixel_format(), plan.transform.format);

  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    trainer.start_epoch(epoch, 0);
    feed.start(epoch, 0);
    for (int64_t i = 0; i < trainer.batches_per_epoch(); ++i) {
      SCOPED_TRACE("epoch " + std::to_string(epoch) + " batch " + std::to_string(i));
      const auto want = trainer.next();
      const auto got = feed.next(std::nullopt);
      ASSERT_TRUE(want && got);
      ASSERT_EQ(got->labels.dim(), 2);  // soft targets (B, classes)
      EXPECT_TRUE(at::equal(got->images.contiguous(), want->images.contiguous()));
      EXPECT_TRUE(at::equal(got->labels, want->labels));
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
