// On a CPU a config written for the GPU still runs (a smoke run of a recipe): what only CUDA runs gives way to
// the CPU's equivalent, one line each, written into the plan so that the run folder's config records what ran.
#pragma once

#include "app/plan/plan.h"

namespace pinfeed::app {

// The transfer flags that need CUDA (a preset's, or written one by one) give way to mode pageable, said once.
void fall_back_to_pageable(Plan& plan);
// train.precision, train.cuda_graph, model.fused_bn, bn_graph, max_pool, pad_input and data.decoder "nvjpeg".
void fall_back_on_the_cpu(Plan& plan, PlanUse use);

}  // namespace pinfeed::app
