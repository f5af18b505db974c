#include "tandem/data/image.h"

#include <png.h>
#include <turbojpeg.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/data/detail/image_ops.h"
#include "tandem/kernels/resize.h"

namespace tandem::data {
namespace {

bool is_jpeg(const unsigned char* p, size_t n) {
  return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}
bool is_png(const unsigned char* p, size_t n) {
  return n >= 8 && std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0;
}

struct TjHandle {
  tjhandle h = nullptr;
  bool compress;
  explicit TjHandle(bool compress_handle) : compress(compress_handle) { reset(); }
  ~TjHandle() { tjDestroy(h); }
  // (Re)creates the handle. After an error TurboJPEG 2.x leaves it inside the
  // failed header (the thread's next image fails with "two SOI markers"), so
  // every error path calls this.
  void reset() {
    if (h) tjDestroy(h);
    h = compress ? tjInitCompress() : tjInitDecompress();
    if (!h) TANDEM_THROW(Error, "libjpeg-turbo initialisation failed");
  }
};

bool allowed_size(int64_t height, int64_t width) {
  return height >= 1 && width >= 1 && height <= kMaxImagePixels / width;
}

// Refuses an image size above kMaxImagePixels before any memory is allocated.
void check_pixels(int64_t height, int64_t width, const char* format) {
  if (!allowed_size(height, width)) {
    TANDEM_THROW(IoError, format, " image of ", width, "x", height,
                 " pixels: the size must be at least 1x1 and at most ", kMaxImagePixels,
                 " pixels (kMaxImagePixels)");
  }
}

// The smallest of libjpeg-turbo's 1/8, 1/4 and 1/2 scales that keeps the
// image at least the minimum size; 1/1 when none does or none is asked for.
tjscalingfactor jpeg_scale(int width, int height, const DecodeOptions& o) {
  if (o.min_height <= 0 && o.min_width <= 0) return {1, 1};
  for (int denom : {8, 4, 2}) {
    const tjscalingfactor scale{1, denom};
    if (TJSCALED(width, scale) >= o.min_width && TJSCALED(height, scale) >= o.min_height)
      return scale;
  }
  return {1, 1};
}

Tensor decode_jpeg(const unsigned char* p, size_t n, const DecodeOptions& o) {
  thread_local TjHandle handle(false);
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle.h, p, static_cast<unsigned long>(n), &width, &height, &subsampling,
                          &colorspace) != 0) {
    const std::string message = tjGetErrorStr2(handle.h);
    handle.reset();
    TANDEM_THROW(IoError, "bad JPEG header: ", message);
  }
  // The source size counts, even for a scaled decode whose output is
  // smaller: libjpeg-turbo's buffers for a progressive JPEG follow it.
  check_pixels(height, width, "JPEG");
  const tjscalingfactor scale = jpeg_scale(width, height, o);
  const int out_width = TJSCALED(width, scale), out_height = TJSCALED(height, scale);
  const int c = o.channels != 0 ? o.channels : (colorspace == TJCS_GRAY ? 1 : 3);
  Tensor image = Tensor::empty(Shape{out_height, out_width, c}, DType::u8);
  if (tjDecompress2(handle.h, p, static_cast<unsigned long>(n),
                    static_cast<unsigned char*>(image.raw_data()), out_width, 0, out_height,
                    // LIMITSCANS: a crafted progressive JPEG of many scans
                    // would decode for hours.
                    c == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_FASTDCT | TJFLAG_LIMITSCANS) != 0 &&
      tjGetErrorCode(handle.h) == TJERR_FATAL) {
    const std::string message = tjGetErrorStr2(handle.h);
    handle.reset();
    TANDEM_THROW(IoError, "corrupt JPEG data: ", message);
  }
  return image;
}

// libpng's reader over the PNG bytes in memory, and where a failure goes.
struct PngSource {
  const unsigned char* data;
  size_t size;
  size_t at = 0;
  char message[160] = "";
  bool refused_size = false;  // the header's size is not allowed_size()
  // Held here, not in read_png's locals: a local changed after setjmp is
  // indeterminate after the longjmp.
  unsigned char** rows = nullptr;
};

void png_read_memory(png_structp png, png_bytep out, size_t n) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > source->size - source->at) png_error(png, "the data ends inside the image");
  std::memcpy(out, source->data + source->at, n);
  source->at += n;
}

void png_failed(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(source->message, sizeof source->message, "%s", message);
  png_longjmp(png, 1);
}

void png_warned(png_structp, png_const_charp) {}

