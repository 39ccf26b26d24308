// pinfeed._C: the Feed (feed.h) for Python, which pinfeed/__init__.py wraps as pinfeed.ImageFolderLoader, and the
// engine's checkpoint reader (pinfeed.load_weights).
// A call that may wait (the folder scan, start, next, close) releases the GIL. While it waits, the loader asks its
// stop poll every data::kStopPoll; on the waiting thread the poll takes the GIL for a moment and runs Python's
// signal handlers, so that Ctrl-C raises KeyboardInterrupt out of a wait on a slow or stuck worker, as it stops
// `pinfeed train`.
#include <torch/csrc/utils/pybind.h>  // pybind11 (torch's own copy) and at::Tensor <-> torch.Tensor

#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "python/feed.h"
#include "data/error.h"
#include "data/limits.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/errors.h"
#include "pipeline/augment/options.h"
#include "gpu/gpu.h"
#include "pipeline/decode/jpeg_decoder.h"

namespace py = pybind11;

namespace pinfeed::python {
namespace {

// True on a thread while it waits inside one of this module's calls with the GIL released: only there may the stop
// poll take the GIL back (the Feeder's copier thread asks the same poll, and must not).
thread_local bool t_waiting = false;

// The GIL released for a call that may wait, and the thread marked as waiting.
class Waiting {
 public:
  Waiting() {
    // A Python signal handler run by the stop poll that calls into a loader again would wait on the locks its
    // own thread holds.
    if (t_waiting) throw std::runtime_error("a pinfeed loader was called by a signal handler during a call of it");
    release_.emplace();
    t_waiting = true;
  }
  ~Waiting() { t_waiting = false; }  // then release_ takes the GIL back

 private:
  std::optional<py::gil_scoped_release> release_;
};

// LoaderOptions::stop_requested: true once Python's signal handlers raised (KeyboardInterrupt for Ctrl-C, which
// stays pending on the waiting thread), and from then on for every thread of this loader until the call returns.
std::function<bool()> python_stop(std::shared_ptr<std::atomic<bool>> stopped) {
  return [stopped] {
    if (stopped->load()) return true;
    if (!t_waiting) return false;
    const PyGILState_STATE gil = PyGILState_Ensure();
    const bool raised = PyErr_CheckSignals() != 0;  // runs the handlers on the main thread only
    PyGILState_Release(gil);
    if (raised) stopped->store(true);
    return raised;
  };
}

class PyFeed {
 public:
  explicit PyFeed(const py::kwargs& kwargs);

  void start(int64_t epoch, int64_t first_batch) {
    waiting([&] { feed().start(epoch, first_batch); });
  }
  py::object next() {
    std::optional<FeedBatch> batch = waiting([&] {
      Feed& f = feed();
      std::optional<c10::Stream> consumer;
      if (f.device().is_cuda()) consumer = gpu::current_stream(f.device());  // this thread's current stream
      return f.next(consumer);
    });
    if (!batch) return py::none();
    return py::make_tuple(batch->images, batch->labels);
  }
  void close() {
    waiting([&] { feed_.reset(); });
  }
  Feed& feed() {
    if (!feed_) throw std::runtime_error("this loader is closed");
    return *feed_;
  }

 private:
  // Runs body with the GIL released; a stop the poll saw comes out as the Python error its handler raised.
  template <class Body>
  auto waiting(Body&& body) -> decltype(body()) {
    try {
      Waiting w;
      std::lock_guard<std::mutex> lock(calls_);  // one call at a time, taken without the GIL
      return body();
    } catch (const data::Interrupted&) {
      stopped_->store(false);  // the next call waits afresh
      if (!PyErr_Occurred()) PyErr_SetNone(PyExc_KeyboardInterrupt);
      throw py::error_already_set();
    }
  }

