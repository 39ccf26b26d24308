// The epoch loop of `pinfeed train`: train an epoch, evaluate, report, save.
#include "app/train/training.h"


#include <ATen/ops/tensor.h>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>
#include <vector>

#include "common/format.h"
#include "engine/dist/distributed.h"
#include "engine/optim/lr_schedule.h"
#include "app/plan/datasets.h"
#include "engine/checkpoint/checkpoint_writer.h"
#include "app/run/run_lock.h"
#include "app/run/run_outputs.h"
#include "engine/signals.h"
#include "engine/step/step_losses.h"
#include "engine/step/step_loop.h"
#include "engine/step/step_runner.h"
#include "engine/step/step_trace.h"
#include "app/train/bad_images.h"
#include "app/train/epoch_report.h"
#include "app/train/evaluate.h"
#include "app/train/loss_meter.h"
#include "app/train/progress.h"
#include "app/train/resume.h"
#include "app/train/run_folder.h"
#include "app/train/stop_policy.h"
#include "app/train/train_trace.h"
#include "common/log.h"
#include "data/error.h"
#include "pipeline/error_text.h"
#include "pipeline/transfer/feeder.h"

namespace pinfeed::app {

// One run's moving parts, so that the epoch loop reads as the recipe: train an epoch, evaluate, report, save.
class Training::Impl {
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  // A double written so that reading it back (strtod) gives the same value, NaN and infinities included.
  static std::string exact_text(double v) {
    std::ostringstream s;
    s.precision(17);
    s << v;
    return s.str();
  }

  static data::LoaderOptions with_stop(data::LoaderOptions o, const engine::StopRequest& stop) {
    o.stop_requested = engine::stop_after_grace(stop);
    return o;
  }

 public:
  Impl(const Plan& plan, Datasets sets, engine::Distributed& dist, engine::StopRequest& stop, int64_t stop_after_steps)
      : plan_(plan), dist_(dist), stop_(stop), sets_(std::move(sets)),
        train_feed_(sets_.train, with_stop(plan.train_loader, stop), plan.pipeline, plan.feeder,
                    train_augment(plan, sets_.num_classes)),
        runner_(plan.step, sets_.num_classes, &dist),
        meter_(plan.compute_stream),
        losses_(plan.device, plan.compute_stream),
        step_losses_(plan.device, plan.compute_stream),
        progress_(plan.run.progress_interval_s), stop_policy_(stop, dist, stop_after_steps), bad_images_(sets_, dist) {
    if (sets_.val) {
      val_feed_ = std::make_unique<pipeline::Feeder>(sets_.val, with_stop(plan.val_loader, stop), plan.pipeline,
                                                     plan.feeder);
    }
    steps_per_epoch_ = plan_.train.max_steps_per_epoch > 0
                           ? std::min(plan_.train.max_steps_per_epoch, train_feed_.batches_per_epoch())
                           : train_feed_.batches_per_epoch();
    if (plan_.run.trace_steps) check_trace_steps(plan_, *plan_.run.trace_steps, steps_per_epoch_);
  }

  std::pair<int64_t, int64_t> resume(const std::optional<engine::Checkpoint>& ck) {
    std::string position;
    if (ck) {
      check_resumable(*ck, shape());
      restore_checkpoint(runner_, *ck);
      best_top1_ = ck->best_val_top1;
      best_weights_ = ck->best_weights;
      position = std::to_string(ck->epoch) + " " + std::to_string(ck->step_in_epoch) + " " +
                 std::to_string(ck->global_step);
      // Each rank's loss sum of the epoch so far, when the checkpoint has them (then one per rank).
      if (ck->epoch_loss_sums.defined() && ck->epoch_loss_sums.numel() == dist_.world()) {
        const at::Tensor sums = ck->epoch_loss_sums.to(at::kDouble).contiguous();
        for (int64_t r = 0; r < sums.numel(); ++r) position += " " + exact_text(sums.data_ptr<double>()[r]);
      }
    }
    std::istringstream in(dist_.share("position", position));
    int64_t epoch = 0, step = 0;
    in >> epoch >> step >> global_step_;
    std::vector<double> loss_sums;
    for (std::string word; in >> word;) loss_sums.push_back(std::strtod(word.c_str(), nullptr));
    if (static_cast<int64_t>(loss_sums.size()) == dist_.world()) resumed_loss_sum_ = loss_sums[dist_.rank()];
    runner_.broadcast_state();
    runner_.scatter_buffers(ck ? ck->rank_buffers : at::Tensor());  // after the broadcast of rank 0's mean
    return {epoch, step};
  }