// Decodes into `pixels` (malloc'ed, 8-bit, `stored` channels: 1 gray or 3
// RGB) as the file stores them: 16-bit samples to their high byte and alpha
// dropped, as TensorFlow's decode_png does (libpng's simplified reader took
// 16-bit samples for linear light, 0x8000 -> 186, and composited alpha onto
// black). Only plain C data lives across the setjmp. Returns false with
// source.message set on a failure.
bool read_png(PngSource& source, int64_t& height, int64_t& width, int& stored,
              unsigned char*& pixels) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, png_failed, png_warned);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  pixels = nullptr;
  if (info == nullptr || setjmp(png_jmpbuf(png)) != 0) {
    std::free(source.rows);
    source.rows = nullptr;
    std::free(pixels);
    pixels = nullptr;
    png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, &source, png_read_memory);
  png_read_info(png, info);
  height = png_get_image_height(png, info);
  width = png_get_image_width(png, info);
  if (!allowed_size(height, width)) {
    source.refused_size = true;
    png_error(png, "too many pixels");
  }
  const int type = png_get_color_type(png, info);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_packing(png);
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA)
    png_set_expand_gray_1_2_4_to_8(png);
  (void)png_set_interlace_handling(png);  // Adam7 files: the passes into whole rows
  png_read_update_info(png, info);
  stored = png_get_channels(png, info);
  if (stored != 1 && stored != 3) png_error(png, "unexpected channel count after conversion");
  const size_t row_bytes = png_get_rowbytes(png, info);
  pixels = static_cast<unsigned char*>(std::malloc(row_bytes * static_cast<size_t>(height)));
  source.rows = static_cast<unsigned char**>(
      std::malloc(sizeof(unsigned char*) * static_cast<size_t>(height)));
  if (pixels == nullptr || source.rows == nullptr) png_error(png, "out of memory");
  for (int64_t r = 0; r < height; ++r) source.rows[r] = pixels + static_cast<size_t>(r) * row_bytes;
  png_read_image(png, source.rows);
  png_read_end(png, nullptr);
  std::free(source.rows);
  source.rows = nullptr;
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Tensor decode_png(const unsigned char* p, size_t n, int channels) {
  PngSource source{.data = p, .size = n};
  int64_t height = 0, width = 0;
  int stored = 0;
  unsigned char* raw = nullptr;
  if (!read_png(source, height, width, stored, raw)) {
    if (source.refused_size) check_pixels(height, width, "PNG");  // the JPEG path's message
    TANDEM_THROW(IoError, "corrupt PNG data: ", source.message);
  }
  const std::unique_ptr<unsigned char, void (*)(void*)> pixels(raw, std::free);
  const int c = channels != 0 ? channels : stored;
  Tensor image = Tensor::empty(Shape{height, width, c}, DType::u8);
  auto* out = static_cast<unsigned char*>(image.raw_data());
  const int64_t count = height * width;
  if (c == stored) {
    std::memcpy(out, pixels.get(), static_cast<size_t>(count * c));
  } else if (c == 3) {  // gray to RGB
    for (int64_t i = 0; i < count; ++i)
      out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = pixels.get()[i];
  } else {  // RGB to gray: BT.601 luma on the stored values, as JPEG's and PIL's
    const unsigned char* rgb = pixels.get();
    for (int64_t i = 0; i < count; ++i)
      out[i] = static_cast<unsigned char>(
          (299 * rgb[3 * i] + 587 * rgb[3 * i + 1] + 114 * rgb[3 * i + 2] + 500) / 1000);
  }
  return image;
}

void check_image(const Tensor& image, const char* what) {
  if (image.rank() != 3)
    TANDEM_THROW(ShapeError, what, ": expected an (H, W, C) image, got ", image.to_string());
}

}  // namespace

Tensor decode_image(const Tensor& bytes, int channels) {
  return decode_image(bytes, DecodeOptions{.channels = channels});
}

Tensor decode_image(const Tensor& bytes, const DecodeOptions& options) {
  if (bytes.dtype() != DType::u8 || bytes.rank() != 1) {
    TANDEM_THROW(ShapeError, "decode_image: expected 1-D u8 bytes, got ", bytes.to_string());
  }
  if (options.channels != 0 && options.channels != 1 && options.channels != 3) {
    TANDEM_THROW(InvalidArgument, "decode_image: channels must be 0, 1 or 3, got ",
                 options.channels);
  }
  if (options.min_height < 0 || options.min_width < 0) {
    TANDEM_THROW(InvalidArgument, "decode_image: minimum size ", options.min_height, "x",
                 options.min_width, " must not be negative");
  }
  const auto* p = static_cast<const unsigned char*>(bytes.raw_data());
  const size_t n = bytes.nbytes();
  if (is_jpeg(p, n)) return decode_jpeg(p, n, options);
  if (is_png(p, n)) return decode_png(p, n, options.channels);
  TANDEM_THROW(IoError, "decode_image: ", n, " bytes are neither JPEG nor PNG");
}

