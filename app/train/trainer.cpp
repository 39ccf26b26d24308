#include "app/train/trainer.h"

#include <ATen/ops/tensor.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>
#include <unordered_set>

#include "app/config/format.h"
#include "app/dist/distributed.h"
#include "app/optim/lr_schedule.h"
#include "app/plan/datasets.h"
#include "app/run/run_lock.h"
#include "app/run/run_outputs.h"
#include "app/run/signals.h"
#include "app/step/step_losses.h"
#include "app/step/step_loop.h"
#include "app/step/step_runner.h"
#include "app/step/step_trace.h"
#include "app/train/evaluate.h"
#include "app/train/loss_meter.h"
#include "app/train/progress.h"
#include "app/train/resume.h"
#include "common/log.h"
#include "data/error.h"
#include "pipeline/transfer/feeder.h"

namespace pinfeed::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What one epoch of training left behind for its report.
struct EpochProgress {
  int64_t step = 0;
  int64_t bad_images = 0;  // distinct bad files of the training set found so far by any rank, resumes included
  double lr = 0;
  bool stopped = false;
  pipeline::EpochTiming timing;
  // fp16: the loss scale at the epoch's end, and the steps of the epoch skipped for overflowed gradients.
  double loss_scale = NAN;
  int64_t skipped_steps = 0;
};

// Every rank's figures of the epoch, for rank 0's row: world size, global samples/s and the spread between
// ranks (a straggler shows as a wide min-max).
struct RankSpread {
  int64_t world = 1;
  double global_samples_per_s = NAN;
  double samples_per_s_min = NAN, samples_per_s_max = NAN, wait_min = NAN, wait_max = NAN;
  double idle_min = NAN, idle_max = NAN;
};

RankSpread spread(Distributed& dist, const pipeline::EpochTiming& t) {
  const std::vector<double> all = dist.all_gather({t.samples_per_s, t.wait_ms.mean, t.gpu_idle});
  RankSpread s;
  s.world = dist.world();
  s.global_samples_per_s = 0;
  s.samples_per_s_min = s.wait_min = s.idle_min = INFINITY;
  s.samples_per_s_max = s.wait_max = s.idle_max = -INFINITY;
  for (size_t r = 0; r < all.size(); r += 3) {
    s.global_samples_per_s += all[r];
    s.samples_per_s_min = std::min(s.samples_per_s_min, all[r]);
    s.samples_per_s_max = std::max(s.samples_per_s_max, all[r]);
    s.wait_min = std::min(s.wait_min, all[r + 1]);
    s.wait_max = std::max(s.wait_max, all[r + 1]);
    s.idle_min = std::min(s.idle_min, all[r + 2]);  // NaN on the CPU stays NaN in JSON below
    s.idle_max = std::max(s.idle_max, all[r + 2]);
  }
  if (std::isnan(t.gpu_idle)) s.idle_min = s.idle_max = NAN;
  return s;
}

// The bad files a rank found since the last gather, as bytes for the gather to rank 0: for each, 't' (training
// set) or 'v' (validation set), then its path and reason as <length>:<bytes> (a path may hold any byte but NUL,
// a decoder's message any byte at all).
std::string pack_bad_images(const std::vector<data::BadImage>& train, const std::vector<data::BadImage>& val) {
  std::string out;
  auto field = [&](const std::string& s) { out += std::to_string(s.size()) + ":" + s; };
  for (const auto* list : {&train, &val}) {
    for (const data::BadImage& b : *list) {
      out += list == &train ? 't' : 'v';
      field(b.path);
      field(b.reason);
    }
  }
  return out;
}

void unpack_bad_images(const std::string& bytes, std::vector<data::BadImage>& train, std::vector<data::BadImage>& val) {
  size_t at = 0;
  auto field = [&] {
    const size_t colon = bytes.find(':', at);
    const size_t n = std::stoul(bytes.substr(at, colon - at));
    at = colon + 1 + n;
    return bytes.substr(colon + 1, n);
  };
  while (at < bytes.size()) {
    const char set = bytes[at++];
    data::BadImage b;
    b.path = field();
    b.reason = field();
    (set == 't' ? train : val).push_back(std::move(b));
  }
}

