// resolve_plan's checks of what a config asks of this machine: decode threads, host rings, options passed on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "app/plan/memory.h"
#include "app/plan/plan.h"
#include "app/plan/start.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

// Small enough that a training step fits any machine the tests run on; a test's overrides come after these.
Config cpu_config(std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(), {"train.batch_size=16", "data.image_size=64"});
  overrides.push_back("train.device=cpu");
  return parse_config_string("[data]\nroot = \"/data\"\n", "cfg.toml", overrides);
}

std::string plan_error(const Config& c) {
  return test::message_of<ConfigError>([&] { resolve_plan(c); });
}

TEST(Plan, MaxImagePixelsReachesTheTransformOptions) {
  EXPECT_EQ(resolve_plan(cpu_config()).transform.max_image_pixels, 100'000'000);
  EXPECT_EQ(resolve_plan(cpu_config({"data.max_image_pixels=12345"})).transform.max_image_pixels, 12345);
  EXPECT_EQ(resolve_plan(cpu_config({"data.max_image_pixels=0"})).transform.max_image_pixels, 0);
}

TEST(Plan, TheGpuDecoderFallsBackToTheCpusOnTheCpu) {
  const Plan nvjpeg = resolve_plan(cpu_config({"data.decoder=nvjpeg"}));
  EXPECT_FALSE(nvjpeg.transform.gpu_decode);
  EXPECT_EQ(nvjpeg.dataset.decoder, pipeline::Decoder::kCpu);  // what the run folder's config.toml records
  const Plan automatic = resolve_plan(cpu_config({"data.decoder=auto"}));
  EXPECT_FALSE(automatic.transform.gpu_decode);
  EXPECT_EQ(automatic.transform.format, data::PixelFormat::kFloat32Chw);  // pipeline.transfer_dtype as given
  EXPECT_FALSE(resolve_plan(cpu_config()).transform.gpu_decode);
  EXPECT_EQ(resolve_plan(cpu_config()).transform.nvjpeg_share, 1.0);
  EXPECT_EQ(resolve_plan(cpu_config({"data.nvjpeg_share=0.25"})).transform.nvjpeg_share, 0.25);
}

TEST(Plan, HalfPrecisionOnTheCpuStepsInFp32) {
  for (const char* half : {"train.precision=\"fp16\"", "train.precision=\"bf16\""}) {
    EXPECT_EQ(resolve_plan(cpu_config({half})).step.precision, engine::Precision::kFp32) << half;
  }
  const Plan fp32 = resolve_plan(cpu_config({"train.precision=\"fp32\""}));
  EXPECT_FALSE(engine::autocast_dtype(fp32.step.precision).has_value());
}

TEST(Plan, PinfeedsMaxPoolIsTakenWhereItCanRunAndAtensOnTheCpuEvenIfAskedFor) {
  EXPECT_FALSE(resolve_plan(cpu_config()).step.net.stem_max_pool);  // auto, on the CPU: ATen's
  EXPECT_FALSE(resolve_plan(cpu_config({"train.channels_last=true"})).step.net.stem_max_pool);
  EXPECT_FALSE(resolve_plan(cpu_config({"model.max_pool=\"pinfeed\""})).step.net.stem_max_pool);
}

TEST(Plan, FusedBatchNormIsOffOnTheCpuEvenIfAskedFor) {
  // auto: off on the CPU, silently; on: off too, with a warning (fall_back_on_the_cpu).
  EXPECT_FALSE(resolve_plan(cpu_config({"train.channels_last=true"})).step.net.fused_bn);
  EXPECT_FALSE(resolve_plan(cpu_config({"model.fused_bn=\"off\""})).step.net.fused_bn);
  EXPECT_FALSE(resolve_plan(cpu_config({"model.fused_bn=\"on\"", "train.channels_last=true"})).step.net.fused_bn);
  const auto bad = test::message_of<ConfigError>([] { cpu_config({"model.fused_bn=\"yes\""}); });
  EXPECT_NE(bad.find("model.fused_bn"), std::string::npos) << bad;
}