  void init_from(const std::string& path) {
    if (dist_.is_main()) init_weights_from(runner_, path);
    runner_.broadcast_state();
  }
  void run(RunOutputs* out, int64_t start_epoch, int64_t start_step, TrainResult& result) {
    try {
      run_epochs(out, start_epoch, start_step, result);
    } catch (const std::exception& e) {
      throw_write_error_before(e);
      throw;
    }
    writer_.wait();
    if (out && !result.interrupted && !result.epochs.empty()) {
      report_end(*out, plan_, result.run_dir, result.epochs.back(), seconds_since(started_),
                 start_epoch > 0 || start_step > 0);
    }
  }

  void list_bad_images_found(RunOutputs& out) noexcept { bad_images_.list_found(out); }

 private:
  void run_epochs(RunOutputs* out, int64_t start_epoch, int64_t start_step, TrainResult& result) {
    if (dist_.is_main()) {
      announce_run(result.run_dir, plan_, sets_, train_feed_, steps_per_epoch_, runner_.graphed(), dist_);
    }
    if (out) bad_images_.count_listed(*out);  // a resumed run counts the training set's files listed before too
    if (out && plan_.run.trace_steps) {
      trace_ = open_train_trace(plan_, *out, train_feed_.mode(), start_epoch * steps_per_epoch_ + start_step);
    }
    runner_.model()->train();
    engine::training_started();  // a signal before this point ended the process at once (signals.h): nothing to save
    for (int64_t epoch = start_epoch; epoch < plan_.schedule.epochs; ++epoch) {
      const auto t0 = Clock::now();
      EpochProgress p;
      try {
        p = train_epoch(out, epoch, epoch == start_epoch ? start_step : 0);
      } catch (const data::StuckSample& e) {  // the loader names the file; the steps run so far are kept
        throw_write_error_before(e);
        save_before_stuck_input(out, epoch, "stopping");
        throw;
      } catch (const data::Interrupted& e) {  // Ctrl-C while no batch came (a stuck read)
        throw_write_error_before(e);
        save_before_stuck_input(out, epoch, "interrupted");
        throw;
      }
      if (stop_policy_.stop_in_epoch(p.stopped)) {
        bad_images_.record(out);
        const EpochSoFar so_far = epoch_so_far();
        runner_.average_buffers();
        check_finite(epoch, p.step);
        save_at_stop(out, stop_policy_.in_epoch(epoch, p.step, last_pt(out)), so_far);
        result.interrupted = true;
        return;
      }
      runner_.average_buffers();  // each rank's BN statistics saw only its shard
      check_finite(epoch, p.step);
      EpochResult er;
      er.epoch = epoch + 1;
      er.train_loss = train_loss();
      er.val_loss = er.val_top1 = er.val_top5 = NAN;
      er.samples_per_s = p.timing.samples_per_s;
      er.image_size = sets_.train->side(epoch);
      bool best = false;  // a whole evaluation (not one a stop cut short) with a higher top-1 than any before
      if (val_feed_) {
        const auto eval_t0 = Clock::now();
        const EvalResult val = evaluate(runner_, *val_feed_, &dist_, &stop_);
        // Every rank evaluates the EMA as well (its sums are all-reduced), a stop request notwithstanding.
        const EvalResult ema = runner_.ema() ? evaluate(runner_, *val_feed_, &dist_, &stop_, /*ema=*/true) : EvalResult{};
        er.eval_seconds = seconds_since(eval_t0);
        std::tie(er.val_loss, er.val_top1, er.val_top5) = std::tie(val.loss, val.top1, val.top5);
        std::tie(er.ema_val_loss, er.ema_val_top1, er.ema_val_top5) = std::tie(ema.loss, ema.top1, ema.top5);
        const BestWeights b = best_weights(val, ema, sets_.val->size(), best_top1_);
        best = !b.weights.empty();
        if (best) best_top1_ = b.top1, best_weights_ = er.best_weights = b.weights;
      }
      er.epoch_seconds = seconds_since(t0);
      result.epochs.push_back(er);
      bad_images_.record(out);
      p.bad_images = bad_images_.train_files();
      const RankSpread ranks = spread(dist_, p.timing);
      if (out) report_epoch(*out, plan_, train_feed_, er, p, ranks);
      const bool due = epoch + 1 == plan_.schedule.epochs || (epoch + 1) % plan_.run.checkpoint_every == 0;
      // last.pt first: a kill between the two writes then leaves the epoch in last.pt, where a resume looks.
      std::vector<engine::CheckpointFile> files;
      if (out && due) files.push_back(checkpoint_file(*out, epoch + 1, 0));
      if (out && best) files.push_back(checkpoint_file(*out, epoch + 1, 0, {}, "best.pt"));
      if (!files.empty()) writer_.save(std::move(files));  // written while the next epoch trains
      if (stop_policy_.stop_after_epoch()) {  // came during the evaluation or the save
        save_at_stop(out, stop_policy_.after_epoch(epoch, due, last_pt(out)), {});
        result.interrupted = true;
        return;
      }
    }
  }

