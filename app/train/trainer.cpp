// pinfeed train: a run started or resumed in its run folder, then the epoch loop (training.h).
#include "app/train/trainer.h"

#include <filesystem>
#include <optional>
#include <string>
#include <tuple>

#include "common/format.h"
#include "engine/dist/distributed.h"
#include "app/plan/datasets.h"
#include "app/run/run_lock.h"
#include "app/run/run_outputs.h"
#include "app/train/resume.h"
#include "app/train/run_folder.h"
#include "app/train/training.h"
#include "common/log.h"
#include "data/error.h"

namespace pinfeed::app {

TrainResult train(const Plan& plan, const TrainArgs& args, engine::StopRequest& stop) {
  engine::Distributed dist(plan.dist_env, plan.device, name_of(plan.backend), plan.dist.timeout(),
                          plan.dist.one_rank_group);
  return dist.guard([&] {
    dist.agree("config", to_toml(plan), "config");
    configure_backend(plan);
    Training training(plan, open_datasets(plan, plan.train.eval), dist, stop, args.stop_after_steps);
    TrainResult result;
    result.main_rank = dist.is_main();
    int64_t start_epoch = 0, start_step = 0;
    std::optional<RunLock> lock;  // rank 0's, until the run ends (run_folder.h)
    std::optional<RunOutputs> out;
    std::string checkpoint_path;
    if (!args.resume.empty()) {
      // Rank 0 reads the checkpoint; the other ranks get its state by broadcast (no shared disk needed).
      std::optional<engine::Checkpoint> checkpoint;
      if (dist.is_main()) {
        checkpoint_path = resume_path(plan.run.dir, plan.run.name, args.resume);  // refuses a folder pinfeed did not write
        lock.emplace(own_run_folder(run_dir_of(checkpoint_path), plan.run.dir));
        checkpoint = engine::load_checkpoint(checkpoint_path);
        warn_if_other_data(*checkpoint, checkpoint_path, plan);
      }
      std::tie(start_epoch, start_step) = training.resume(checkpoint);
      result.run_dir = dist.share("run_dir", run_dir_of(checkpoint_path));
      if (start_epoch >= plan.schedule.epochs) {  // every rank knows the checkpoint's position
        if (dist.is_main()) {
          log::info("run " + result.run_dir + " already finished all " + std::to_string(start_epoch) +
                    " epochs (train.epochs = " + std::to_string(plan.schedule.epochs) + "); nothing to do");
        }
        return result;
      }
      if (dist.is_main()) {
        log::info("resuming from " + checkpoint_path + " at epoch " + std::to_string(start_epoch + 1) + ", step " +
                  std::to_string(start_step));
      }
    } else {
      if (!plan.train.init_from.empty()) training.init_from(plan.train.init_from);
      std::string dir;
      if (dist.is_main()) {
        dir = make_run_dir(plan.run.dir, plan.run.name);
        lock.emplace(own_run_folder(dir, plan.run.dir));
      }
      result.run_dir = dist.share("run_dir", dir);
    }
    std::optional<ResumePoint> resumed;
    if (!args.resume.empty()) resumed = ResumePoint{start_epoch, start_step};
    if (dist.is_main()) {
      RunStart facts;
      facts.device = plan.device.str();
      facts.world_size = dist.world();
      if (resumed) {
        facts.checkpoint = std::filesystem::absolute(checkpoint_path).lexically_normal().string();
        facts.resume_epoch = start_epoch + 1;
        facts.resume_step = start_step;
      }
      out.emplace(RunOutputsOptions{to_toml(plan), plan.run.name, plan.run.log_steps}, result.run_dir, resumed,
                  facts);
    }
    try {
      training.run(out ? &*out : nullptr, start_epoch, start_step, result);
    } catch (const DataError&) {
      if (out) training.list_bad_images_found(*out);
      throw;
    }
    return result;
  });
}

}  // namespace pinfeed::app