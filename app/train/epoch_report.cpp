// The opening line, the progress line and each epoch's report of pinfeed train.
#include "app/train/epoch_report.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/format.h"
#include "app/train/progress.h"
#include "common/log.h"

namespace pinfeed::app {
namespace {

// An accuracy (a fraction, as the files hold it) as the log line shows it: "67.10%".
std::string accuracy(double fraction) { return common::percent(fraction, 2); }

}  // namespace

RankSpread spread(engine::Distributed& dist, const pipeline::EpochTiming& t) {
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

namespace {
// "224 px" or "160*12, 192*4 px by epoch", then validation's side when it differs.
std::string sides_text(const Plan& plan) {
  const data::TransformOptions& t = plan.transform;
  std::vector<int> by_epoch;
  for (int64_t e = 0; e < plan.schedule.epochs; ++e) by_epoch.push_back(data::side_of(t, true, e));
  std::string text = t.schedule.active() ? data::sides_text(by_epoch) + " px by epoch" : std::to_string(t.size) + " px";
  const int val = data::side_of(t, false, 0);
  if (plan.train.eval && (t.schedule.active() || val != t.size)) text += ", validation " + std::to_string(val) + " px";
  return text;
}
}  // namespace

void announce_run(const std::string& run_dir, const Plan& plan, const Datasets& sets, const pipeline::Feeder& feed,
                  int64_t steps_per_epoch, bool graphed, const engine::Distributed& dist) {
  log::info("run " + run_dir + ": " + std::to_string(sets.train->size()) + " train images, " +
            std::to_string(sets.num_classes) + " classes, device " + plan.device.str() + ", mode " +
            feed.mode() + " (transfer " + pipeline::to_string(plan.pipeline.transfer_dtype) + "), " +
            common::count_of(feed.workers(), "worker") +
            (plan.transform.gpu_decode ? " reading files for the GPU's JPEG decoder (nvJPEG), " : " decoding, ") + std::to_string(steps_per_epoch) +
            " steps/epoch, image size " + sides_text(plan) + ", precision " + name_of(plan.step.precision) + (plan.step.precision == engine::Precision::kFp16 ? " (loss scaling)" : "") +
            (plan.step.net.fused_bn ? ", fused BatchNorm (cuDNN)" : "") +
            (plan.step.net.bn_graph == model::GraphBatchNorm::kSmall ? std::string(" (graph API at 14x14 and smaller)")
             : plan.step.net.bn_graph == model::GraphBatchNorm::kAll ? std::string(" (graph API)")
             : plan.step.net.bn_graph == model::GraphBatchNorm::kConv
                 ? std::string(" (graph API at 14x14 and smaller; each conv3 writes its BN's statistics)")
                 : std::string()) + (plan.step.net.stem_max_pool ? ", pinfeed's max pool" : "") +
            (plan.step.net.fold_grad_add ? ", gradient sums in GEMMs" : "") + (graphed ? ", CUDA graph" : "") +
            (dist.active() ? ", " + std::to_string(dist.world()) + " ranks (global batch " +
                                  std::to_string(plan.train_loader.batch_size * dist.world()) + ")"
                            : "") +
            ", " + name_of(plan.step.optimizer.kind) + ", peak lr " + common::fmt_ms(plan.schedule.peak_lr()) +
            (plan.step.ema.enabled ? ", EMA of the weights (decay " + c10::str(plan.step.ema.decay) +
                                         (plan.step.ema.warmup ? ", warm-up" : "") + ")"
                                   : ""));
}

std::string progress_line(const Plan& plan, int64_t epoch, const EpochProgress& p, int64_t steps_per_epoch,
                          double rate, double loss) {
  const double left = (steps_per_epoch - p.step + (plan.schedule.epochs - epoch - 1) * steps_per_epoch);
  std::ostringstream line;
  line << "epoch " << epoch + 1 << "/" << plan.schedule.epochs << " step " << p.step << "/" << steps_per_epoch << " | "
       << (std::isnan(rate) ? std::string("warming up") : std::to_string(static_cast<int64_t>(rate)) + " samples/s")
       << " | loss " << common::fmt_ms(loss) << " | lr " << p.lr << " | ETA "
       << (std::isnan(rate) ? std::string("after the warm-up") : eta_text(left * plan.train_loader.batch_size / rate));
  return line.str();
}

namespace {
const auto kProcessStart = std::chrono::steady_clock::now();  // set as the program loads, before main
double seconds_since_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - kProcessStart).count();
}
}  // namespace

