#include "app/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <tuple>

#include "app/datasets.h"
#include "app/evaluate.h"
#include "app/format.h"
#include "app/loss_meter.h"
#include "app/lr_schedule.h"
#include "app/progress.h"
#include "app/resume.h"
#include "app/run_outputs.h"
#include "app/signals.h"
#include "app/step_loop.h"
#include "app/step_runner.h"
#include "common/log.h"
#include "pipeline/feeder.h"

namespace pinfeed::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What one epoch of training left behind for its report.
struct EpochProgress {
  int64_t step = 0, bad_images = 0;
  double lr = 0;
  pipeline::EpochTiming timing;
};

// One run's moving parts, so that the epoch loop reads as the recipe: train an epoch, evaluate, report, save.
class Training {
 public:
  Training(const Plan& plan, Datasets sets)
      : plan_(plan), config_(plan.config), sets_(std::move(sets)),
        train_feed_(sets_.train, plan.train_loader, plan.pipeline, plan.feeder),
        runner_(plan, sets_.num_classes),
        meter_(plan.compute_stream),
        losses_(plan.device, plan.compute_stream),
        progress_(config_.run.progress_interval_s) {
    if (sets_.val) {
      val_feed_ = std::make_unique<pipeline::Feeder>(sets_.val, plan.val_loader, plan.pipeline, plan.feeder);
    }
    steps_per_epoch_ = config_.train.max_steps_per_epoch > 0
                           ? std::min(config_.train.max_steps_per_epoch, train_feed_.batches_per_epoch())
                           : train_feed_.batches_per_epoch();
  }

  // Restores a checkpoint; returns where to continue: (epoch, step in that epoch).
  std::pair<int64_t, int64_t> resume(const Checkpoint& ck) {
    restore_checkpoint(runner_, ck);
    global_step_ = ck.global_step;
    return {ck.epoch, ck.step_in_epoch};
  }

  void run(RunOutputs& out, int64_t start_epoch, int64_t start_step, TrainResult& result) {
    announce(result.run_dir);
    runner_.model()->train();
    for (int64_t epoch = start_epoch; epoch < config_.train.epochs; ++epoch) {
      const auto t0 = Clock::now();
      const EpochProgress p = train_epoch(out, epoch, epoch == start_epoch ? start_step : 0);
      if (g_stop_requested) {
        save(out, epoch, p.step);
        log::warn("interrupted: saved " + out.path("last.pt") + " at epoch " + std::to_string(epoch + 1) + " step " +
                  std::to_string(p.step) + "; continue with --resume " + out.path("last.pt"));
        result.interrupted = true;
        return;
      }
      EpochResult er{epoch + 1, losses_.mean(), NAN, NAN, NAN, p.timing.samples_per_s, 0};
      if (val_feed_) std::tie(er.val_loss, er.val_top1, er.val_top5) = as_tuple(evaluate(runner_, *val_feed_));
      er.epoch_seconds = seconds_since(t0);
      result.epochs.push_back(er);
      report(out, er, p);
      if (epoch + 1 == config_.train.epochs || (epoch + 1) % config_.run.checkpoint_every == 0) save(out, epoch + 1, 0);
      if (g_stop_requested) {
        result.interrupted = true;
        return;
      }
    }
  }

 private:
  static std::tuple<double, double, double> as_tuple(const EvalResult& e) { return {e.loss, e.top1, e.top5}; }

  void announce(const std::string& run_dir) const {
    log::info("run " + run_dir + ": " + std::to_string(sets_.train->size()) + " train images, " +
              std::to_string(sets_.num_classes) + " classes, device " + plan_.device.str() + ", mode " +
              train_feed_.mode() + " (transfer " + config_.pipeline.transfer_dtype + "), " +
              std::to_string(train_feed_.workers()) + " workers, " + std::to_string(steps_per_epoch_) +
              " steps/epoch, precision " + config_.train.precision + (runner_.graphed() ? ", CUDA graph" : ""));
  }

  void save(RunOutputs& out, int64_t epoch, int64_t step_in_epoch) {
    save_checkpoint(out.path("last.pt"), make_checkpoint(runner_, config_, epoch, step_in_epoch, global_step_));
  }

  EpochProgress train_epoch(RunOutputs& out, int64_t epoch, int64_t first) {
    StepLoopOptions loop;
    loop.epoch = epoch;
    loop.first_step = first;
    loop.end_step = steps_per_epoch_;
    loop.warmup_steps = std::min<int64_t>(plan_.warmup_steps, (steps_per_epoch_ - first) / 4);
    loop.max_steps_ahead = plan_.max_steps_ahead;
    losses_.reset();
    EpochProgress p;
    p.lr = learning_rate(config_.train, global_step_, steps_per_epoch_);
    auto rate_t0 = Clock::now();
    int64_t rate_samples = 0;
    const StepLoopResult r = run_steps(
        train_feed_, meter_, loop,
        [&](const pipeline::DeviceBatch& batch, int64_t) {
          p.lr = learning_rate(config_.train, global_step_, steps_per_epoch_);
          losses_.add(runner_.train_step(batch.images, batch.labels, p.lr));
        },
        [&](const pipeline::DeviceBatch& batch, int64_t step) {
          out.steps(epoch, meter_.take_resolved());
          ++global_step_;
          p.step = step + 1;
          p.bad_images += batch.bad_images;
          rate_samples += batch.size;
          if (progress_.due()) {
            show_progress(epoch, p, rate_samples / seconds_since(rate_t0));
            rate_t0 = Clock::now();
            rate_samples = 0;
          }
        });
    p.step = r.next_step;
    p.timing = r.timing;
    out.steps(epoch, meter_.take_resolved(true));
    progress_.end();
    return p;
  }

