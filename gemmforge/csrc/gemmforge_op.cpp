// torch.ops.gemmforge.mm(a, b): C = A @ B (fp16, fp32 accumulate) through gemmforge kernels.
//
// A table maps (m, n, k, layout, device) to a kernel's C launch entry (gemmforge_launch,
// found by dlopen in Python: compiler/runtime.py's SharedLibraryKernel) and a workspace
// tensor; gemmforge.matmul fills it (resolve the program, build, load, then
// torch.ops.gemmforge._register) and calls the op. The op itself never builds anything: a
// key it doesn't know, a dtype, rank, layout or alignment it can't serve, or a launch that
// refuses its arguments goes to at::matmul with a one-time warning per reason (never a wrong
// answer, never a crash). It launches on the current stream of the operands' device, found
// through c10's device-guard interface, so this file needs no CUDA header and compiles
// against a CPU-only torch too (the CPU test tier builds it); on a CUDA torch the same calls
// reach the CUDA stream. Meta (fake) tensors get at::matmul's shape, so torch.compile
// traces the op; the CUDA path allocates only the output, so it is capturable in CUDA graphs.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

namespace {

// gemmforge_launch(A, B, C, M, N, K, workspace, workspace_bytes, stream) -> cudaError_t
using LaunchFn = int (*)(const void*, const void*, void*, int, int, int, void*, size_t, void*);

constexpr int64_t kLayoutNN = 0;
constexpr int64_t kLayoutNT = 1;
constexpr uintptr_t kTmaAlign = 16;  // bytes: TMA and 16-byte vector loads

struct Key {
  int64_t m, n, k, layout, device;
  bool operator==(const Key& o) const {
    return m == o.m && n == o.n && k == o.k && layout == o.layout && device == o.device;
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = std::hash<int64_t>{}(key.m);
    for (int64_t v : {key.n, key.k, key.layout, key.device}) h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h;
  }
};

struct Entry {
  LaunchFn launch;
  at::Tensor workspace;  // kept alive here; its address goes to every launch
  int64_t workspace_bytes;
  std::string program;
};

std::shared_mutex table_mutex;
std::unordered_map<Key, Entry, KeyHash> table;

enum Reason { kDtype, kRank, kLayout, kAlign, kSize, kUnknown, kLaunch, kDevice, kReasons };
std::array<std::atomic<bool>, kReasons> warned{};

at::Tensor fallback(const at::Tensor& a, const at::Tensor& b, Reason reason, const std::string& why) {
  if (!warned[reason].exchange(true)) {
    TORCH_WARN("gemmforge.mm: ", why, "; torch.matmul serves it (warned once per reason)");
  }
  return at::matmul(a, b);
}

// The layout the op reads b in: nn (b is k x n, row-major), nt (b is a transposed view of a
// row-major n x k tensor), or -1 (any other strides).
int64_t layout_of(const at::Tensor& b) {
  if (b.is_contiguous()) return kLayoutNN;
  if (b.stride(0) == 1 && b.stride(1) == b.size(0)) return kLayoutNT;
  return -1;
}

std::string registered(int64_t m, int64_t n, int64_t k, int64_t layout, int64_t device);

bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) % kTmaAlign) == 0; }

void* current_stream(const c10::Device& device) {
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
  return impl->getStream(device).native_handle();
}