// An accuracy (a fraction, as the files hold it) as the log line shows it: "67.10%".
std::string percent(double fraction) { return std::isnan(fraction) ? "n/a" : fixed(100 * fraction, 2) + "%"; }

// A double written so that reading it back (strtod) gives the same value, NaN and infinities included.
std::string exact_text(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

data::LoaderOptions with_stop(data::LoaderOptions o, const StopRequest& stop) {
  o.stop_requested = stop_after_grace(stop);
  return o;
}

// One run's moving parts, so that the epoch loop reads as the recipe: train an epoch, evaluate, report, save.
class Training {
 public:
  Training(const Plan& plan, Datasets sets, Distributed& dist, StopRequest& stop, int64_t stop_after_steps)
      : plan_(plan), dist_(dist), stop_(stop), sets_(std::move(sets)),
        train_feed_(sets_.train, with_stop(plan.train_loader, stop), plan.pipeline, plan.feeder),
        runner_(plan.step, sets_.num_classes, &dist),
        meter_(plan.compute_stream),
        losses_(plan.device, plan.compute_stream),
        step_losses_(plan.device, plan.compute_stream),
        progress_(plan.run.progress_interval_s), stop_after_steps_(stop_after_steps) {
    if (sets_.val) {
      val_feed_ = std::make_unique<pipeline::Feeder>(sets_.val, with_stop(plan.val_loader, stop), plan.pipeline,
                                                     plan.feeder);
    }
    steps_per_epoch_ = plan_.train.max_steps_per_epoch > 0
                           ? std::min(plan_.train.max_steps_per_epoch, train_feed_.batches_per_epoch())
                           : train_feed_.batches_per_epoch();
    if (plan_.run.trace_steps) check_trace_steps(*plan_.run.trace_steps);
  }

  // Restores a checkpoint (read by rank 0 alone: the others receive its state); returns where to continue:
  // (epoch, step in that epoch).
  std::pair<int64_t, int64_t> resume(const std::optional<Checkpoint>& ck) {
    std::string position;
    if (ck) {
      check_resumable(*ck, shape());
      restore_checkpoint(runner_, *ck);
      best_top1_ = ck->best_val_top1;
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

  // train.init_from: rank 0 reads the file; every rank starts from its weights.
  void init_from(const std::string& path) {
    if (dist_.is_main()) init_weights_from(runner_, path);
    runner_.broadcast_state();
  }

  // out: rank 0's outputs; null on the other ranks, which write nothing.
  void run(RunOutputs* out, int64_t start_epoch, int64_t start_step, TrainResult& result) {
    if (dist_.is_main()) announce(result.run_dir);
    if (out) {  // a resumed run counts the training set's files listed before too
      const std::string train_dir = (std::filesystem::path(sets_.train->folder().root) / "").string();
      for (const std::string& path : out->bad_images_listed()) {
        if (path.rfind(train_dir, 0) == 0) train_bad_.insert(path);
      }
    }
    if (out && plan_.run.trace_steps) {  // rank 0 alone: its GPU's kernels, in the run folder it writes
      const StepRange& s = *plan_.run.trace_steps;
      trace_ = std::make_unique<StepTrace>(s, out->path("trace_steps_" + s.text() + ".json"), plan_.device,
                                           nlohmann::json{{"command", "train"}, {"mode", train_feed_.mode()}});
      if (start_epoch * steps_per_epoch_ + start_step > s.last) {
        log::warn("run.trace_steps = \"" + s.text() + "\": this run resumes after step " + std::to_string(s.last) +
                  ", nothing to trace");
      } else {
        log::info("tracing steps " + s.text() + " into " + trace_->path());
      }
    }
    runner_.model()->train();
    training_started();  // a signal before this point ended the process at once (signals.h): nothing to save
    for (int64_t epoch = start_epoch; epoch < plan_.schedule.epochs; ++epoch) {
      const auto t0 = Clock::now();
      EpochProgress p;
      try {
        p = train_epoch(out, epoch, epoch == start_epoch ? start_step : 0);
      } catch (const data::StuckSample&) {  // the loader names the file; the steps run so far are kept
        save_before_stuck_input(out, epoch, "stopping");
        throw;
      } catch (const data::Interrupted&) {  // Ctrl-C while no batch came (a stuck read)
        save_before_stuck_input(out, epoch, "interrupted");
        throw;
      }
      if (dist_.any(p.stopped || stop_.requested())) {  // every rank leaves here together
        record_bad_images(out);
        const EpochSoFar so_far = epoch_so_far();
        runner_.average_buffers();
        check_finite(epoch, p.step);
        if (out && steps_here_ == 0) {
          // A checkpoint would only repeat the position this run started from (or, new, an untrained model).
          log::warn("interrupted before the first step: nothing saved");
        } else if (out) {
          save(*out, epoch, p.step, so_far);
          log::warn("interrupted: saved " + out->path("last.pt") + " at epoch " + std::to_string(epoch + 1) +
                    " step " + std::to_string(p.step) + "; continue with --resume " + out->path("last.pt"));
        }
        result.interrupted = true;
        return;
      }
      runner_.average_buffers();  // each rank's BN statistics saw only its shard
      check_finite(epoch, p.step);
      EpochResult er{epoch + 1, train_loss(), NAN, NAN, NAN, p.timing.samples_per_s, 0};
      bool best = false;  // a whole evaluation (not one a stop cut short) with a higher top-1 than any before
      if (val_feed_) {
        const EvalResult val = evaluate(runner_, *val_feed_, &dist_, &stop_);
        std::tie(er.val_loss, er.val_top1, er.val_top5) = as_tuple(val);
        best = val.samples == sets_.val->size() && !std::isnan(val.top1) && !(val.top1 <= best_top1_);
        if (best) best_top1_ = val.top1;
      }
      er.epoch_seconds = seconds_since(t0);
      result.epochs.push_back(er);
      record_bad_images(out);
      p.bad_images = static_cast<int64_t>(train_bad_.size());
      const RankSpread ranks = spread(dist_, p.timing);
      if (out) report(*out, er, p, ranks);
      const bool due = epoch + 1 == plan_.schedule.epochs || (epoch + 1) % plan_.run.checkpoint_every == 0;
      if (out && best) save(*out, epoch + 1, 0, {}, "best.pt");
      if (out && due) save(*out, epoch + 1, 0);
      if (dist_.any(stop_.requested())) {  // came during the evaluation or the save
        if (out && !due) save(*out, epoch + 1, 0);  // run.checkpoint_every > 1: the epoch is not lost
        if (out) {
          log::warn("interrupted: saved " + out->path("last.pt") + " at the end of epoch " +
                    std::to_string(epoch + 1) + "; continue with --resume " + out->path("last.pt"));
        }
        result.interrupted = true;
        return;
      }
    }
  }

  // A run stopping on bad input (data.on_bad_image = "fail", bad images in a row) lists the files found so far
  // before it ends, as each epoch does. This rank's alone: the others are at no collective to gather theirs.
  // A failure to write them must not hide the data error that ended the run.
  void list_bad_images_found(RunOutputs& out) noexcept {
    try {
      out.bad_images(sets_.train->take_new_bad_images());
      if (sets_.val) out.bad_images(sets_.val->take_new_bad_images());
    } catch (const std::exception& e) {
      log::warn(std::string("could not list the bad images found: ") + e.what());
    }
  }

 private:
  static std::tuple<double, double, double> as_tuple(const EvalResult& e) { return {e.loss, e.top1, e.top5}; }

  // Before anything is evaluated or saved. Every rank holds the same weights and, after average_buffers, the same
  // BN statistics, so all of them stop here together. Each step's loss alone would not do: in fp16 the loss
  // scaler skips a step whose gradients overflow, and a weight can overflow while the loss still reads finite.
  void check_finite(int64_t epoch, int64_t step) {
    const std::string bad = runner_.first_non_finite();
    if (bad.empty()) return;
    const double loss = train_loss();
    throw Diverged("training diverged: " + bad + " is no longer finite at epoch " + std::to_string(epoch + 1) +
                   " step " + std::to_string(step) + " (mean train loss of the epoch " + std::to_string(loss) +
                   "); nothing was saved from it, the last checkpoint written is kept. Lower train.lr, add "
                   "train.warmup_epochs, or check the data");
  }

  void announce(const std::string& run_dir) const {
    log::info("run " + run_dir + ": " + std::to_string(sets_.train->size()) + " train images, " +
              std::to_string(sets_.num_classes) + " classes, device " + plan_.device.str() + ", mode " +
              train_feed_.mode() + " (transfer " + pipeline::to_string(plan_.pipeline.transfer_dtype) + "), " +
              count_of(train_feed_.workers(), "worker") +
              (plan_.transform.gpu_decode ? " reading files for the GPU's JPEG decoder (nvJPEG), " : " decoding, ") + std::to_string(steps_per_epoch_) +
              " steps/epoch, precision " + name_of(plan_.step.precision) + (plan_.step.precision == Precision::kFp16 ? " (loss scaling)" : "") +
              (plan_.step.net.fused_bn ? ", fused BatchNorm (cuDNN)" : "") +
              (plan_.step.net.bn_graph == model::GraphBatchNorm::kSmall ? std::string(" (graph API at 14x14 and smaller)")
               : plan_.step.net.bn_graph == model::GraphBatchNorm::kAll ? std::string(" (graph API)")
               : plan_.step.net.bn_graph == model::GraphBatchNorm::kConv
                   ? std::string(" (graph API at 14x14 and smaller; each conv3 writes its BN's statistics)")
                   : std::string()) + (plan_.step.net.stem_max_pool ? ", pinfeed's max pool" : "") +
              (plan_.step.net.fold_grad_add ? ", gradient sums in GEMMs" : "") + (runner_.graphed() ? ", CUDA graph" : "") +
              (dist_.active() ? ", " + std::to_string(dist_.world()) + " ranks (global batch " +
                                    std::to_string(plan_.train_loader.batch_size * dist_.world()) + ")"
                              : "") +
              ", peak lr " + fmt_ms(plan_.schedule.peak_lr()));
  }

  // The range must lie inside one epoch (an evaluation between two would be traced too) and inside the run.
  void check_trace_steps(const StepRange& s) const {
    if (steps_per_epoch_ <= 0) return;  // nothing to train, nothing to trace
    const std::string at = location_of(plan_, "run.trace_steps") + ": run.trace_steps = \"" + s.text() + "\"";
    const int64_t total = plan_.schedule.epochs * steps_per_epoch_;
    if (s.last >= total) {
      throw ConfigError(at + " goes past this run's last step, " + std::to_string(total - 1) + " (" +
                        std::to_string(plan_.schedule.epochs) + " epochs of " + std::to_string(steps_per_epoch_) +
                        " steps, numbered from 0)");
    }
    const int64_t epoch = s.first / steps_per_epoch_;
    if (s.last / steps_per_epoch_ != epoch) {
      throw ConfigError(at + " crosses the end of epoch " + std::to_string(epoch + 1) + " (its steps are " +
                        std::to_string(epoch * steps_per_epoch_) + "-" + std::to_string((epoch + 1) * steps_per_epoch_ - 1) +
                        "); trace steps of one epoch (the evaluation between two would be traced too)");
    }
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

  void save(RunOutputs& out, int64_t epoch, int64_t step_in_epoch, const EpochSoFar& so_far = {},
            const std::string& file = "last.pt") {
    Checkpoint ck = make_checkpoint(runner_, plan_, epoch, step_in_epoch, global_step_, shape());
    ck.classes = sets_.train->folder().classes;  // predictions are named by them
    ck.best_val_top1 = best_top1_;
    ck.epoch_loss_sums = so_far.loss_sums;
    ck.rank_buffers = so_far.buffers;
    save_checkpoint(out.path(file), ck);
  }

  // Every rank's newly found bad files (its shard of the training set, and of the validation set) go to rank 0,
  // which lists each file once in bad_images.tsv and counts the training set's distinct files: a file can turn
  // up on several ranks (each epoch shards a new permutation, and a bad image's replacement may be any sample).
  // Every rank calls it, at the same points.
  void record_bad_images(RunOutputs* out) {
    std::vector<data::BadImage> train = sets_.train->take_new_bad_images(), val;
    if (sets_.val) val = sets_.val->take_new_bad_images();
    if (dist_.active()) {
      const std::vector<std::string> all = dist_.all_gather_bytes(pack_bad_images(train, val));
      train.clear();
      val.clear();
      for (const std::string& bytes : all) unpack_bad_images(bytes, train, val);
    }
    if (!out) return;
    out->bad_images(train);
    out->bad_images(val);
    for (const data::BadImage& b : train) train_bad_.insert(b.path);
  }

  // The run ends while the input pipeline holds a batch back (a sample stuck past data.sample_timeout_s, or a stop
  // asked for while waiting on one): the model is whole after the steps already run, so with one process they are
  // saved as at any stop. With several ranks the others sit in a collective this one will not join: the rank
  // heartbeat names it there, and the last checkpoint written is kept.
  void save_before_stuck_input(RunOutputs* out, int64_t epoch, const std::string& why) noexcept {
    const int64_t pending = epoch_steps_run_ - epoch_steps_done_;  // run on the device, not yet resolved
    global_step_ += pending;
    steps_here_ += pending;
    if (!out) return;
    if (dist_.active() || steps_here_ == 0) {  // at an epoch's first batch: its start is the position
      log::warn(why + ": nothing saved at this step; the last checkpoint written is kept");
      return;
    }
    try {
      if (const std::string bad = runner_.first_non_finite(); !bad.empty()) {
        log::warn(why + ": " + bad + " is no longer finite: nothing saved, the last checkpoint written is kept");
        return;
      }
      record_bad_images(out);
      save(*out, epoch, epoch_steps_run_, epoch_so_far());
      log::warn(why + ": saved " + out->path("last.pt") + " at epoch " + std::to_string(epoch + 1) + " step " +
                std::to_string(epoch_steps_run_) + "; once the file named below reads again (replaced in place: a "
                "resume refuses a changed image count), continue with --resume " + out->path("last.pt"));
    } catch (const std::exception& e) {
      log::warn(why + ": could not save a checkpoint (" + e.what() + "); the last one written is kept");
    }
  }

  double train_loss() {  // the epoch's mean over every rank's steps
    at::Tensor sum = losses_.sum().to(at::kDouble).reshape({1});
    dist_.all_reduce_sum(sum);
    const int64_t steps = losses_.count() * dist_.world();
    return steps ? sum.item<double>() / steps : NAN;
  }

  EpochProgress train_epoch(RunOutputs* out, int64_t epoch, int64_t first) {
    StepLoopOptions loop;
    loop.epoch = epoch;
    loop.first_step = first;
    loop.end_step = steps_per_epoch_;
    loop.warmup_steps = std::min<int64_t>(plan_.loop.warmup_steps, (steps_per_epoch_ - first) / 4);
    loop.max_steps_ahead = plan_.loop.max_steps_ahead;
    loop.stop = &stop_;
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
    p.lr = learning_rate(plan_.schedule, first > 0 ? global_step_ - 1 : global_step_, steps_per_epoch_);
    LossScaler* scaler = runner_.loss_scaler();
    const int64_t skipped_before = scaler ? scaler->skipped_steps() : 0;
    auto rate_t0 = Clock::now();
    int64_t rate_samples = 0;
    const bool log_steps = out && plan_.run.log_steps;  // rank 0 writes steps.jsonl
    if (log_steps) step_losses_.start_epoch(steps_per_epoch_, first);
    epoch_steps_run_ = epoch_steps_done_ = first;
    const StepLoopResult r = run_steps(
        train_feed_, meter_, loop,
        [&](const pipeline::DeviceBatch& batch, int64_t step) {
          p.lr = learning_rate(plan_.schedule, global_step_, steps_per_epoch_);
          const at::Tensor loss = runner_.train_step(batch.images, batch.labels, p.lr);
          losses_.add(loss);
          epoch_steps_run_ = step + 1;
          if (log_steps) step_losses_.add(step, loss, p.lr);
        },
        [&](const pipeline::DeviceBatch& batch, int64_t step) {
          auto records = meter_.take_resolved();
          if (log_steps) out->steps(epoch, step_losses_.join(std::move(records)));
          ++global_step_;
          if (++steps_here_ == stop_after_steps_) stop_.request();
          p.step = epoch_steps_done_ = step + 1;
          rate_samples += batch.size;
          if (dist_.is_main() && progress_.due()) {
            show_progress(epoch, p, rate_samples / seconds_since(rate_t0));
            rate_t0 = Clock::now();
            rate_samples = 0;
          }
        });
    p.step = r.next_step;
    p.stopped = r.stopped;
    p.timing = r.timing;
    if (scaler) {
      p.loss_scale = scaler->current_scale();
      p.skipped_steps = scaler->skipped_steps() - skipped_before;
    }
    auto records = meter_.take_resolved(true);
    if (log_steps) out->steps(epoch, step_losses_.join(std::move(records), /*wait=*/true));
    progress_.end();
    return p;
  }

  void show_progress(int64_t epoch, const EpochProgress& p, double rate) {
    const double left = (steps_per_epoch_ - p.step + (plan_.schedule.epochs - epoch - 1) * steps_per_epoch_);
    std::ostringstream line;
    line << "epoch " << epoch + 1 << "/" << plan_.schedule.epochs << " step " << p.step << "/" << steps_per_epoch_
         << " | " << static_cast<int64_t>(rate) << " samples/s | loss " << fmt_ms(losses_.latest()) << " | lr "
         << p.lr << " | ETA " << eta_text(left * plan_.train_loader.batch_size / rate);
    progress_.show(line.str());
  }

  void report(RunOutputs& out, const EpochResult& er, const EpochProgress& p, const RankSpread& ranks) {
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
               {"workers", train_feed_.workers()}, {"bad_images", p.bad_images}, {"world_size", ranks.world},
               {"global_samples_per_s", num_or_null(ranks.global_samples_per_s)},
               {"samples_per_s_min", num_or_null(ranks.samples_per_s_min)},
               {"samples_per_s_max", num_or_null(ranks.samples_per_s_max)},
               {"wait_ms_mean_min", num_or_null(ranks.wait_min)}, {"wait_ms_mean_max", num_or_null(ranks.wait_max)},
               {"gpu_idle_min", num_or_null(ranks.idle_min)}, {"gpu_idle_max", num_or_null(ranks.idle_max)},
               {"loss_scale", num_or_null(p.loss_scale)}, {"skipped_steps", p.skipped_steps}});
    std::ostringstream line;
    line.precision(4);
    line << "epoch " << er.epoch << "/" << plan_.schedule.epochs << ": train_loss " << er.train_loss << " val_loss "
         << er.val_loss << " top1 " << percent(er.val_top1) << " top5 " << percent(er.val_top5) << " | " << t.samples_per_s
         << " samples/s, " << er.epoch_seconds << " s | wait ms mean " << fmt_ms(t.wait_ms.mean) << " p50 "
         << fmt_ms(t.wait_ms.p50) << " p95 " << fmt_ms(t.wait_ms.p95) << " (loader " << fmt_ms(t.loader_ms.mean)
         << ") | ahead ms " << fmt_ms(t.ahead_ms.mean) << " | h2d ms " << fmt_ms(t.h2d_ms.mean)
         << " | GPU idle " << (std::isnan(t.gpu_idle) ? std::string("n/a") : fmt_ms(100 * t.gpu_idle) + "%")
         << " | mode " << train_feed_.mode() << ", pinned " << train_feed_.pinned_bytes() / (1 << 20) << " MB, RSS "
         << static_cast<int64_t>(host_rss_mb()) << " MB"
         << (p.bad_images ? ", bad image files " + std::to_string(p.bad_images) + " (bad_images.tsv)" : "");
    if (!std::isnan(p.loss_scale)) {
      line << " | loss scale " << p.loss_scale << ", " << p.skipped_steps << " step(s) skipped for overflow";
    }
    if (const auto d = train_feed_.decode_stats()) line << " | nvJPEG since the start: " << gpu::describe(*d);
    if (ranks.world > 1) {
      line << " | " << ranks.world << " ranks: " << static_cast<int64_t>(ranks.global_samples_per_s)
           << " samples/s in all, per rank " << static_cast<int64_t>(ranks.samples_per_s_min) << "-"
           << static_cast<int64_t>(ranks.samples_per_s_max) << ", wait ms " << fmt_ms(ranks.wait_min) << "-"
           << fmt_ms(ranks.wait_max) << ", GPU idle "
           << (std::isnan(ranks.idle_max) ? std::string("n/a")
                                          : fmt_ms(100 * ranks.idle_min) + "-" + fmt_ms(100 * ranks.idle_max) + "%");
    }
    log::info(line.str());
  }

  const Plan& plan_;
  Distributed& dist_;
  StopRequest& stop_;
  Datasets sets_;
  pipeline::Feeder train_feed_;
  std::unique_ptr<pipeline::Feeder> val_feed_;
  StepRunner runner_;
  pipeline::StepMeter meter_;
  LossMeter losses_;
  StepLosses step_losses_;  // run.log_steps, rank 0: each step's loss for steps.jsonl
  Progress progress_;
  int64_t steps_per_epoch_ = 0;
  int64_t global_step_ = 0;
  int64_t stop_after_steps_ = 0;  // TrainArgs::stop_after_steps
  int64_t steps_here_ = 0;        // steps this process has run
  // Steps of the current epoch handed to the device, and those whose results came back (fewer by the steps
  // run ahead, pipeline.max_steps_ahead): a checkpoint taken when the input stops holds the first.
  int64_t epoch_steps_run_ = 0, epoch_steps_done_ = 0;
  std::optional<double> resumed_loss_sum_;  // this rank's loss sum of the resumed epoch before the resume
  std::unordered_set<std::string> train_bad_;  // rank 0: the training set's bad files found by any rank
  std::unique_ptr<StepTrace> trace_;  // run.trace_steps, rank 0
  double best_top1_ = NAN;  // the best whole validation's top-1 so far (best.pt's), resumes included
};

// The run folder a checkpoint path lies in ("." for a bare file name).
std::string run_dir_of(const std::string& checkpoint) {
  const std::string dir = std::filesystem::path(checkpoint).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

TrainResult train(const Plan& plan, const TrainArgs& args, StopRequest& stop) {
  Distributed dist(plan.dist_env, plan.device, name_of(plan.backend), plan.dist.timeout());
  return dist.guard([&] {
    dist.agree("config", to_toml(plan), "config");
    configure_backend(plan);
    Training training(plan, open_datasets(plan, plan.train.eval), dist, stop, args.stop_after_steps);
    TrainResult result;
    result.main_rank = dist.is_main();
    int64_t start_epoch = 0, start_step = 0;
    // Rank 0 writes the run folder and holds its lock until the run ends: a second pinfeed on the same folder
    // stops at once (exit 2) instead of writing the same files.
    std::optional<RunLock> lock;
    auto own_folder = [&](const std::string& dir) {
      lock.emplace(dir);
      if (!log::tee((std::filesystem::path(dir) / "run.log").string())) {
        throw OutputError("cannot open " + (std::filesystem::path(dir) / "run.log").string() + " for appending");
      }
      // The temp files of writes cut short in runs nobody holds (a first checkpoint killed mid-write leaves a
      // folder that can never be resumed, so its own resume would never clean it).
      for (const std::string& removed : remove_abandoned_temp_files(plan.run.dir)) {
        log::warn("removed " + removed + ": the temp file of a write cut short (kill -9, power loss) in a run no "
                  "process holds");
      }
    };
    std::optional<RunOutputs> out;
    std::string checkpoint_path;
    if (!args.resume.empty()) {
      // Rank 0 reads the checkpoint; the other ranks get its state by broadcast (no shared disk needed).
      std::optional<Checkpoint> checkpoint;
      if (dist.is_main()) {
        checkpoint_path = resume_path(plan.run.dir, plan.run.name, args.resume);  // refuses a folder pinfeed did not write
        own_folder(run_dir_of(checkpoint_path));
        checkpoint = load_checkpoint(checkpoint_path);
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
        own_folder(dir);
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