  void show_progress(int64_t epoch, const EpochProgress& p, double rate) {
    const double left = (steps_per_epoch_ - p.step + (config_.train.epochs - epoch - 1) * steps_per_epoch_);
    std::ostringstream line;
    line << "epoch " << epoch + 1 << "/" << config_.train.epochs << " step " << p.step << "/" << steps_per_epoch_
         << " | " << static_cast<int64_t>(rate) << " samples/s | loss " << fmt_ms(losses_.latest()) << " | lr "
         << p.lr << " | ETA " << eta_text(left * config_.train.batch_size / rate);
    progress_.show(line.str());
  }

  void report(RunOutputs& out, const EpochResult& er, const EpochProgress& p) {
    const pipeline::EpochTiming& t = p.timing;
    out.epoch({{"epoch", er.epoch}, {"lr", p.lr}, {"train_loss", num_or_null(er.train_loss)},
               {"val_loss", num_or_null(er.val_loss)}, {"val_top1", num_or_null(er.val_top1)},
               {"val_top5", num_or_null(er.val_top5)}, {"samples_per_s", num_or_null(t.samples_per_s)},
               {"epoch_s", er.epoch_seconds}, {"steps", t.steps}, {"warmup_steps", t.warmup_steps},
               {"wait_ms_mean", num_or_null(t.wait_ms.mean)}, {"wait_ms_p50", num_or_null(t.wait_ms.p50)},
               {"wait_ms_p95", num_or_null(t.wait_ms.p95)}, {"loader_ms_mean", num_or_null(t.loader_ms.mean)},
               {"ahead_ms_mean", num_or_null(t.ahead_ms.mean)}, {"h2d_ms_mean", num_or_null(t.h2d_ms.mean)},
               {"compute_ms_mean", num_or_null(t.compute_ms.mean)}, {"gpu_idle", num_or_null(t.gpu_idle)},
               {"mode", train_feed_.mode()},
               {"pinned_mb", static_cast<double>(train_feed_.pinned_bytes()) / (1 << 20)}, {"host_rss_mb", host_rss_mb()},
               {"workers", train_feed_.workers()}, {"bad_images", p.bad_images}});
    std::ostringstream line;
    line.precision(4);
    line << "epoch " << er.epoch << "/" << config_.train.epochs << ": train_loss " << er.train_loss << " val_loss "
         << er.val_loss << " top1 " << er.val_top1 << " top5 " << er.val_top5 << " | " << t.samples_per_s
         << " samples/s, " << er.epoch_seconds << " s | wait ms mean " << fmt_ms(t.wait_ms.mean) << " p50 "
         << fmt_ms(t.wait_ms.p50) << " p95 " << fmt_ms(t.wait_ms.p95) << " (loader " << fmt_ms(t.loader_ms.mean)
         << ") | ahead ms " << fmt_ms(t.ahead_ms.mean) << " | h2d ms " << fmt_ms(t.h2d_ms.mean)
         << " | GPU idle " << (std::isnan(t.gpu_idle) ? std::string("n/a") : fmt_ms(100 * t.gpu_idle) + "%")
         << " | mode " << train_feed_.mode() << ", pinned " << train_feed_.pinned_bytes() / (1 << 20) << " MB, RSS "
         << static_cast<int64_t>(host_rss_mb()) << " MB"
         << (p.bad_images ? ", bad images " + std::to_string(p.bad_images) : "");
    log::info(line.str());
  }

  const Plan& plan_;
  const Config& config_;
  Datasets sets_;
  pipeline::Feeder train_feed_;
  std::unique_ptr<pipeline::Feeder> val_feed_;
  StepRunner runner_;
  pipeline::StepMeter meter_;
  LossMeter losses_;
  Progress progress_;
  int64_t steps_per_epoch_ = 0;
  int64_t global_step_ = 0;
};

}  // namespace

TrainResult train(const Plan& plan, const TrainArgs& args) {
  configure_backend(plan);
  Training training(plan, open_datasets(plan, plan.config.train.eval));
  TrainResult result;
  int64_t start_epoch = 0, start_step = 0;
  if (!args.resume.empty()) {
    const std::string checkpoint = resume_path(plan.config, args.resume);
    std::tie(start_epoch, start_step) = training.resume(load_checkpoint(checkpoint));
    result.run_dir = std::filesystem::path(checkpoint).parent_path().string();
    log::info("resuming from " + checkpoint + " at epoch " + std::to_string(start_epoch + 1) + ", step " +
              std::to_string(start_step));
  } else {
    result.run_dir = make_run_dir(plan.config.run.dir, plan.config.run.name);
  }
  RunOutputs out(plan.config, result.run_dir);
  training.run(out, start_epoch, start_step, result);
  return result;
}

}  // namespace pinfeed::app