  // A checkpoint handed to the writer failed before `later` came: as when checkpoints were written on this
  // thread, that error ends the run, and `later` is said in a warning. Otherwise returns once it is written.
  void throw_write_error_before(const std::exception& later) {
    try {
      writer_.wait();
    } catch (...) {
      log::warn(error_text(later));
      throw;
    }
  }

  // Before anything is evaluated or saved. Every rank holds the same weights and, after average_buffers, the same
  // BN statistics, so all of them stop here together. Each step's loss alone would not do: in fp16 the loss
  // scaler skips a step whose gradients overflow, and a weight can overflow while the loss still reads finite.
  void check_finite(int64_t epoch, int64_t step) {
    const std::string weight = runner_.first_non_finite();
    const double loss = losses_.count() ? train_loss() : NAN;  // every rank has run steps, or none has
    const bool fp16 = plan_.step.precision == engine::Precision::kFp16;
    if (weight.empty() && !(losses_.count() && loss_diverged(loss, sets_.num_classes, fp16))) return;
    throw Diverged("training diverged: " + (weight.empty() ? "the mean train loss" : weight) + " is " +
                   (weight.empty() ? "over " + std::to_string(static_cast<int>(kDivergedLossFactor)) + " x ln(classes) or not finite" : std::string("no longer finite")) + " at epoch " +
                   std::to_string(epoch + 1) + " step " + std::to_string(step) + " (mean train loss of the epoch " +
                   std::to_string(loss) + "); nothing was saved from it, the last checkpoint written is kept. Lower "
                   "train.lr, add train.warmup_epochs, or check the data");
  }

  RunShape shape() const {
    return {dist_.world(), plan_.train_loader.batch_size, sets_.train->size(), steps_per_epoch_,
            sets_.train->folder().classes};
  }

  // What stays per rank until the epoch ends, gathered from every rank (all call it) for a mid-epoch checkpoint.
  struct EpochSoFar {
    at::Tensor loss_sums;  // (world,) float64: each rank's sum of its step losses of the epoch so far
    at::Tensor buffers;    // (world, n) float32, several ranks: each rank's BN running statistics
  };
  EpochSoFar epoch_so_far() {
    const std::vector<double> sums = dist_.all_gather({losses_.sum().item<double>()});
    return {at::tensor(sums, at::TensorOptions().dtype(at::kDouble)), runner_.gather_buffers()};
  }

  engine::CheckpointFile checkpoint_file(RunOutputs& out, int64_t epoch, int64_t step_in_epoch,
                                 const EpochSoFar& so_far = {}, const std::string& file = "last.pt") {
    engine::Checkpoint ck = make_checkpoint(runner_, plan_, epoch, step_in_epoch, global_step_, shape());
    ck.classes = sets_.train->folder().classes;  // predictions are named by them
    ck.best_val_top1 = best_top1_;
    ck.best_weights = best_weights_;
    if (file == "best.pt" && best_weights_ == "ema") {
      // torchvision users load `model`: best.pt's holds the weights that scored best, here the EMA's.
      ck.model_raw = std::move(ck.model);
      ck.model = ck.model_ema;
    }
    ck.epoch_loss_sums = so_far.loss_sums;
    ck.rank_buffers = so_far.buffers;
    return {out.path(file), std::move(ck)};
  }