at::Tensor mm_cuda(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != at::kHalf || b.scalar_type() != at::kHalf)
    return fallback(a, b, kDtype, "operands are not both float16");
  if (a.dim() != 2 || b.dim() != 2) return fallback(a, b, kRank, "operands are not both 2-D");
  if (a.device() != b.device()) return fallback(a, b, kDevice, "operands on different devices");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (b.size(0) != k) return at::matmul(a, b);  // at::matmul says what is wrong
  if (m == 0 || n == 0 || k == 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return fallback(a, b, kSize, "an empty or over-2^31 dimension");
  const int64_t layout = layout_of(b);
  if (!a.is_contiguous() || layout < 0)
    return fallback(a, b, kLayout, "a is not row-major contiguous, or b is neither row-major "
                                   "(k, n) nor a transposed view of a row-major (n, k) tensor");
  if (!aligned(a.data_ptr()) || !aligned(b.data_ptr()))
    return fallback(a, b, kAlign, "an operand's address is not 16-byte aligned (a view at an offset)");
  LaunchFn launch;
  void* workspace;
  int64_t workspace_bytes;
  {
    std::shared_lock<std::shared_mutex> lock(table_mutex);
    auto found = table.find({m, n, k, layout, a.device().index()});
    if (found == table.end())
      return fallback(a, b, kUnknown, "no kernel registered for this shape and device (gemmforge.matmul "
                                      "registers them; under torch.compile call it once before compiling)");
    launch = found->second.launch;
    workspace_bytes = found->second.workspace_bytes;
    workspace = workspace_bytes ? found->second.workspace.data_ptr() : nullptr;
  }
  c10::DeviceGuard guard(a.device());
  at::Tensor c = at::empty({m, n}, a.options());
  const int err = launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), static_cast<int>(m),
                         static_cast<int>(n), static_cast<int>(k), workspace,
                         static_cast<size_t>(workspace_bytes), current_stream(a.device()));
  if (err != 0)
    return fallback(a, b, kLaunch, "the kernel refused its arguments (cudaError " + std::to_string(err) +
                                   ", " + registered(m, n, k, layout, a.device().index()) + ")");
  return c;
}

at::Tensor mm_other(const at::Tensor& a, const at::Tensor& b) {
  return fallback(a, b, kDevice, "operands are not CUDA tensors");
}

at::Tensor mm_meta(const at::Tensor& a, const at::Tensor& b) { return at::matmul(a, b); }

void register_kernel(int64_t m, int64_t n, int64_t k, int64_t layout, int64_t device,
                     int64_t launch, const at::Tensor& workspace, int64_t workspace_bytes,
                     const std::string& program) {
  TORCH_CHECK(layout == kLayoutNN || layout == kLayoutNT, "gemmforge._register: layout 0 (nn) or 1 (nt)");
  TORCH_CHECK(launch != 0, "gemmforge._register: a null launch entry");
  TORCH_CHECK(workspace_bytes >= 0 && workspace.nbytes() >= static_cast<size_t>(workspace_bytes),
              "gemmforge._register: the workspace holds ", workspace.nbytes(), " bytes, not ",
              workspace_bytes);
  std::unique_lock<std::shared_mutex> lock(table_mutex);
  table[{m, n, k, layout, device}] =
      Entry{reinterpret_cast<LaunchFn>(static_cast<intptr_t>(launch)), workspace, workspace_bytes, program};
}

std::string registered(int64_t m, int64_t n, int64_t k, int64_t layout, int64_t device) {
  std::shared_lock<std::shared_mutex> lock(table_mutex);
  auto found = table.find({m, n, k, layout, device});
  return found == table.end() ? std::string() : found->second.program;
}

int64_t forget_all() {
  std::unique_lock<std::shared_mutex> lock(table_mutex);
  const int64_t count = static_cast<int64_t>(table.size());
  table.clear();
  for (auto& flag : warned) flag = false;
  return count;
}

}  // namespace

TORCH_LIBRARY(gemmforge, lib) {
  lib.def("mm(Tensor a, Tensor b) -> Tensor");
  lib.def("_register(int m, int n, int k, int layout, int device, int launch, Tensor workspace, "
          "int workspace_bytes, str program) -> ()", &register_kernel);
  lib.def("_registered(int m, int n, int k, int layout, int device) -> str", &registered);
  lib.def("_forget_all() -> int", &forget_all);
}

TORCH_LIBRARY_IMPL(gemmforge, CUDA, lib) { lib.impl("mm", &mm_cuda); }
TORCH_LIBRARY_IMPL(gemmforge, CPU, lib) { lib.impl("mm", &mm_other); }
TORCH_LIBRARY_IMPL(gemmforge, Meta, lib) { lib.impl("mm", &mm_meta); }