TEST(Plan, GraphBatchNormFollowsTheFusedBatchNormUnlessAskedFor) {
  // auto: nothing without the fused BatchNorm; all: refused, naming the key and what is missing.
  EXPECT_EQ(resolve_plan(cpu_config({"train.channels_last=true"})).step.net.bn_graph, model::GraphBatchNorm::kNone);
  // On the CPU, where there is no fused BatchNorm, every graph gives way to ATen's BatchNorm.
  for (const char* graph : {"all", "conv", "small"}) {
    const Plan p = resolve_plan(cpu_config({std::string("model.bn_graph=") + graph}));
    EXPECT_EQ(p.step.net.bn_graph, model::GraphBatchNorm::kNone) << graph;
  }
  const auto bad = test::message_of<ConfigError>([] { cpu_config({"model.bn_graph=\"medium\""}); });
  EXPECT_NE(bad.find("model.bn_graph"), std::string::npos) << bad;
}

TEST(Plan, FoldedGradientSumsFollowTheFusedBatchNormUnlessAskedFor) {
  EXPECT_FALSE(resolve_plan(cpu_config({"train.channels_last=true"})).step.net.fold_grad_add);  // auto: with the fused BN
  EXPECT_TRUE(resolve_plan(cpu_config({"train.channels_last=true", "model.fold_grad_add=\"on\""})).step.net.fold_grad_add);
  const auto e = plan_error(cpu_config({"model.fold_grad_add=\"on\""}));
  EXPECT_NE(e.find("model.fold_grad_add = \"on\" needs train.channels_last = true"), std::string::npos) << e;
}

TEST(Plan, PaddedFloat16InputIsOffWhereItCannotRunAndOnTheCpuEvenIfAskedFor) {
  for (const auto& overrides : std::vector<std::vector<std::string>>{
           {"train.channels_last=true", "pipeline.transfer_dtype=\"uint8\""}, {"model.pad_input=\"off\""}}) {
    const Plan p = resolve_plan(cpu_config(overrides));
    EXPECT_EQ(p.feeder.input_channels, 3);
    EXPECT_EQ(p.feeder.input_dtype, at::kFloat);
  }
  const Plan asked = resolve_plan(cpu_config({"model.pad_input=\"on\"", "train.precision=fp16"}));
  EXPECT_EQ(asked.feeder.input_channels, 3);  // the CPU's float32 RGB, with a warning
}

// nvJPEG's own streams get hardware queues of their own (start.cpp says why); set before CUDA initialises, only
// where the GPU decoder may run, and never over the user's value. Resolving a plan sets nothing: start() does.
TEST(Plan, TheGpuDecoderAsksForThirtyTwoHardwareQueuesUnlessTheUserChoseANumber) {
  const char* kQueues = "CUDA_DEVICE_MAX_CONNECTIONS";
  ::unsetenv(kQueues);
  set_cuda_environment(cpu_config({"data.decoder=auto"}));  // train.device = "cpu": CUDA is not used
  set_cuda_environment(parse_config_string("[data]\nroot = \"/data\"\n", "cfg.toml", {"data.decoder=cpu"}));
  EXPECT_EQ(std::getenv(kQueues), nullptr);
  const Config gpu_decoder = parse_config_string("[data]\nroot = \"/data\"\n", "cfg.toml",
                                                {"data.decoder=auto", "train.batch_size=16", "data.image_size=64"});
  resolve_plan(gpu_decoder);
  EXPECT_EQ(std::getenv(kQueues), nullptr) << "resolving a plan changes no process state";
  set_cuda_environment(gpu_decoder);  // device "auto": on a machine without CUDA the variable is set and unused
  ASSERT_NE(std::getenv(kQueues), nullptr);
  EXPECT_STREQ(std::getenv(kQueues), "32");
  ::setenv(kQueues, "8", 1);
  set_cuda_environment(gpu_decoder);
  EXPECT_STREQ(std::getenv(kQueues), "8");
  ::unsetenv(kQueues);
}

TEST(Plan, MoreThanFourDecodeThreadsPerCoreAreRefusedNamingTheKey) {
  const int cap = static_cast<int>(4 * std::max(1u, std::thread::hardware_concurrency()));
  if (cap >= 1024) GTEST_SKIP() << "the key's own limit (1024) is below 4 x cores here";
  EXPECT_EQ(resolve_plan(cpu_config({"data.workers=" + std::to_string(cap)})).train_loader.workers, cap);
  const auto e = plan_error(cpu_config({"data.workers=" + std::to_string(cap + 1)}));
  EXPECT_NE(e.find("override 'data.workers=" + std::to_string(cap + 1) + "':1:14: data.workers = " + std::to_string(cap + 1)),
            std::string::npos) << e;
  EXPECT_NE(e.find("set at most " + std::to_string(cap)), std::string::npos) << e;
}