  static std::string last_pt(const RunOutputs* out) { return out ? out->path("last.pt") : ""; }

  // Carries out what the stop policy decided (rank 0 writes; so_far: gathered by every rank for a mid-epoch save),
  // on this thread once the checkpoint being written is on disk: the run ends with it.
  void save_at_stop(RunOutputs* out, const StopSave& s, const EpochSoFar& so_far) {
    if (!out) return;
    writer_.wait();
    if (s.write) {
      const engine::CheckpointFile f = checkpoint_file(*out, s.epoch, s.step, so_far);
      engine::save_checkpoint(f.path, f.checkpoint);
    }
    log::warn(s.line);
  }

  // The run ends while the input pipeline holds a batch back (stop_policy.h).
  void save_before_stuck_input(RunOutputs* out, int64_t epoch, const std::string& why) noexcept {
    if (runner_.pending_micro_steps() > 0) {  // a checkpoint holds optimizer steps whole (train.accumulate_steps)
      log::warn(why + ": inside a gradient accumulation (train.accumulate_steps): nothing saved, the last "
                "checkpoint written is kept");
      return;
    }
    const int64_t pending = epoch_steps_run_ - epoch_steps_done_;  // run on the device, not yet resolved
    global_step_ += pending;
    const StopSave s = stop_policy_.before_stuck_input(epoch, epoch_steps_run_, pending, why, last_pt(out));
    if (!out) return;
    if (!s.write) {
      log::warn(s.line);
      return;
    }
    try {
      if (const std::string bad = runner_.first_non_finite(); !bad.empty()) {
        log::warn(why + ": " + bad + " is no longer finite: nothing saved, the last checkpoint written is kept");
        return;
      }
      bad_images_.record(out);
      save_at_stop(out, s, epoch_so_far());
    } catch (const std::exception& e) {
      log::warn(why + ": could not save a checkpoint (" + error_text(e) + "); the last one written is kept");
    }
  }

  double train_loss() {  // the epoch's mean over every rank's steps
    at::Tensor sum = losses_.sum().to(at::kDouble).reshape({1});
    dist_.all_reduce_sum(sum);
    const int64_t steps = losses_.count() * dist_.world();
    return steps ? sum.item<double>() / steps : NAN;
  }

  EpochProgress train_epoch(RunOutputs* out, int64_t epoch, int64_t first) {
    for (int64_t e = epoch + 1; e < plan_.schedule.epochs; ++e) {  // the next side this run trains at
      if (sets_.train->side(e) != sets_.train->side(epoch)) {
        runner_.plan_ahead(sets_.train->side(e));
        break;
      }
    }
    engine::StepLoopOptions loop;
    loop.epoch = epoch;
    loop.first_step = first;
    loop.end_step = steps_per_epoch_;
    loop.warmup_steps = std::min<int64_t>(plan_.loop.warmup_steps, (steps_per_epoch_ - first) / 4);
    loop.max_steps_ahead = plan_.loop.max_steps_ahead;
    loop.stop = &stop_;
    loop.stop_every = runner_.accumulate_steps();
    loop.dist = &dist_;
    loop.device = plan_.device;
    loop.stream = plan_.compute_stream;
    loop.trace = trace_.get();
    loop.trace_offset = epoch * steps_per_epoch_;  // the global step, as the checkpoint counts it
    losses_.reset();
    if (first > 0 && resumed_loss_sum_) losses_.restore(*resumed_loss_sum_, first);  // the epoch's loss, whole
    resumed_loss_sum_.reset();
    EpochProgress p;
    // The lr of the epoch's latest step: the one before a resume, when no step follows it in this epoch.
    p.lr = engine::learning_rate(plan_.schedule, first > 0 ? global_step_ - 1 : global_step_, steps_per_epoch_);
    engine::LossScaler* scaler = runner_.loss_scaler();
    const int64_t skipped_before = scaler ? scaler->skipped_steps() : 0;
    const engine::StepRunner::CaptureCost captured_before = runner_.capture_cost();
    auto rate_t0 = Clock::now();
    int64_t rate_samples = 0;
    const bool log_steps = out && plan_.run.log_steps;  // rank 0 writes steps.jsonl
    if (log_steps) step_losses_.start_epoch(steps_per_epoch_, first);
    epoch_steps_run_ = epoch_steps_done_ = first;
    const engine::StepLoopResult r = engine::run_steps(
        train_feed_, meter_, loop,
        [&](const pipeline::DeviceBatch& batch, int64_t step) {
          p.lr = engine::learning_rate(plan_.schedule, global_step_, steps_per_epoch_);
          const at::Tensor loss = runner_.train_step(batch.images, batch.labels, p.lr);
          losses_.add(loss);
          epoch_steps_run_ = step + 1;
          if (log_steps) step_losses_.add(step, loss, p.lr);
        },
        [&](const pipeline::DeviceBatch& batch, int64_t step) {
          auto records = meter_.take_resolved();
          if (log_steps) out->steps(epoch, step_losses_.join(std::move(records)));
          ++global_step_;
          stop_policy_.step_done();
          p.step = epoch_steps_done_ = step + 1;
          rate_samples += batch.size;
          if (step < first + loop.warmup_steps) rate_t0 = Clock::now(), rate_samples = 0;  // plan timing, capture
          if (dist_.is_main()) progress_.step_done();
          if (dist_.is_main() && progress_.due()) {
            progress_.show(progress_line(plan_, epoch, p, steps_per_epoch_,
                                         rate_samples ? rate_samples / seconds_since(rate_t0) : NAN,
                                         losses_.latest()));
            rate_t0 = Clock::now();
            rate_samples = 0;
          }
        });
    // An epoch whose batches are no multiple of train.accumulate_steps: its last optimizer step takes those left.
    if (!r.stopped) runner_.finish_accumulation(p.lr);
    p.step = r.next_step;
    p.stopped = r.stopped;
    p.timing = r.timing;
    if (runner_.graphed()) p.captured = runner_.capture_cost() - captured_before;
    if (scaler) {
      p.loss_scale = scaler->current_scale();
      p.skipped_steps = scaler->skipped_steps() - skipped_before;
    }
    auto records = meter_.take_resolved(true);
    if (log_steps) out->steps(epoch, step_losses_.join(std::move(records), /*wait=*/true));
    progress_.end();
    return p;
  }