void report_epoch(RunOutputs& out, const Plan& plan, const pipeline::Feeder& feed, const EpochResult& er,
                  const EpochProgress& p, const RankSpread& ranks) {
  const pipeline::EpochTiming& t = p.timing;
  out.epoch({{"epoch", er.epoch}, {"lr", p.lr}, {"image_size", er.image_size}, {"train_loss", common::num_or_null(er.train_loss)},
             {"val_loss", common::num_or_null(er.val_loss)}, {"val_top1", common::num_or_null(er.val_top1)},
             {"val_top5", common::num_or_null(er.val_top5)}, {"ema_val_loss", common::num_or_null(er.ema_val_loss)},
             {"ema_val_top1", common::num_or_null(er.ema_val_top1)}, {"ema_val_top5", common::num_or_null(er.ema_val_top5)},
             {"best_weights", er.best_weights.empty() ? nlohmann::json() : nlohmann::json(er.best_weights)},
             {"samples_per_s", common::num_or_null(t.samples_per_s)},
             {"epoch_s", er.epoch_seconds}, {"wall_s", seconds_since_start()},
             {"eval_s", common::num_or_null(er.eval_seconds)},
             {"capture_s", common::num_or_null(p.captured ? p.captured->seconds : NAN)}, {"steps", t.steps}, {"warmup_steps", t.warmup_steps},
             {"wait_ms_mean", common::num_or_null(t.wait_ms.mean)}, {"wait_ms_p50", common::num_or_null(t.wait_ms.p50)},
             {"wait_ms_p95", common::num_or_null(t.wait_ms.p95)}, {"loader_ms_mean", common::num_or_null(t.loader_ms.mean)},
             {"ahead_ms_mean", common::num_or_null(t.ahead_ms.mean)}, {"h2d_ms_mean", common::num_or_null(t.h2d_ms.mean)},
             {"compute_ms_mean", common::num_or_null(t.compute_ms.mean)}, {"gpu_idle", common::num_or_null(t.gpu_idle)},
             {"mode", feed.mode()},
             {"pinned_mb", static_cast<double>(feed.pinned_bytes()) / (1 << 20)}, {"host_rss_mb", host_rss_mb()},
             {"workers", feed.workers()}, {"bad_images", p.bad_images}, {"world_size", ranks.world},
             {"global_samples_per_s", common::num_or_null(ranks.global_samples_per_s)},
             {"samples_per_s_min", common::num_or_null(ranks.samples_per_s_min)},
             {"samples_per_s_max", common::num_or_null(ranks.samples_per_s_max)},
             {"wait_ms_mean_min", common::num_or_null(ranks.wait_min)}, {"wait_ms_mean_max", common::num_or_null(ranks.wait_max)},
             {"gpu_idle_min", common::num_or_null(ranks.idle_min)}, {"gpu_idle_max", common::num_or_null(ranks.idle_max)},
             {"loss_scale", common::num_or_null(p.loss_scale)}, {"skipped_steps", p.skipped_steps}});
  std::ostringstream line;
  line.precision(4);
  line << "epoch " << er.epoch << "/" << plan.schedule.epochs << " (" << er.image_size << " px): train_loss " << er.train_loss;
  if (plan.train.eval) {  // train.eval = false: nothing to say about what was not measured
    line << " val_loss " << er.val_loss << " top1 " << accuracy(er.val_top1) << " top5 " << accuracy(er.val_top5);
    if (plan.step.ema.enabled) {
      line << ", EMA val_loss " << er.ema_val_loss << " top1 " << accuracy(er.ema_val_top1) << " top5 "
           << accuracy(er.ema_val_top5);
    }
    if (!er.best_weights.empty()) {
      line << " (best so far, " << (er.best_weights == "ema" ? "the EMA's" : "the raw") << " weights: best.pt)";
    }
  }
  line << " | " << t.samples_per_s
       << " samples/s, " << er.epoch_seconds << " s | wait ms mean " << common::fmt_ms(t.wait_ms.mean) << " p50 "
       << common::fmt_ms(t.wait_ms.p50) << " p95 " << common::fmt_ms(t.wait_ms.p95) << " (loader " << common::fmt_ms(t.loader_ms.mean)
       << ") | ahead ms " << common::fmt_ms(t.ahead_ms.mean) << " | h2d ms " << common::fmt_ms(t.h2d_ms.mean)
       << " | GPU idle " << (std::isnan(t.gpu_idle) ? std::string("n/a") : common::fmt_ms(100 * t.gpu_idle) + "%")
       << " | mode " << feed.mode() << ", pinned " << feed.pinned_bytes() / (1 << 20) << " MB, RSS "
       << static_cast<int64_t>(host_rss_mb()) << " MB"
       << (p.bad_images ? ", bad image files " + std::to_string(p.bad_images) + " (bad_images.tsv)" : "");
  if (p.captured && p.captured->seconds > 0) {
    line << " | CUDA graph captured for a new batch shape in " << p.captured->seconds << " s, GPU memory reserved +"
         << p.captured->bytes / (1 << 20) << " MiB";
  }
  if (!std::isnan(p.loss_scale)) {
    line << " | loss scale " << p.loss_scale << ", " << p.skipped_steps << " step(s) skipped for overflow";
  }
  if (const auto d = feed.decode_stats()) line << " | nvJPEG since the start: " << pipeline::describe(*d);
  if (ranks.world > 1) {
    line << " | " << ranks.world << " ranks: " << static_cast<int64_t>(ranks.global_samples_per_s)
         << " samples/s in all, per rank " << static_cast<int64_t>(ranks.samples_per_s_min) << "-"
         << static_cast<int64_t>(ranks.samples_per_s_max) << ", wait ms " << common::fmt_ms(ranks.wait_min) << "-"
         << common::fmt_ms(ranks.wait_max) << ", GPU idle "
         << (std::isnan(ranks.idle_max) ? std::string("n/a")
                                        : common::fmt_ms(100 * ranks.idle_min) + "-" + common::fmt_ms(100 * ranks.idle_max) + "%");
  }
  log::info(line.str());
}