  std::shared_ptr<std::atomic<bool>> stopped_ = std::make_shared<std::atomic<bool>>(false);
  std::mutex calls_;
  std::unique_ptr<Feed> feed_;
};

// kwargs[key] as T, removed from kwargs so that what is left over is reported.
template <class T>
T take(py::dict& kwargs, const char* key) {
  if (!kwargs.contains(key)) throw py::type_error(std::string("missing option ") + key);
  T value = kwargs[key].cast<T>();
  PyDict_DelItemString(kwargs.ptr(), key);
  return value;
}

template <class T>
void take3(py::dict& kwargs, const char* key, T (&out)[3]) {
  const auto values = take<std::vector<T>>(kwargs, key);
  if (values.size() != 3) throw py::value_error(std::string(key) + " must have 3 values (R, G, B)");
  for (int c = 0; c < 3; ++c) out[c] = values[c];
}

PyFeed::PyFeed(const py::kwargs& given) {
  auto k = py::reinterpret_steal<py::dict>(PyDict_Copy(given.ptr()));  // take() empties it
  FeedOptions o;
  o.root = take<std::string>(k, "root");
  o.classes = take<std::vector<std::string>>(k, "classes");
  o.train = take<bool>(k, "train");
  o.decoder = take<std::string>(k, "decoder");
  o.device = c10::Device(take<std::string>(k, "device"));
  o.channels_last = take<bool>(k, "channels_last");
  const std::string dtype = take<std::string>(k, "dtype");
  o.dtype = dtype == "float32"   ? at::kFloat
            : dtype == "float16" ? at::kHalf
            : dtype == "uint8"   ? at::kByte
                                 : at::kDouble;  // refused by Feed
  const std::string bad = take<std::string>(k, "on_bad_image");
  if (bad != "skip" && bad != "fail") throw py::value_error("on_bad_image must be \"skip\" or \"fail\"");
  o.on_bad_image = bad == "skip" ? data::BadImagePolicy::kSkip : data::BadImagePolicy::kFail;
  o.stall_sample = take<int64_t>(k, "stall_sample");

  data::TransformOptions& t = o.transform;
  const auto sides = take<std::vector<int>>(k, "image_sizes");  // by epoch, the last for every later one
  if (sides.empty()) throw py::value_error("image_size must give at least one side");
  t.size = sides.front();
  if (sides.size() > 1) t.schedule.by_epoch = sides;
  t.val_resize_ratio = take<double>(k, "val_resize_ratio");
  const auto scale = take<std::pair<double, double>>(k, "scale");
  const auto ratio = take<std::pair<double, double>>(k, "ratio");
  t.scale_min = scale.first, t.scale_max = scale.second;
  t.ratio_min = ratio.first, t.ratio_max = ratio.second;
  t.hflip = take<bool>(k, "hflip");
  t.crop_decode = take<bool>(k, "crop_decode");
  t.max_image_pixels = take<int64_t>(k, "max_image_pixels");
  t.max_file_bytes = take<int64_t>(k, "max_file_bytes");
  t.nvjpeg_share = take<double>(k, "nvjpeg_share");
  take3(k, "mean", t.mean);
  take3(k, "std", t.std);

  // The bounds of each are pinfeed/__init__.py's to check; the texts parse here, as the config keys' do.
  namespace augment = pipeline::augment;
  augment::AugmentOptions& a = o.augment;
  try {
    a.auto_augment = augment::parse_policy(take<std::string>(k, "auto_augment"));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("auto_augment ") + e.what());
  }
  try {
    a.fill = augment::parse_fill(take<std::string>(k, "augment_fill"));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("augment_fill ") + e.what());
  }
  a.interpolation = take<std::string>(k, "augment_interpolation") == "bilinear" ? augment::Interpolation::kBilinear
                                                                                : augment::Interpolation::kNearest;
  a.erasing_p = take<double>(k, "random_erasing");
  a.erasing_value = take<std::string>(k, "random_erasing_value") == "random" ? augment::ErasingValue::kRandom
                                                                             : augment::ErasingValue::kZero;
  a.mixup_alpha = take<double>(k, "mixup_alpha");
  a.cutmix_alpha = take<double>(k, "cutmix_alpha");
  a.mix_prob = take<double>(k, "mixup_prob");
  a.switch_prob = take<double>(k, "mixup_switch_prob");
  a.label_smoothing = take<double>(k, "label_smoothing");

  data::LoaderOptions& l = o.loader;
  l.batch_size = take<int64_t>(k, "batch_size");
  l.workers = take<int>(k, "threads");
  l.host_ranks = take<int>(k, "host_ranks");
  l.prefetch_batches = take<int>(k, "prefetch_batches");
  l.shuffle = take<bool>(k, "shuffle");
  l.drop_last = take<bool>(k, "drop_last");
  l.seed = take<uint64_t>(k, "seed");
  l.shard_rank = take<int>(k, "rank");
  l.shards = take<int>(k, "world_size");
  l.sample_timeout_s = take<double>(k, "sample_timeout_s");
  l.stop_requested = python_stop(stopped_);
  if (!k.empty()) throw py::type_error("unknown option " + py::str(k.begin()->first).cast<std::string>());
  waiting([&] { feed_ = std::make_unique<Feed>(std::move(o)); });  // scans the folder: seconds for ImageNet
}

}  // namespace
}  // namespace pinfeed::python