Tensor encode_jpeg(const Tensor& image, int quality) {
  check_image(image, "encode_jpeg");
  if (image.dtype() != DType::u8 || (image.dim(2) != 1 && image.dim(2) != 3) || quality < 1 ||
      quality > 100) {
    TANDEM_THROW(InvalidArgument, "encode_jpeg: need u8 (H, W, 1|3) and quality 1..100, got ",
                 image.to_string(), " quality ", quality);
  }
  thread_local TjHandle handle(true);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const bool gray = image.dim(2) == 1;
  if (tjCompress2(handle.h, static_cast<const unsigned char*>(image.raw_data()),
                  static_cast<int>(image.dim(1)), 0, static_cast<int>(image.dim(0)),
                  gray ? TJPF_GRAY : TJPF_RGB, &out, &size, gray ? TJSAMP_GRAY : TJSAMP_420,
                  quality, 0) != 0) {
    TANDEM_THROW(Error, "JPEG encoding failed: ", tjGetErrorStr2(handle.h));
  }
  Tensor bytes = Tensor::empty(Shape{static_cast<int64_t>(size)}, DType::u8);
  std::memcpy(bytes.raw_data(), out, size);
  tjFree(out);
  return bytes;
}

Tensor encode_png(const Tensor& image) {
  check_image(image, "encode_png");
  if (image.dtype() != DType::u8 || (image.dim(2) != 1 && image.dim(2) != 3)) {
    TANDEM_THROW(InvalidArgument, "encode_png: need u8 (H, W, 1|3), got ", image.to_string());
  }
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(image.dim(1));
  img.height = static_cast<png_uint_32>(image.dim(0));
  img.format = image.dim(2) == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, image.raw_data(), 0, nullptr)) {
    TANDEM_THROW(Error, "PNG encoding failed: ", img.message);
  }
  Tensor bytes = Tensor::empty(Shape{static_cast<int64_t>(size)}, DType::u8);
  if (!png_image_write_to_memory(&img, bytes.raw_data(), &size, 0, image.raw_data(), 0, nullptr)) {
    TANDEM_THROW(Error, "PNG encoding failed: ", img.message);
  }
  return bytes.slice(0, static_cast<int64_t>(size));
}

Tensor resize_image(const Tensor& image, int64_t height, int64_t width) {
  check_image(image, "resize_image");
  return kernels::resize_bilinear(image, height, width);
}

Tensor center_crop(const Tensor& image, int64_t height, int64_t width) {
  check_image(image, "center_crop");
  const int64_t H = image.dim(0), W = image.dim(1), C = image.dim(2);
  if (height < 1 || width < 1) {
    TANDEM_THROW(InvalidArgument, "center_crop: the crop must be at least 1x1, got ", height, "x",
                 width);
  }
  if (height > H || width > W) {
    TANDEM_THROW(ShapeError, "center_crop: a ", height, "x", width, " crop does not fit the image ",
                 image.to_string(), " (resize it first)");
  }
  Tensor out = Tensor::empty(Shape{height, width, C}, image.dtype(), image.device());
  const size_t pixel = static_cast<size_t>(C) * dtype_size(image.dtype());
  const int64_t top = (H - height) / 2, left = (W - width) / 2;
  const auto* src = static_cast<const char*>(image.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t y = 0; y < height; ++y) {
    std::memcpy(dst + static_cast<size_t>(y * width) * pixel,
                src + static_cast<size_t>((top + y) * W + left) * pixel,
                static_cast<size_t>(width) * pixel);
  }
  return out;
}

Tensor normalize_image(const Tensor& image, float scale, const std::vector<float>& mean,
                       const std::vector<float>& stddev) {
  if (mean.empty() || stddev.empty()) {
    TANDEM_THROW(InvalidArgument, "normalize: mean and stddev need values, got ", mean.size(),
                 " and ", stddev.size());
  }
  for (float s : stddev) {
    if (!(s > 0.0f)) TANDEM_THROW(InvalidArgument, "normalize: stddev must be positive, got ", s);
  }
  const int64_t C = image.rank() > 0 ? image.dim(-1) : 1;
  auto fits = [C](size_t n) { return n == 1 || n == static_cast<size_t>(C); };
  if (!fits(mean.size()) || !fits(stddev.size())) {
    TANDEM_THROW(ShapeError, "normalize: ", image.to_string(), " has ", C,
                 " channels, mean/stddev have ", mean.size(), " and ", stddev.size(), " values");
  }
  Tensor out = Tensor::empty(image.shape(), DType::f32, image.device());
  if (out.numel() == 0) return out;
  // Per-channel tables, so the loop does not branch on the list sizes.
  std::vector<float> m(static_cast<size_t>(C)), s(static_cast<size_t>(C));
  for (size_t c = 0; c < m.size(); ++c) {
    m[c] = mean[mean.size() == 1 ? 0 : c];
    s[c] = stddev[stddev.size() == 1 ? 0 : c];
  }
  float* y = out.data<float>();
  const auto n = static_cast<size_t>(out.numel());
  auto apply = [&](const auto* x) {
    for (size_t i = 0, c = 0; i < n; ++i) {
      y[i] = (static_cast<float>(x[i]) * scale - m[c]) / s[c];
      if (++c == m.size()) c = 0;
    }
  };
  if (image.dtype() == DType::u8) {
    apply(image.data<uint8_t>());
  } else if (image.dtype() == DType::f32) {
    apply(image.data<float>());
  } else {
    const std::vector<float> x = image.to_floats();
    apply(x.data());
  }
  return out;
}