TEST(Plan, HostRingsLargerThanHalfTheMemoryAreRefusedNamingTheKeysAndSizes) {
  // 1026 slots of 2^20 x 4096 px float32 batches: 2e17 bytes, more than any machine has.
  const auto e = plan_error(cpu_config({"data.prefetch_batches=1024", "train.batch_size=1048576", "data.image_size=4096"}));
  EXPECT_EQ(e.rfind("override 'data.prefetch_batches=1024':1:23: the host batch rings need ", 0), 0u) << e;
  for (const char* part : {"2 ring(s) of 1026 slots", "train.batch_size 1048576", "data.image_size 4096", "of memory: lower",
                           "lower data.prefetch_batches, train.batch_size or data.image_size"}) {
    EXPECT_NE(e.find(part), std::string::npos) << part << " in " << e;
  }
  // Without eval there is one ring per rank; several ranks on the host each hold theirs.
  EXPECT_NE(plan_error(cpu_config({"train.batch_size=1048576", "data.image_size=4096", "train.eval=false"})).find("1 ring(s) of 6 slots"),
            std::string::npos);
  engine::DistEnv four;
  four.world = four.local_world = 4;
  try {
    resolve_plan(cpu_config({"train.batch_size=1048576", "data.image_size=4096", "dist.backend=gloo"}), four);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("8 ring(s) of 6 slots"), std::string::npos) << err.what();
  }
}

TEST(Plan, ATrainingStepOverTheMemoryThisProcessMayUseIsRefusedNamingTheKeysAndFigures) {
  constexpr double kGiB = 1 << 30;
  // 64 GiB of RAM, of which a cgroup lets this process have 12 and 10 are left: the rings (4.5 GiB at 1024 px,
  // batch 32) pass their own check, the step's activations (~69 GiB) do not.
  const ScopedHostMemory fake({10 * kGiB, 12 * kGiB, 12 * kGiB});
  const auto e = plan_error(cpu_config({"data.image_size=1024", "train.batch_size=32"}));
  EXPECT_EQ(e.rfind("override 'data.image_size=1024':1:17: a training step needs ~", 0), 0u) << e;
  for (const char* part : {"train.batch_size 32 x data.image_size 1024 px in 32-bit", "host batch rings 4.5 GiB",
                           "this process may use 10.0 GiB (12.0 GiB in all: cgroup limit 12.0 GiB)",
                           "lower train.batch_size or data.image_size"}) {
    EXPECT_NE(e.find(part), std::string::npos) << part << " in " << e;
  }
  // What fits is left alone: the same limit with a small batch, and the quickstart's sizes.
  EXPECT_NO_THROW(resolve_plan(cpu_config({"data.image_size=224", "train.batch_size=32"})));
  EXPECT_NO_THROW(resolve_plan(cpu_config({"data.image_size=32", "train.batch_size=32"})));
  // Several ranks on the host each keep a step's activations.
  engine::DistEnv four;
  four.world = four.local_world = 4;
  const ScopedHostMemory small({4 * kGiB, 64 * kGiB, 0});
  EXPECT_NO_THROW(resolve_plan(cpu_config({"data.image_size=224", "train.batch_size=16", "dist.backend=gloo"})));
  const auto ranks = test::message_of<ConfigError>(
      [&] { resolve_plan(cpu_config({"data.image_size=224", "train.batch_size=16", "dist.backend=gloo"}), four); });
  EXPECT_NE(ranks.find("4 ranks on this host, each: activations"), std::string::npos) << ranks;
  EXPECT_NE(ranks.find(": no cgroup limit)"), std::string::npos) << ranks;
}

TEST(Plan, AutoDefaultsTakeTheCpuPathOnTheCpuAndExplicitValuesHold) {
  const Plan p = resolve_plan(cpu_config());  // data.root alone, as a new user writes it
  EXPECT_FALSE(p.step.channels_last);
  EXPECT_FALSE(p.step.cuda_graph);
  EXPECT_FALSE(p.transform.gpu_decode);
  EXPECT_EQ(pipeline::mode_name(p.pipeline), "pageable");
  EXPECT_TRUE(resolve_plan(cpu_config({"train.channels_last=true"})).step.channels_last);
  const Plan graph = resolve_plan(cpu_config({"train.cuda_graph=true"}));  // the eager step, with a warning
  EXPECT_FALSE(graph.step.cuda_graph);
  EXPECT_EQ(graph.train.cuda_graph, false);  // what the run folder's config.toml records
}

