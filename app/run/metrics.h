// The metrics of a run, named and explained once: per epoch (metrics.jsonl and metrics.csv: the CSV's columns,
// `pinfeed help metrics` and the check that the trainer's rows carry exactly these come from kEpochMetrics) and
// per step (steps.jsonl, with run.log_steps: kStepMetrics). Epochs are numbered from 1 in every file, steps
// from 0 within their epoch. Accuracies are fractions in the files (0.671 = 67.1%); the log line shows percent.
#pragma once

namespace pinfeed::app {

struct Metric {
  const char* name;
  const char* meaning;
};

// In column order. Figures that do not apply (GPU figures on the CPU) are null in JSON and empty in CSV, never 0.
// Per-step figures are rank 0's unless the name says min/max (every rank's) or global.
inline constexpr Metric kEpochMetrics[] = {
    {"epoch", "epoch number, from 1 (as in steps.jsonl)"},
    {"lr", "learning rate of the epoch's last step"},
    {"image_size", "the epoch's training crop side, px (data.image_size or its schedule)"},
    {"train_loss", "mean training loss of the epoch's steps (label smoothing included)"},
    {"val_loss", "mean validation cross-entropy, without smoothing"},
    {"val_top1", "validation top-1 accuracy, a fraction in [0, 1] (0.671 = 67.1%; the log line shows percent)"},
    {"val_top5", "validation top-5 accuracy, a fraction in [0, 1] (as val_top1)"},
    {"ema_val_loss", "train.ema: val_loss of the EMA of the weights (null otherwise)"},
    {"ema_val_top1", "train.ema: val_top1 of the EMA of the weights (null otherwise)"},
    {"ema_val_top5", "train.ema: val_top5 of the EMA of the weights (null otherwise)"},
    {"best_weights", "\"raw\" or \"ema\": which weights made this epoch's evaluation the best so far (best.pt holds "
                     "them as `model`); null when it is not"},
    {"samples_per_s", "training samples per second of this rank, warm-up steps excluded, synchronised wall time"},
    {"epoch_s", "wall time of the epoch, evaluation included, s"},
    {"wall_s", "seconds since the process started, when the epoch's row is written (start-up, graph captures, "
               "evaluation and checkpoint saves included): time to accuracy"},
    {"eval_s", "part of epoch_s spent evaluating, s"},
    {"capture_s", "train.cuda_graph: part of epoch_s spent capturing a graph for a batch shape new to the run (a new "
                  "side's first full batch, cuDNN's plan search included), s"},
    {"steps", "timed steps of the epoch (warm-up excluded)"},
    {"warmup_steps", "first steps of the epoch left out of the timing (pipeline.warmup_steps)"},
    {"wait_ms_mean", "host time the training loop waited for the next device-ready batch, mean, ms"},
    {"wait_ms_p50", "the same, median, ms"},
    {"wait_ms_p95", "the same, 95th percentile, ms"},
    {"loader_ms_mean", "part of the wait spent because the CPU pipeline had no batch ready, mean, ms"},
    {"ahead_ms_mean", "time the host waited because it ran pipeline.max_steps_ahead steps ahead of the GPU, mean, ms"},
    {"h2d_ms_mean", "host-to-device copy time from CUDA events, mean, ms"},
    {"compute_ms_mean", "forward + backward + optimizer on the compute stream from CUDA events, mean, ms"},
    {"gpu_idle", "fraction of the epoch's compute span with no step running on the GPU"},
    {"mode", "the transfer mode that really ran (pageable after a pinned-memory fallback)"},
    {"pinned_mb", "page-locked host memory of the batch ring, MiB"},
    {"host_rss_mb", "resident memory of the process at the epoch's end, MiB"},
    {"workers", "decode threads of this rank"},
    {"bad_images", "distinct bad files of the training set found so far, by any rank"},
    {"world_size", "ranks (processes) in the run"},
    {"global_samples_per_s", "samples per second of all ranks together"},
    {"samples_per_s_min", "slowest rank's samples per second"},
    {"samples_per_s_max", "fastest rank's samples per second"},
    {"wait_ms_mean_min", "smallest rank's mean wait, ms"},
    {"wait_ms_mean_max", "largest rank's mean wait, ms"},
    {"gpu_idle_min", "smallest rank's GPU idle fraction"},
    {"gpu_idle_max", "largest rank's GPU idle fraction"},
    {"loss_scale", "fp16: the dynamic loss scale at the epoch's end (null otherwise)"},
    {"skipped_steps", "fp16: steps skipped for inf/NaN gradients so far"},
};

// steps.jsonl, one row per training step of rank 0 (run.log_steps = true). Written a few steps late: the loss
// stays on the device until a batch of steps is copied at once, so that logging never makes the host wait.
inline constexpr Metric kStepMetrics[] = {
    {"epoch", "epoch number, from 1 (as in metrics.jsonl)"},
    {"step", "step within the epoch, from 0"},
    {"loss", "the step's training loss on rank 0's batch (label smoothing included; null if not finite)"},
    {"lr", "learning rate the step used"},
    {"samples", "samples in rank 0's batch"},
    {"warmup", "true for the epoch's first steps, left out of the epoch's timing"},
    {"wait_ms", "host time the training loop waited for the batch, ms"},
    {"loader_ms", "part of the wait spent because the CPU pipeline had no batch ready, ms"},
    {"ahead_ms", "time the host waited because it ran ahead of the GPU, ms (null on the CPU)"},
    {"h2d_ms", "host-to-device copy time from CUDA events, ms (null on the CPU)"},
    {"compute_ms", "the step on the compute stream, ms (CPU: wall time)"},
};

}  // namespace pinfeed::app