  const Clock::time_point started_ = Clock::now();
  const Plan& plan_;
  engine::Distributed& dist_;
  engine::StopRequest& stop_;
  Datasets sets_;
  pipeline::Feeder train_feed_;
  std::unique_ptr<pipeline::Feeder> val_feed_;
  engine::StepRunner runner_;
  pipeline::StepMeter meter_;
  LossMeter losses_;
  engine::StepLosses step_losses_;  // run.log_steps, rank 0: each step's loss for steps.jsonl
  Progress progress_;
  StopPolicy stop_policy_;
  BadImages bad_images_;  // after sets_
  int64_t steps_per_epoch_ = 0;
  int64_t global_step_ = 0;
  // Steps of the current epoch handed to the device, and those whose results came back (fewer by the steps
  // run ahead, pipeline.max_steps_ahead): a checkpoint taken when the input stops holds the first.
  int64_t epoch_steps_run_ = 0, epoch_steps_done_ = 0;
  std::optional<double> resumed_loss_sum_;  // this rank's loss sum of the resumed epoch before the resume
  std::unique_ptr<engine::StepTrace> trace_;  // run.trace_steps, rank 0
  double best_top1_ = NAN;  // the best whole validation's top-1 so far (best.pt's), resumes included
  std::string best_weights_;  // which weights scored it: "raw" or "ema" (train.ema)
  engine::CheckpointWriter writer_;   // rank 0's epoch-end checkpoints
};

Training::Training(const Plan& plan, Datasets sets, engine::Distributed& dist, engine::StopRequest& stop, int64_t stop_after_steps)
    : impl_(std::make_unique<Impl>(plan, std::move(sets), dist, stop, stop_after_steps)) {}
Training::~Training() = default;
std::pair<int64_t, int64_t> Training::resume(const std::optional<engine::Checkpoint>& checkpoint) {
  return impl_->resume(checkpoint);
}
void Training::init_from(const std::string& path) { impl_->init_from(path); }
void Training::run(RunOutputs* out, int64_t start_epoch, int64_t start_step, TrainResult& result) {
  impl_->run(out, start_epoch, start_step, result);
}
void Training::list_bad_images_found(RunOutputs& out) noexcept { impl_->list_bad_images_found(out); }

}  // namespace pinfeed::app