void report_end(const RunOutputs& out, const Plan& plan, const std::string& run_dir, const EpochResult& last,
                double seconds, bool resumed) {
  std::string line = "final: epoch " + std::to_string(last.epoch) + "/" + std::to_string(plan.schedule.epochs);
  if (plan.train.eval) {
    line += " val_top1 " + accuracy(last.val_top1) + " val_top5 " + accuracy(last.val_top5);
    if (plan.step.ema.enabled) line += " ema_val_top1 " + accuracy(last.ema_val_top1);
  }
  line += " train_loss " + common::fixed(last.train_loss, 4);
  // The best epoch is the last row that best.pt was written for.
  nlohmann::json best;
  std::ifstream rows(out.path("metrics.jsonl"));
  for (std::string text; std::getline(rows, text);) {
    const auto row = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (row.is_object() && row.value("best_weights", nlohmann::json()).is_string()) best = row;
  }
  if (best.is_object()) {
    const bool ema = best["best_weights"] == "ema";
    const nlohmann::json top1 = best[ema ? "ema_val_top1" : "val_top1"];
    line += " | best: epoch " + best["epoch"].dump() + ", val_top1 " +
            accuracy(top1.is_number() ? top1.get<double>() : NAN) + " (" + (ema ? "the EMA's" : "the raw") +
            " weights) in " + out.path("best.pt");
  } else {
    line += plan.train.eval ? " | no best.pt (no whole evaluation)" : " | not evaluated (train.eval = false), no best.pt";
  }
  line += " | took " + eta_text(seconds) + (resumed ? " since the resume" : "") + " | run " + run_dir;
  log::info(line);
}

}  // namespace pinfeed::app
