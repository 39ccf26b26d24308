#include "data/transform/transforms.h"

#include "data/jpeg/jpeg_check.h"
#include "data/jpeg/jpeg_header.h"
#include "data/jpeg/jpeg_region.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdexcept>

#include <csetjmp>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <png.h>

namespace pinfeed::data {

int side_of(const TransformOptions& o, bool train, int64_t epoch) {
  if (!train) return o.val_size > 0 ? o.val_size : o.size;
  return o.schedule.at(epoch, o.size);
}

int largest_side(const TransformOptions& o, bool train) {
  return train ? o.schedule.all_sides(o.size).back() : side_of(o, false, 0);
}

TransformOptions at_side(TransformOptions o, int side) {
  o.size = side;
  o.val_size = 0;
  o.schedule = {};
  return o;
}

size_t bytes_per_image(PixelFormat format, int size) {
  const size_t pixels = static_cast<size_t>(size) * size * 3;
  return format == PixelFormat::kFloat32Chw ? pixels * sizeof(float) : pixels;
}

PixelAffine uint8_normalisation(const TransformOptions& o) {
  PixelAffine a;
  for (int c = 0; c < 3; ++c) {
    a.scale[c] = 1 / (o.std[c] * 255.f);
    a.shift[c] = -o.mean[c] / o.std[c];
  }
  return a;
}

CropBox sample_train_crop(int width, int height, const TransformOptions& o, SampleRng& rng) {
  CropBox box;
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(o.ratio_min), log_hi = std::log(o.ratio_max);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * rng.uniform(o.scale_min, o.scale_max);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      box = {static_cast<int>(rng.below(width - w + 1)), static_cast<int>(rng.below(height - h + 1)), w, h};
      found = true;
    }
  }
  if (!found) {  // torchvision's fallback: the central crop clamped to the ratio range
    const double in_ratio = static_cast<double>(width) / height;
    int w = width, h = height;
    if (in_ratio < o.ratio_min) {
      h = static_cast<int>(std::lround(w / o.ratio_min));
    } else if (in_ratio > o.ratio_max) {
      w = static_cast<int>(std::lround(h * o.ratio_max));
    }
    w = std::clamp(w, 1, width);
    h = std::clamp(h, 1, height);
    box = {(width - w) / 2, (height - h) / 2, w, h};
  }
  box.flip = o.hflip && rng.uniform() < 0.5;
  return box;
}

CropBox val_crop(int width, int height, const TransformOptions& o) {
  const double resized_short = std::floor(o.size / o.val_resize_ratio);
  const double scale = resized_short / std::min(width, height);
  const int side_w = std::clamp(static_cast<int>(std::lround(o.size / scale)), 1, width);
  const int side_h = std::clamp(static_cast<int>(std::lround(o.size / scale)), 1, height);
  return {(width - side_w) / 2, (height - side_h) / 2, side_w, side_h, false};
}

namespace {

const uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

uint32_t be16(const uint8_t* p) { return (uint32_t(p[0]) << 8) | p[1]; }
uint32_t be32(const uint8_t* p) { return (be16(p) << 16) | be16(p + 2); }


// BGR uint8 (S, S, 3) -> the batch slot, flipping on the way when asked.
void write_pixels(const cv::Mat& bgr, bool flip, const TransformOptions& o, void* dst) {
  const int s = o.size;
  if (o.format == PixelFormat::kUint8Hwc) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int y = 0; y < s; ++y) {
      const uint8_t* row = bgr.ptr<uint8_t>(y);
      uint8_t* orow = out + static_cast<size_t>(y) * s * 3;
      for (int x = 0; x < s; ++x) {
        const uint8_t* px = row + 3 * (flip ? s - 1 - x : x);
        orow[3 * x + 0] = px[2];
        orow[3 * x + 1] = px[1];
        orow[3 * x + 2] = px[0];
      }
    }
    return;
  }
  auto* out = static_cast<float*>(dst);
  const size_t plane = static_cast<size_t>(s) * s;
  float scale[3], shift[3];  // (v / 255 - mean) / std  ==  v * scale + shift
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * o.std[c]);
    shift[c] = -o.mean[c] / o.std[c];
  }
  for (int y = 0; y < s; ++y) {
    const uint8_t* row = bgr.ptr<uint8_t>(y);
    float* r = out + static_cast<size_t>(y) * s;
    float* g = r + plane;
    float* b = g + plane;
    for (int x = 0; x < s; ++x) {
      const uint8_t* px = row + 3 * (flip ? s - 1 - x : x);
      r[x] = px[2] * scale[0] + shift[0];
      g[x] = px[1] * scale[1] + shift[1];
      b[x] = px[0] * scale[2] + shift[2];
    }
  }
}

