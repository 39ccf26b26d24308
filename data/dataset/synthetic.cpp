#include "data/dataset/synthetic.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "data/dataset/image_folder.h"  // printable
#include "data/transform/sample_rng.h"

namespace pinfeed::data {
namespace fs = std::filesystem;
namespace {

constexpr int kShapes = 8;
constexpr int kColours = 12;
// Drawing one image holds, at its peak, the 8-bit image and three float32 copies (add_texture): about 39 bytes a
// pixel. The threads together stay under 2 GiB, so a large --size on many cores cannot bring the OOM killer.
constexpr int64_t kDrawingBytesPerPixel = 3 + 3 * 12;
constexpr int64_t kDrawingBudget = int64_t{2} << 30;

cv::Scalar class_colour(int hue_index, SampleRng& rng) {
  const double hue = std::fmod(hue_index * (180.0 / kColours) + rng.uniform(-5, 5) + 180.0, 180.0);
  cv::Mat hsv(1, 1, CV_8UC3, cv::Scalar(hue, 150 + rng.below(100), 150 + rng.below(100))), bgr;
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
  const auto px = bgr.at<cv::Vec3b>(0, 0);
  return cv::Scalar(px[0], px[1], px[2]);
}

void draw_shape(cv::Mat& img, int shape, cv::Point2d centre, double radius, double angle, cv::Scalar colour) {
  const int thick = std::max(1, static_cast<int>(radius / 5));
  auto polygon = [&](int corners, double inner) {
    std::vector<cv::Point> pts;
    const int n = inner > 0 ? corners * 2 : corners;
    for (int i = 0; i < n; ++i) {
      const double r = (inner > 0 && i % 2) ? radius * inner : radius;
      const double a = angle + 2 * M_PI * i / n;
      pts.emplace_back(static_cast<int>(centre.x + r * std::cos(a)), static_cast<int>(centre.y + r * std::sin(a)));
    }
    cv::fillPoly(img, std::vector<std::vector<cv::Point>>{pts}, colour, cv::LINE_AA);
  };
  switch (shape) {
    case 0: cv::circle(img, centre, static_cast<int>(radius), colour, cv::FILLED, cv::LINE_AA); break;
    case 1: polygon(4, 0); break;                // square
    case 2: polygon(3, 0); break;                // triangle
    case 3: polygon(5, 0.45); break;             // star
    case 4: cv::circle(img, centre, static_cast<int>(radius), colour, thick * 2, cv::LINE_AA); break;  // ring
    case 5: {                                    // cross
      const cv::Point2d d(radius * std::cos(angle), radius * std::sin(angle)), e(-d.y, d.x);
      cv::line(img, centre - d, centre + d, colour, thick * 2, cv::LINE_AA);
      cv::line(img, centre - e, centre + e, colour, thick * 2, cv::LINE_AA);
      break;
    }
    case 6: {                                    // parallel bars
      for (int k = -2; k <= 2; ++k) {
        const cv::Point2d n(std::cos(angle), std::sin(angle)), t(-n.y, n.x);
        const cv::Point2d c = centre + n * (k * radius * 0.4);
        cv::line(img, c - t * radius, c + t * radius, colour, thick, cv::LINE_AA);
      }
      break;
    }
    default:                                     // hexagon outline
      polygon(6, 0);
      cv::circle(img, centre, static_cast<int>(radius * 0.5), cv::Scalar::all(0), cv::FILLED, cv::LINE_AA);
  }
}

// Smooth random texture: noise drawn at a coarse grid and upsampled, summed over a few scales.
void add_texture(cv::Mat& img, SampleRng& rng, double amplitude, int octaves) {
  cv::Mat acc(img.size(), CV_32FC3, cv::Scalar::all(0));
  for (int o = 0; o < octaves; ++o) {
    const int cells = 4 << o;
    cv::Mat coarse(std::max(2, img.rows * cells / img.cols), cells, CV_32FC3);
    cv::randn(coarse, 0, amplitude / (o + 1));
    cv::Mat up;
    cv::resize(coarse, up, img.size(), 0, 0, cv::INTER_CUBIC);
    acc += up;
  }
  cv::Mat fine(img.size(), CV_32FC3);
  cv::randn(fine, 0, amplitude * 0.6);
  acc += fine;
  cv::Mat base;
  img.convertTo(base, CV_32FC3);
  base += acc;
  base.convertTo(img, CV_8UC3);
  (void)rng;
}

cv::Mat draw_sample(const SyntheticOptions& o, int label, SampleRng& rng) {
  const cv::Scalar bg(rng.below(256), rng.below(256), rng.below(256));
  cv::Mat img(o.height, o.width, CV_8UC3, bg);
  const SyntheticLook look = synthetic_look(label);
  const int texture = look.family;
  for (int i = 0; i < 3 + texture * 3; ++i) {            // distractor strokes
    const cv::Point a(rng.below(o.width), rng.below(o.height)), b(rng.below(o.width), rng.below(o.height));
    cv::line(img, a, b, cv::Scalar(rng.below(256), rng.below(256), rng.below(256)), 1 + texture, cv::LINE_AA);
  }
  const double side = std::min(o.width, o.height);
  const double radius = side * rng.uniform(0.15, 0.35);
  const cv::Point2d centre(rng.uniform(radius, o.width - radius), rng.uniform(radius, o.height - radius));
  draw_shape(img, look.shape, centre, radius, rng.uniform(0, 2 * M_PI), class_colour(look.hue, rng));
  cv::setRNGSeed(static_cast<int>(rng.next() & 0x7fffffff));
  add_texture(img, rng, o.photo ? 34.0 : 10.0, o.photo ? 5 : 2);
  return img;
}

}  // namespace

SyntheticLook synthetic_look(int label) {
  // Shape and hue both taken from the label repeat together every 24 classes (lcm of 8 and 12); each block of 24
  // shifts the hue by one more step, which reaches the other 72 of the 96 pairs.
  const int j = label % 24, block = label / 24 % 4;
  return {j % kShapes, (j % kColours + block) % kColours, label / (kShapes * kColours) % 4};
}

int64_t generate_synthetic(const SyntheticOptions& o) {
  for (const int side : {o.width, o.height}) {
    if (side < SyntheticOptions::kMinSide || side > SyntheticOptions::kMaxSide) {
      throw std::invalid_argument("synthetic images' sides must be in [" + std::to_string(SyntheticOptions::kMinSide) +
                                  ", " + std::to_string(SyntheticOptions::kMaxSide) + "], got " +
                                  std::to_string(o.width) + "x" + std::to_string(o.height));
    }
  }
  struct Job { std::string path; int label; uint64_t seed; };
  std::vector<Job> jobs;
  for (const char* split : {"train", "val"}) {
    const int per_class = std::string(split) == "train" ? o.train_per_class : o.val_per_class;
    for (int c = 0; c < o.classes && per_class > 0; ++c) {
      char cls[32];
      std::snprintf(cls, sizeof cls, "class_%03d", c);
      const fs::path dir = fs::path(o.out) / split / cls;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) throw SyntheticWriteError("cannot create " + printable(dir.string()) + ": " + ec.message());
      for (int i = 0; i < per_class; ++i) {
        char name[32];
        std::snprintf(name, sizeof name, "%06d.jpg", i);
        jobs.push_back({(dir / name).string(), c, stream_seed(o.seed, split[0], jobs.size())});
      }
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr failure;  // the first thread's error, rethrown on the caller's thread
  std::mutex failure_mutex;
  auto work = [&] {
    try {
      cv::setNumThreads(1);
      const std::vector<int> params = {cv::IMWRITE_JPEG_QUALITY, o.quality};
      for (size_t j; !failed && (j = next++) < jobs.size();) {
        const std::string& path = jobs[j].path;
        cv::Mat img;
        try {
          SampleRng rng(jobs[j].seed);
          img = draw_sample(o, jobs[j].label, rng);
        } catch (const cv::Exception& e) {  // its what() spans lines and names OpenCV's source file
          throw std::runtime_error("cannot draw " + printable(path) + ": OpenCV: " + e.err);
        }
        bool written = false;
        try {
          written = cv::imwrite(path, img, params);
        } catch (const cv::Exception& e) {
          throw SyntheticWriteError("cannot write " + printable(path) + ": OpenCV: " + e.err);
        }
        if (!written) throw SyntheticWriteError("cannot write " + printable(path) + " (disk full or not writable?)");
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      failed = true;
    }
  };
  const int64_t fit = std::max<int64_t>(1, kDrawingBudget / (kDrawingBytesPerPixel * o.width * o.height));
  const unsigned n = static_cast<unsigned>(std::min<int64_t>(
      fit, o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency())));
  std::vector<std::thread> threads;
  try {
    for (unsigned t = 0; t < n; ++t) threads.emplace_back(work);
  } catch (...) {  // no thread to be had: the started ones stop at their next file
    failed = true;
    for (auto& t : threads) t.join();
    throw;
  }
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
  return static_cast<int64_t>(jobs.size());
}

}  // namespace pinfeed::data