TEST(Plan, TransferFlagsThatNeedCudaFallBackToPageableOnTheCpu) {
  // A preset (the README's --mode dual_stream) and flags written one by one alike: nothing to transfer on the CPU.
  for (const std::vector<std::string>& overrides :
       {std::vector<std::string>{"pipeline.mode=dual_stream"}, {"pipeline.mode=pinned"}, {"pipeline.pin_memory=true"},
        {"pipeline.pin_memory=true", "pipeline.non_blocking=true"}}) {
    const Plan p = resolve_plan(cpu_config(overrides));
    EXPECT_EQ(pipeline::mode_name(p.pipeline), "pageable") << overrides.back();
    EXPECT_FALSE(p.pipeline.pin_memory || p.pipeline.non_blocking || p.pipeline.dual_stream) << overrides.back();
    // What the run folder's config.toml records reads back as the mode that ran.
    EXPECT_NO_THROW(parse_config_string(to_toml(p), "config.toml")) << to_toml(p);
  }
  // A combination no device can run is still refused, naming the key.
  const auto e = test::message_of<ConfigError>([] { cpu_config({"pipeline.dual_stream=true"}); });
  EXPECT_NE(e.find("pipeline.dual_stream = true needs pipeline.pin_memory = true"), std::string::npos) << e;
}

TEST(Plan, AnEvaluationPlanOnTheCpuIgnoresTheTrainingStepsCudaTermsAndMemory) {
  constexpr double kGiB = 1 << 30;
  const ScopedHostMemory fake({10 * kGiB, 12 * kGiB, 0});  // far below a 224 px step of batch 256 (~27 GiB)
  // configs/resnet50_imagenet.toml's step terms: fp16 and a CUDA graph at 224 px, batch 256.
  const Config c = cpu_config({"train.precision=fp16", "train.cuda_graph=true", "data.image_size=224",
                               "train.batch_size=256", "pipeline.mode=dual_stream", "pipeline.transfer_dtype=uint8"});
  EXPECT_NE(plan_error(c).find("a training step needs ~"), std::string::npos) << plan_error(c);
  const Plan eval = resolve_plan(c, {}, PlanUse::kEval);
  EXPECT_EQ(eval.step.precision, engine::Precision::kFp32);
  EXPECT_FALSE(eval.step.cuda_graph);
  EXPECT_EQ(pipeline::mode_name(eval.pipeline), "pageable");
  EXPECT_EQ(eval.transform.size, 224);
  const auto memory = plan_error(cpu_config({"data.image_size=224", "train.batch_size=256"}));
  EXPECT_NE(memory.find("a training step needs ~"), std::string::npos) << memory;
  EXPECT_NO_THROW(resolve_plan(cpu_config({"data.image_size=224", "train.batch_size=256"}), {}, PlanUse::kEval));
}

TEST(Plan, TheDeviceAugmentationsTakeTheGpuDecodersPixels) {
  // Only the device matters: with augmentations the GPU decoder gives way on the CPU as it does without.
  const Plan mixed = resolve_plan(cpu_config({"data.decoder=nvjpeg", "data.mixup_alpha=0.8"}));
  EXPECT_FALSE(mixed.transform.gpu_decode);
  EXPECT_EQ(mixed.transform.format, data::PixelFormat::kFloat32Chw);  // Mixup works on the floats
  const Plan p = resolve_plan(cpu_config({"data.decoder=auto", "data.auto_augment=\"trivial\""}));
  EXPECT_FALSE(p.transform.gpu_decode);  // auto on the CPU
  EXPECT_EQ(p.transform.format, data::PixelFormat::kUint8Hwc);  // the policy's ops take uint8 pixels
}

TEST(Plan, DefaultRingFitsAndResolves) {
  const Plan p = resolve_plan(cpu_config());
  EXPECT_EQ(p.train_loader.prefetch_batches, 4);
  EXPECT_EQ(p.train_loader.workers, 0);  // as written; the loader runs worker_count()
  EXPECT_GT(data::worker_count(p.train_loader), 0);
}