// The last step of a decode: into dst, or left in scratch for write_resized when dst is null.
void finish(DecodeScratch& scratch, bool flip, const TransformOptions& o, void* dst) {
  scratch.flip = flip;
  if (dst) write_pixels(scratch.resized, flip, o, dst);
}

}  // namespace

bool peek_image_size(const uint8_t* d, size_t n, int* w, int* h) {
  if (n >= 4 && d[0] == 0xFF && d[1] == 0xD8) {
    JpegInfo info;
    if (!parse_jpeg_info(d, n, &info)) return false;
    *w = info.width;
    *h = info.height;
    return true;
  }
  if (n >= 24 && std::memcmp(d, kPngSignature, 8) == 0) {
    *w = static_cast<int>(be32(d + 16));
    *h = static_cast<int>(be32(d + 20));
    return *w > 0 && *h > 0;
  }
  return false;
}

namespace {

// A PNG decoded by libpng with pinfeed's own error and warning handlers. Through OpenCV, libpng prints
// "libpng error: ..." to stderr by itself, naming no file, and the reason never reaches bad_images.tsv. The
// transformations are those of OpenCV 4's PngDecoder::readData for IMREAD_COLOR (16 bits stripped to 8, alpha
// stripped, palette and grey expanded, BGR order), so the pixels are the ones cv::imdecode gives (test_transforms).
struct PngReader {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  char message[256] = "";
};

void png_failed(png_structp png, png_const_charp what) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", what ? what : "unknown error");
  png_longjmp(png, 1);
}

void png_warned(png_structp, png_const_charp) {}  // benign (an sRGB profile libpng dislikes): OpenCV ignores them too

void png_read_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->size - r->at) png_error(png, "truncated file");
  std::memcpy(out, r->data + r->at, n);
  r->at += n;
}

// Only plain data lives in this frame across setjmp: a longjmp skips destructors. `rows` is sized by the caller
// once the header is read (the second call); the first call reads the header alone.
bool png_steps(png_structp png, png_infop info, png_infop end, cv::Mat* out, std::vector<png_bytep>* rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  if (!out) {
    png_read_info(png, info);
    return true;
  }
  const int color_type = png_get_color_type(png, info);
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0 && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color_type & PNG_COLOR_MASK_COLOR) {
    png_set_bgr(png);
  } else {
    png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(out->cols) * 3) png_error(png, "unexpected row size");
  for (int y = 0; y < out->rows; ++y) (*rows)[y] = out->ptr(y);
  png_read_image(png, rows->data());
  png_read_end(png, end);
  return true;
}

}  // namespace

void decode_png(const uint8_t* file, size_t file_size, cv::Mat& out) {
  PngReader reader{file, file_size};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_failed, png_warned);
  if (!png) throw std::runtime_error("libpng: out of memory");
  png_infop info = png_create_info_struct(png), end = png_create_info_struct(png);
  struct Destroy {
    png_structp* png;
    png_infop *info, *end;
    ~Destroy() { png_destroy_read_struct(png, info, end); }
  } destroy{&png, &info, &end};
  if (!info || !end) throw std::runtime_error("libpng: out of memory");
  png_set_read_fn(png, &reader, png_read_memory);
  std::vector<png_bytep> rows;
  if (!png_steps(png, info, end, nullptr, &rows)) throw std::runtime_error(std::string("libpng: ") + reader.message);
  // The size was checked against max_image_pixels from the same header before this call.
  out.create(static_cast<int>(png_get_image_height(png, info)), static_cast<int>(png_get_image_width(png, info)), CV_8UC3);
  rows.resize(static_cast<size_t>(out.rows));
  if (!png_steps(png, info, end, &out, &rows)) throw std::runtime_error(std::string("libpng: ") + reader.message);
}