PYBIND11_MODULE(_C, m) {
  using pinfeed::python::PyFeed;
  m.doc() = "pinfeed's C++ feed; use pinfeed.ImageFolderLoader";
  // DataError: bad or missing input (an unreadable image with on_bad_image="fail", an empty folder); the CLI's exit 3.
  auto& data_error = py::register_exception<pinfeed::DataError>(m, "DataError", PyExc_RuntimeError);
  // Registered after DataError, so tried before it: a stuck sample is a DataError too.
  py::register_exception<pinfeed::data::StuckSample>(m, "StuckSampleError", data_error.ptr());
  // CheckpointError: a file that is no checkpoint or state dict (missing, a folder, another pickle): ValueError.
  py::register_exception<pinfeed::engine::CheckpointError>(m, "CheckpointError", PyExc_ValueError);
  m.attr("torch_version") = PINFEED_TORCH_VERSION;
  {
    // `pinfeed train`'s bounds for the same options: pinfeed/__init__.py checks the loader's arguments against them.
    namespace data = pinfeed::data;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    py::dict limits;
    limits["min_image_size"] = data::kMinImageSize;
    limits["max_image_size"] = data::kMaxImageSize;
    limits["max_epochs"] = data::kMaxEpochs;
    limits["max_batch_size"] = data::kMaxBatchSize;
    limits["max_prefetch_batches"] = data::kMaxPrefetchBatches;
    limits["max_threads"] = data::max_workers(cores);
    limits["threads_per_core"] = data::kMaxWorkersPerCore;
    limits["cores"] = cores;
    limits["max_ranks"] = data::kMaxRanks;
    limits["max_megabytes"] = data::kMaxMegabytes;
    limits["min_scale"] = data::kMinScale;
    limits["min_val_resize_ratio"] = data::kMinValResizeRatio;
    limits["max_sample_timeout_s"] = data::kMaxSampleTimeoutS;
    limits["max_mix_alpha"] = pinfeed::pipeline::augment::kMaxMixAlpha;
    m.attr("limits") = limits;
  }
  m.def("nvjpeg_unavailable_reason", [] { return pinfeed::pipeline::JpegDecoder::unavailable_reason(); },
        "Why decoder=\"nvjpeg\" cannot run here (\"\" when it can).");

  // The weights of a pinfeed checkpoint or a torch.save'd state dict, read without unpickling code (a pickle that
  // names anything but tensors, numbers and strings is refused): what `pinfeed eval` and `train.init_from` read.
  m.def("load_weights", [](const std::string& path) {
    pinfeed::engine::Weights w;
    {
      py::gil_scoped_release release;
      w = pinfeed::engine::load_weights(path);
    }
    py::dict out;
    out["model"] = w.model;
    out["classes"] = w.classes;
    out["config"] = w.config;
    out["checkpoint"] = w.checkpoint;
    return out;
  }, py::arg("path"));

  py::class_<PyFeed>(m, "Feed")
      .def(py::init<const py::kwargs&>())
      .def("start", &PyFeed::start, py::arg("epoch"), py::arg("first_batch"))
      .def("next", &PyFeed::next)
      .def("close", &PyFeed::close)
      .def_property_readonly("batches_per_epoch", [](PyFeed& f) { return f.feed().batches_per_epoch(); })
      .def_property_readonly("samples_per_epoch", [](PyFeed& f) { return f.feed().samples_per_epoch(); })
      .def_property_readonly("dataset_size", [](PyFeed& f) { return f.feed().dataset_size(); })
      .def_property_readonly("classes", [](PyFeed& f) { return f.feed().classes(); })
      .def_property_readonly("workers", [](PyFeed& f) { return f.feed().workers(); })
      .def_property_readonly("decoder", [](PyFeed& f) { return f.feed().gpu_decode() ? "nvjpeg" : "cpu"; })
      .def_property_readonly("mode", [](PyFeed& f) { return f.feed().mode(); })
      .def("queue_depth", [](PyFeed& f) {
        const auto q = f.feed().queue_depth();
        return std::make_tuple(q.copied, q.decoded, q.loading);
      })
      .def("take_bad_images", [](PyFeed& f) { return f.feed().take_bad_images(); })
      .def("release_stall", [](PyFeed& f) { f.feed().release_stall(); });
}