MapFn decode_image_fn(std::string key, int channels) {
  return decode_image_fn(std::move(key), DecodeOptions{.channels = channels});
}

MapFn decode_image_fn(std::string key, DecodeOptions options) {
  return [key, options](Element e) {
    e.set(key, decode_image(e.at(key), options));
    return e;
  };
}

MapFn resize_image_fn(int64_t height, int64_t width, std::string key) {
  if (height < 1 || width < 1) {
    TANDEM_THROW(InvalidArgument, "resize_image_fn: the size must be at least 1x1, got ", height,
                 "x", width);
  }
  return [height, width, key](Element e) {
    e.set(key, resize_image(e.at(key), height, width));
    return e;
  };
}

MapFn center_crop_fn(int64_t height, int64_t width, std::string key) {
  if (height < 1 || width < 1) {
    TANDEM_THROW(InvalidArgument, "center_crop_fn: the crop must be at least 1x1, got ", height,
                 "x", width);
  }
  return [height, width, key](Element e) {
    e.set(key, center_crop(e.at(key), height, width));
    return e;
  };
}

MapFn random_crop_with_padding(int64_t padding, uint64_t seed, std::string key) {
  if (padding < 0)
    TANDEM_THROW(InvalidArgument, "random_crop_with_padding: negative padding ", padding);
  return [padding, seed, key](Element e) {
    const Tensor& in = e.at(key);
    check_image(in, "random_crop_with_padding");
    const int64_t H = in.dim(0), W = in.dim(1), C = in.dim(2);
    Generator g(mix_seed(seed, element_random_seed()));
    const int64_t dy =
        static_cast<int64_t>(g.next_below(static_cast<uint64_t>(2 * padding + 1))) - padding;
    const int64_t dx =
        static_cast<int64_t>(g.next_below(static_cast<uint64_t>(2 * padding + 1))) - padding;
    Tensor out = Tensor::zeros(in.shape(), in.dtype());
    detail::shift_into_zeros(static_cast<const char*>(in.raw_data()),
                             static_cast<char*>(out.raw_data()), H, W,
                             static_cast<size_t>(C) * dtype_size(in.dtype()), dy, dx);
    e.set(key, out);
    return e;
  };
}

MapFn random_flip_horizontal(uint64_t seed, std::string key) {
  return [seed, key](Element e) {
    if (Generator(mix_seed(seed, element_random_seed())).next_below(2) == 0) return e;
    const Tensor& in = e.at(key);
    check_image(in, "random_flip_horizontal");
    Tensor out = Tensor::empty(in.shape(), in.dtype());
    detail::flip_horizontal(static_cast<const char*>(in.raw_data()),
                            static_cast<char*>(out.raw_data()), in.dim(0), in.dim(1),
                            static_cast<size_t>(in.dim(2)) * dtype_size(in.dtype()));
    e.set(key, out);
    return e;
  };
}

MapFn normalize(std::vector<float> mean, std::vector<float> stddev, std::string key) {
  if (mean.empty() || stddev.empty()) {
    TANDEM_THROW(InvalidArgument, "normalize: mean and stddev need values, got ", mean.size(),
                 " and ", stddev.size());
  }
  for (float s : stddev) {
    if (!(s > 0.0f)) TANDEM_THROW(InvalidArgument, "normalize: stddev must be positive, got ", s);
  }
  return [mean, stddev, key](Element e) {
    const Tensor& in = e.at(key);
    const float scale = in.dtype() == DType::u8 ? 1.0f / 255.0f : 1.0f;
    try {
      e.set(key, normalize_image(in, scale, mean, stddev));
    } catch (const ShapeError& error) {
      TANDEM_THROW(ShapeError, "feature '", key, "': ", error.what());
    }
    return e;
  };
}

MapFn cast_to(DType dtype, std::string key) {
  return [dtype, key](Element e) {
    e.set(key, e.at(key).to(dtype));
    return e;
  };
}

}  // namespace tandem::data
