#include "app/plan/datasets.h"

#include "data/dataset/image_folder.h"

namespace pinfeed::app {

Datasets open_datasets(const Plan& plan, bool with_val) {
  Datasets d;
  auto train_folder = data::scan_image_folder(plan.dataset.root, plan.dataset.train_split);
  const auto found = static_cast<int64_t>(train_folder.classes.size());
  d.num_classes = plan.model.num_classes > 0 ? plan.model.num_classes : found;
  if (d.num_classes < found) {
    throw ConfigError(location_of(plan, "model.num_classes") + ": model.num_classes = " + std::to_string(d.num_classes) +
                      " but " + plan.dataset.root + " has " + std::to_string(found) + " classes");
  }
  if (d.num_classes > found && !plan.model.allow_extra_classes) {  // a config written for other data
    throw ConfigError(location_of(plan, "model.num_classes") + ": model.num_classes = " + std::to_string(d.num_classes) +
                      " but " + train_folder.root + " has " + std::to_string(found) +
                      " class folders: give model.num_classes=0 (the folders' count), or model.allow_extra_classes=true "
                      "to train outputs no label uses");
  }
  if (with_val) {
    auto val_folder = data::scan_image_folder(plan.dataset.root, plan.dataset.val_split, &train_folder.classes);
    d.val = std::make_shared<data::Dataset>(std::move(val_folder), plan.transform, false, plan.dataset.on_bad_image);
  }
  d.train = std::make_shared<data::Dataset>(std::move(train_folder), plan.transform, true, plan.dataset.on_bad_image);
  return d;
}

}  // namespace pinfeed::app
