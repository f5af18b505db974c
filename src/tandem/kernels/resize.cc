// resize_bilinear on oneDNN's resampling_linear. Legend: N images, H x W
// input, OH x OW output, C channels; memory is nhwc throughout (no reorders).
#include "tandem/kernels/resize.h"

#include <limits>

#include "tandem/kernels/detail/onednn.h"

namespace tandem::kernels {
namespace {

using dnnl::memory;

struct ResizeForward {
  dnnl::resampling_forward primitive;
  dnnl::resampling_forward::primitive_desc pd;
};

std::shared_ptr<ResizeForward> resize_primitive(const Shape& x, DType dtype, int64_t OH,
                                                int64_t OW) {
  const std::string key = tandem::detail::concat("resize_bilinear:", dtype_name(dtype),
                                                 x.to_string(), "->", OH, "x", OW);
  return detail::cached<ResizeForward>(key, [&] {
    return detail::guarded("bilinear resize creation", [&] {
      const auto dt = detail::to_dnnl(dtype);
      const memory::desc src({x[0], x[3], x[1], x[2]}, dt, memory::format_tag::nhwc);
      const memory::desc dst({x[0], x[3], OH, OW}, dt, memory::format_tag::nhwc);
      // Sizes, not factors: oneDNN derives the factors as OH / H and OW / W,
      // which is exactly the half-pixel mapping of the header.
      dnnl::resampling_forward::desc desc(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::resampling_linear, src, dst);
      auto p = std::make_shared<ResizeForward>();
      p->pd = dnnl::resampling_forward::primitive_desc(desc, detail::user_scratchpad_attr(),
                                                       detail::cpu_engine());
      p->primitive = dnnl::resampling_forward(p->pd);
      return p;
    });
  });
}

}  // namespace

Tensor resize_bilinear(const Tensor& images, int64_t height, int64_t width) {
  if (images.rank() != 3 && images.rank() != 4) {
    TANDEM_THROW(ShapeError, "resize_bilinear: expected images (N, H, W, C) or (H, W, C), got ",
                 images.to_string());
  }
  if (images.dtype() != DType::f32 && images.dtype() != DType::u8) {
    TANDEM_THROW(ShapeError, "resize_bilinear: expected f32 or u8 images, got ",
                 images.to_string());
  }
  const bool single = images.rank() == 3;
  const Shape x = single ? Shape{1, images.dim(0), images.dim(1), images.dim(2)} : images.shape();
  const int64_t N = x[0], H = x[1], W = x[2], C = x[3];
  // The bound keeps N * OH * OW * C (and its byte size) far from overflow.
  constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / 16;
  if (height < 1 || width < 1 || height > kMaxElements / width ||
      (N * C > 0 && height * width > kMaxElements / (N * C))) {
    TANDEM_THROW(InvalidArgument, "resize_bilinear: output size ", height, "x", width,
                 " must be at least 1x1 and fit in memory for ", images.to_string());
  }
  const Shape y_shape = single ? Shape{height, width, C} : Shape{N, height, width, C};
  Tensor y = Tensor::empty(y_shape, images.dtype(), images.device());
  if (y.numel() == 0) return y;
  if (H == 0 || W == 0) {
    TANDEM_THROW(ShapeError, "resize_bilinear: cannot resize an empty image ", images.to_string(),
                 " to ", height, "x", width);
  }
  auto prim = resize_primitive(x, images.dtype(), height, width);
  detail::guarded("bilinear resize", [&] {
    detail::execute(prim->primitive, prim->pd.scratchpad_desc(),
                    {{DNNL_ARG_SRC, detail::memory_of(images, prim->pd.src_desc())},
                     {DNNL_ARG_DST, detail::memory_of(y, prim->pd.dst_desc())}},
                    images.device());
  });
  return y;
}

}  // namespace tandem::kernels
