// The device back ends register themselves while libtandem loads: a CUDA
// build has one for cuda devices (tensor's and comm's), a CPU-only build
// none, and its cuda devices are refused with the reason.
#include <gtest/gtest.h>

#include "tandem/base/error.h"
#include "tandem/comm/detail/gpu_backend.h"
#include "tandem/config.h"
#include "tandem/tensor/detail/device_backend.h"
#include "tandem/tensor/tensor.h"

namespace tandem {
namespace {

TEST(DeviceBackend, RegisteredExactlyWhenTheBuildHasCuda) {
  const bool built = TANDEM_HAVE_CUDA == 1;
  EXPECT_EQ(cuda_built(), built);
  EXPECT_EQ(detail::device_backend(DeviceKind::cuda) != nullptr, built);
  EXPECT_EQ(comm::detail::gpu_backend() != nullptr, built);
  EXPECT_EQ(detail::device_backend(DeviceKind::cpu), nullptr);
}

TEST(DeviceBackend, ASecondRegistrationIsRefused) {
  if (detail::device_backend(DeviceKind::cuda) == nullptr) GTEST_SKIP() << "no CUDA back end";
  EXPECT_THROW(
      detail::register_device_backend(DeviceKind::cuda, *detail::device_backend(DeviceKind::cuda)),
      InvalidArgument);
}

TEST(DeviceBackend, WithoutOneACudaDeviceIsRefusedWithTheReason) {
  if (cuda_built()) GTEST_SKIP() << "this build has the CUDA back end";
  try {
    Tensor::empty(Shape{4}, DType::f32, Device{DeviceKind::cuda, 0});
    FAIL() << "a tensor on cuda:0 without a CUDA back end";
  } catch (const NotImplemented& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA backend"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_THROW(set_cuda_devices_per_gpu(2), NotImplemented);
}

}  // namespace
}  // namespace tandem