TEST(Plan, AutoAugmentTakesUint8PixelsAndTheTrainingFeederGetsTheSmoothing) {
  const Plan plain = resolve_plan(cpu_config({"data.random_erasing=0.25", "data.mixup_alpha=0.2"}));
  EXPECT_EQ(plain.pipeline.transfer_dtype, pipeline::TransferDtype::kFloat32);  // erasing and mixing work on floats
  const Plan p = resolve_plan(cpu_config({"data.auto_augment=\"trivial\"", "train.label_smoothing=0.1"}));
  EXPECT_EQ(p.pipeline.transfer_dtype, pipeline::TransferDtype::kUint8);  // the policy's ops are uint8 ones
  EXPECT_EQ(p.transform.format, data::PixelFormat::kUint8Hwc);
  const pipeline::augment::AugmentOptions a = train_augment(p, 7);
  EXPECT_EQ(a.num_classes, 7);
  EXPECT_DOUBLE_EQ(a.label_smoothing, 0.1);
  EXPECT_TRUE(a.pixel_ops());
}

// A config that sets the validation side apart (data.val_image_size) sizes the rings by it: the error names that
// key, located where it was written, not the prefetch the recipe file holds.
TEST(Plan, HostRingsSizedByTheValidationSideNameDataValImageSizeWhereItWasSet) {
  constexpr double kGiB = 1 << 30;
  const ScopedHostMemory fake({8 * kGiB, 8 * kGiB, 0});
  const Config c = parse_config_string("[data]\nroot = \"/data\"\nprefetch_batches = 4\n", "cfg.toml",
                                       {"train.batch_size=32", "data.image_size=32", "data.val_image_size=4096",
                                        "train.device=cpu"});
  const auto e = plan_error(c);
  EXPECT_EQ(e.rfind("override 'data.val_image_size=4096':1:21: the host batch rings need ", 0), 0u) << e;
  for (const char* part : {"train.batch_size 32 x data.val_image_size 4096 px",
                           "lower data.prefetch_batches, train.batch_size or data.val_image_size"}) {
    EXPECT_NE(e.find(part), std::string::npos) << part << " in " << e;
  }
  EXPECT_EQ(e.find("data.image_size 4096"), std::string::npos) << e;
}

// The side the step is sized by is the schedule's largest: the error names the key that set it and is located
// there, not at the batch size, which was small.
TEST(Plan, ATrainingStepSizedByTheSchedulesLargestSideIsLocatedAtThatKey) {
  constexpr double kGiB = 1 << 30;
  const ScopedHostMemory fake({10 * kGiB, 64 * kGiB, 0});
  const auto e = plan_error(cpu_config({"train.batch_size=8", "data.image_size_min=512", "data.image_size_max=1024"}));
  EXPECT_EQ(e.rfind("override 'data.image_size_max=1024':1:21: a training step needs ~", 0), 0u) << e;
  for (const char* part : {"train.batch_size 8 x data.image_size_max 1024 px", "lower train.batch_size or data.image_size_max"}) {
    EXPECT_NE(e.find(part), std::string::npos) << part << " in " << e;
  }
  // The batch size set on the command line over a side in the file: the batch size it is.
  const ScopedHostMemory small({1 * kGiB, 64 * kGiB, 0});
  const Config file_side = parse_config_string("[data]\nroot = \"/data\"\nimage_size = 224\n", "cfg.toml",
                                               {"train.batch_size=64", "train.device=cpu"});
  EXPECT_EQ(plan_error(file_side).rfind("override 'train.batch_size=64':1:18: a training step needs ~", 0), 0u)
      << plan_error(file_side);
}

// A smoke run of any recipe on a CPU (--device cpu): what only CUDA runs gives way to the CPU's equivalent, nothing
// is refused. Whether a full-size step fits is this machine's question, not the recipe's: the memory is faked large.
TEST(Plan, EveryShippedConfigResolvesOnTheCpu) {
  const ScopedHostMemory plenty({1e15, 1e15, 0});
  const std::string root = test::make_dataset("plan_shipped", 2, 2, 1, 32);
  int shipped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(PINFEED_SOURCE_DIR) + "/configs")) {
    const Config c = load_config(entry.path().string(), {"data.root=\"" + root + "\"", "train.device=cpu"});
    EXPECT_EQ(plan_error(c), "") << entry.path();
    const Plan p = resolve_plan(c);
    EXPECT_FALSE(p.step.cuda_graph || p.step.net.fused_bn || p.transform.gpu_decode) << entry.path();
    EXPECT_NO_THROW(parse_config_string(to_toml(p), "config.toml")) << entry.path();  // what the run folder records
    ++shipped;
  }
  EXPECT_GE(shipped, 6);
}

}  // namespace
}  // namespace pinfeed::app