namespace {

// decode_into, or decode_box_into when `given` is set (then the header must be readable).
void decode(const uint8_t* file, size_t file_size, bool train, const TransformOptions& o, SampleRng* rng,
            const CropBox* given, DecodeScratch& scratch, void* dst) {
  const bool jpeg = file_size >= 2 && file[0] == 0xFF && file[1] == 0xD8;
  const bool png = !jpeg && file_size >= 8 && std::memcmp(file, kPngSignature, 8) == 0;
  if (!jpeg && !png) throw std::runtime_error("not a JPEG or PNG file");
  int width = 0, height = 0;
  const bool known = peek_image_size(file, file_size, &width, &height);
  if (png && !known) throw std::runtime_error("unreadable PNG header");  // cannot be checked against the limit
  if (known) {
    const std::string too_big = pixel_limit_error(width, height, o.max_image_pixels);
    if (!too_big.empty()) throw std::runtime_error(too_big);
  }
  if (given && !known) throw std::runtime_error("unreadable image header");
  CropBox box;
  if (known) box = given ? *given : train ? sample_train_crop(width, height, o, *rng) : val_crop(width, height, o);
  const cv::Rect rect(box.x, box.y, box.w, box.h);

  // JPEG: decode only the crop's region (and at a reduced DCT scale when the crop is large).
  JpegRegion region;
  if (known && o.crop_decode && jpeg &&
      decode_jpeg_region(file, file_size, rect, reduction_for(box, o.size), o.max_image_pixels, scratch.region,
                         &region)) {
    cv::resize(region.pixels(region.crop), scratch.resized, cv::Size(o.size, o.size), 0, 0, cv::INTER_LINEAR);
    finish(scratch, box.flip, o, dst);
    return;
  }
  // The whole image at full scale, then crop and resize: crop_decode off (the reference path), PNG, CMYK, a JPEG
  // header the peek could not read. JPEGs that libjpeg-turbo converts to BGR are decoded by it here: the same
  // library and settings as OpenCV, so the same pixels (test_transforms checks), but with its warnings seen.
  // PNGs go to libpng directly (decode_png). The rest goes to OpenCV only after check_jpeg, since OpenCV ignores
  // libjpeg's warnings.
  cv::Mat full;
  if (known && jpeg && !o.crop_decode &&
      decode_jpeg_region(file, file_size, cv::Rect(0, 0, width, height), 1, o.max_image_pixels, scratch.region,
                         &region)) {
    full = region.pixels(region.crop);
  } else if (png) {
    decode_png(file, file_size, scratch.decoded);
    full = scratch.decoded;
  } else {
    check_jpeg(file, file_size, o.max_image_pixels, scratch.region);
    // Not imdecode(..., &dst): on failure it returns dst untouched, i.e. the previous sample's image.
    const cv::Mat bytes(1, static_cast<int>(file_size), CV_8UC1, const_cast<uint8_t*>(file));
    // IGNORE_ORIENTATION: header sizes and crops refer to the stored pixels; torchvision's PIL loader also
    // ignores EXIF orientation.
    scratch.decoded = cv::imdecode(bytes, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
    if (scratch.decoded.empty()) throw std::runtime_error("cannot decode image data");
    full = scratch.decoded;
  }
  if (!known) {  // unusual header: draw the crop from the decoded size
    width = full.cols;
    height = full.rows;
    box = train ? sample_train_crop(width, height, o, *rng) : val_crop(width, height, o);
  } else if (full.cols != width || full.rows != height) {
    throw std::runtime_error("image header size disagrees with decoded size");
  }
  const cv::Rect roi = cv::Rect(box.x, box.y, box.w, box.h) & cv::Rect(0, 0, width, height);
  if (roi.empty()) throw std::runtime_error("empty crop");
  cv::resize(full(roi), scratch.resized, cv::Size(o.size, o.size), 0, 0, cv::INTER_LINEAR);
  finish(scratch, box.flip, o, dst);
}

}  // namespace

void decode_into(const uint8_t* file, size_t file_size, bool train, const TransformOptions& o, SampleRng& rng,
                 DecodeScratch& scratch, void* dst) {
  decode(file, file_size, train, o, &rng, nullptr, scratch, dst);
}

void decode_box_into(const uint8_t* file, size_t file_size, const CropBox& box, const TransformOptions& o,
                     DecodeScratch& scratch, void* dst) {
  decode(file, file_size, false, o, nullptr, &box, scratch, dst);
}

void write_resized(const DecodeScratch& scratch, const TransformOptions& o, void* dst) {
  write_pixels(scratch.resized, scratch.flip, o, dst);
}

void read_file(const std::string& path, std::vector<uint8_t>& out, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one. No effect on regular files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::runtime_error(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    throw std::runtime_error(S_ISFIFO(st.st_mode)  ? "not a regular file (a FIFO)"
                             : S_ISSOCK(st.st_mode) ? "not a regular file (a socket)"
                                                    : "not a regular file (a device)");
  }
  if (max_bytes > 0 && st.st_size > max_bytes) {
    throw std::runtime_error("file of " + std::to_string(st.st_size) + " bytes, over the limit of " +
                             std::to_string(max_bytes) + " (data.max_file_mb)");
  }
  if (st.st_size == 0) throw std::runtime_error("empty file");
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("read error: ") + std::strerror(errno));
    if (n == 0) throw std::runtime_error("short read: the file shrank while being read");
    got += static_cast<size_t>(n);
  }
}

}  // namespace pinfeed::data
