// torch.ops.gemmforge.mm(a, b) and torch.ops.gemmforge.linear(x, w, bias): C = A @ B and
// y = x @ w^T + bias (fp16 or bf16, fp32 accumulate) through gemmforge kernels.
//
// A table maps (token bucket of m, n, k, layout, operand dtype, device) to a kernel's C
// launch entries (gemmforge_launch and, for a program with the bias epilogue,
// gemmforge_launch_bias; found by dlopen in Python: compiler/runtime.py's SharedLibraryKernel)
// and a workspace tensor sized for the bucket's largest m. The dtype is part of the key, so a
// bf16 call never finds an fp16 kernel (nor the reverse): each dtype's kernels are registered
// apart. A bucket is the power of two at or above m (bucket_of), so every m of a bucket runs
// the one program chosen for it: the kernels take m at run time.
// gemmforge.matmul and gemmforge.linear fill the table (resolve the program, build, load, then
// torch.ops.gemmforge._register) and call the op. An entry may hold no launch entry at all:
// cuBLAS won that bucket, and the op calls at::matmul / at::linear, as for a key it does not
// know (silently: for linear that is the normal route of a layer cuBLAS serves best). The op
// never builds anything: a dtype, rank, layout or alignment it can't serve, or a launch that
// refuses its arguments goes to ATen with a one-time warning per reason (never a wrong
// answer, never a crash). It launches on the current stream of the operands' device, found
// through c10's device-guard interface, so this file needs no CUDA header and compiles
// against a CPU-only torch too (the CPU test tier builds it); on a CUDA torch the same calls
// reach the CUDA stream. Meta (fake) tensors get ATen's shapes, so torch.compile traces the
// ops; the CUDA path allocates only the output, so it is capturable in CUDA graphs.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
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
#include <vector>

namespace {

// gemmforge_launch(A, B, C, M, N, K, workspace, workspace_bytes, stream) -> cudaError_t
using LaunchFn = int (*)(const void*, const void*, void*, int, int, int, void*, size_t, void*);
// gemmforge_launch_bias(A, B, C, bias, M, N, K, workspace, workspace_bytes, stream) -> cudaError_t
using LaunchBiasFn = int (*)(const void*, const void*, void*, const void*, int, int, int, void*,
                             size_t, void*);

constexpr int64_t kLayoutNN = 0;
constexpr int64_t kLayoutNT = 1;
constexpr int64_t kFloat16 = 0;   // the operand dtype codes of the table's keys
constexpr int64_t kBFloat16 = 1;
constexpr uintptr_t kTmaAlign = 16;  // bytes: TMA and 16-byte vector loads

// The token bucket of m: the power of two at or above it (1, 2, 4, ..., 2^30, then 2^31 - 1).
int64_t bucket_of(int64_t m) {
  int64_t b = 1;
  while (b < m && b < (int64_t{1} << 30)) b <<= 1;
  return b < m ? INT_MAX : b;
}

struct Key {
  int64_t m, n, k, layout, dtype, device;
  bool operator==(const Key& o) const {
    return m == o.m && n == o.n && k == o.k && layout == o.layout && dtype == o.dtype &&
           device == o.device;
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = std::hash<int64_t>{}(key.m);
    for (int64_t v : {key.n, key.k, key.layout, key.dtype, key.device}) h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h;
  }
};

struct Entry {
  LaunchFn launch;           // null: cuBLAS serves this bucket without a bias
  LaunchBiasFn launch_bias;  // null: cuBLAS serves it with one
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

std::string registered(int64_t m, int64_t n, int64_t k, int64_t layout, int64_t dtype,
                       int64_t device);

// The table's dtype code of a tensor: kFloat16, kBFloat16, or -1 (a dtype no kernel serves).
int64_t dtype_of(const at::Tensor& t) {
  if (t.scalar_type() == at::kHalf) return kFloat16;
  if (t.scalar_type() == at::kBFloat16) return kBFloat16;
  return -1;
}

bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) % kTmaAlign) == 0; }

void* current_stream(const c10::Device& device) {
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
  return impl->getStream(device).native_handle();
}

// The table's entry for (bucket of m, n, k, layout, dtype, device): copied out under the lock. A
// missing key reads as found = false.
struct Lookup {
  bool found = false;
  LaunchFn launch = nullptr;
  LaunchBiasFn launch_bias = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

Lookup lookup(int64_t m, int64_t n, int64_t k, int64_t layout, int64_t dtype, int64_t device) {
  std::shared_lock<std::shared_mutex> lock(table_mutex);
  auto found = table.find({bucket_of(m), n, k, layout, dtype, device});
  if (found == table.end()) return {};
  const Entry& e = found->second;
  return {true, e.launch, e.launch_bias, e.workspace_bytes ? e.workspace.data_ptr() : nullptr,
          e.workspace_bytes};
}

// Shape, dtype and alignment checks both ops share: the reason to fall back, or kReasons.
Reason unservable(const at::Tensor& a, const at::Tensor& b, int64_t m, int64_t n, int64_t k) {
  if (dtype_of(a) < 0 || dtype_of(a) != dtype_of(b)) return kDtype;
  if (a.device() != b.device()) return kDevice;
  if (m == 0 || n == 0 || k == 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX) return kSize;
  if (!aligned(a.data_ptr()) || !aligned(b.data_ptr())) return kAlign;
  return kReasons;
}

const char* why(Reason reason) {
  switch (reason) {
    case kDtype: return "operands are not both float16 or both bfloat16";
    case kDevice: return "operands on different devices";
    case kSize: return "an empty or over-2^31 dimension";
    case kAlign: return "an operand's address is not 16-byte aligned (a view at an offset)";
    default: return "unservable operands";
  }
}

at::Tensor mm_cuda(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2) return fallback(a, b, kRank, "operands are not both 2-D");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (b.size(0) != k) return at::matmul(a, b);  // at::matmul says what is wrong
  const Reason bad = unservable(a, b, m, n, k);
  if (bad != kReasons) return fallback(a, b, bad, why(bad));
  const int64_t layout = layout_of(b);
  if (!a.is_contiguous() || layout < 0)
    return fallback(a, b, kLayout, "a is not row-major contiguous, or b is neither row-major "
                                   "(k, n) nor a transposed view of a row-major (n, k) tensor");
  const Lookup e = lookup(m, n, k, layout, dtype_of(a), a.device().index());
  if (!e.found)
    return fallback(a, b, kUnknown, "no kernel registered for this shape and device (gemmforge.matmul "
                                    "registers them; under torch.compile call it once before compiling)");
  if (!e.launch) return at::matmul(a, b);  // cuBLAS won this bucket
  c10::DeviceGuard guard(a.device());
  at::Tensor c = at::empty({m, n}, a.options());
  const int err = e.launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), static_cast<int>(m),
                           static_cast<int>(n), static_cast<int>(k), e.workspace,
                           static_cast<size_t>(e.workspace_bytes), current_stream(a.device()));
  if (err != 0)
    return fallback(a, b, kLaunch, "the kernel refused its arguments (cudaError " + std::to_string(err) +
                                   ", " + registered(m, n, k, layout, dtype_of(a),
                                                     a.device().index()) + ")");
  return c;
}

// y = x @ w^T + bias, as F.linear: x (..., k) row-major, w (n, k) row-major (layout nt).
// Anything the table does not serve goes to at::linear, which fuses the bias in cuBLASLt.
at::Tensor linear_cuda(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias) {
  const bool has_bias = bias.has_value() && bias->defined();
  if (x.dim() < 1 || w.dim() != 2 || x.size(-1) != w.size(1) || !x.is_contiguous() ||
      !w.is_contiguous() || (has_bias && (bias->dim() != 1 || bias->size(0) != w.size(0) ||
                                          bias->scalar_type() != x.scalar_type() || !bias->is_contiguous() ||
                                          bias->device() != x.device() || !aligned(bias->data_ptr()))))
    return at::linear(x, w, bias);
  const int64_t k = w.size(1), n = w.size(0);
  const int64_t m = k ? x.numel() / k : 0;
  if (unservable(x, w, m, n, k) != kReasons) return at::linear(x, w, bias);
  const Lookup e = lookup(m, n, k, kLayoutNT, dtype_of(x), x.device().index());
  if (has_bias ? !e.launch_bias : !e.launch) return at::linear(x, w, bias);
  c10::DeviceGuard guard(x.device());
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = n;
  at::Tensor y = at::empty(sizes, x.options());
  void* stream = current_stream(x.device());
  const int err = has_bias
      ? e.launch_bias(x.data_ptr(), w.data_ptr(), y.data_ptr(), bias->data_ptr(), static_cast<int>(m),
                      static_cast<int>(n), static_cast<int>(k), e.workspace,
                      static_cast<size_t>(e.workspace_bytes), stream)
      : e.launch(x.data_ptr(), w.data_ptr(), y.data_ptr(), static_cast<int>(m), static_cast<int>(n),
                 static_cast<int>(k), e.workspace, static_cast<size_t>(e.workspace_bytes), stream);
  if (err != 0) {
    if (!warned[kLaunch].exchange(true))
      TORCH_WARN("gemmforge.linear: the kernel refused its arguments (cudaError ", err, ", ",
                 registered(m, n, k, kLayoutNT, dtype_of(x), x.device().index()),
                 "); at::linear serves it");
    return at::linear(x, w, bias);
  }
  return y;
}

at::Tensor mm_other(const at::Tensor& a, const at::Tensor& b) {
  return fallback(a, b, kDevice, "operands are not CUDA tensors");
}

at::Tensor linear_other(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias) {
  return at::linear(x, w, bias);
}

at::Tensor mm_meta(const at::Tensor& a, const at::Tensor& b) { return at::matmul(a, b); }

// The Autograd key's linear: where autograd records, at::linear itself (its backward is
// ATen's); otherwise the kernels below autograd (the device's, or under torch.compile the
// fake-tensor one that gemmforge.torch_op registers).
at::Tensor linear_autograd(c10::DispatchKeySet keys, const at::Tensor& x, const at::Tensor& w,
                           const c10::optional<at::Tensor>& bias) {
  const bool bias_grad = bias.has_value() && bias->defined() && bias->requires_grad();
  if (at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() || bias_grad))
    return at::linear(x, w, bias);
  static const auto op = c10::Dispatcher::singleton()
      .findSchemaOrThrow("gemmforge::linear", "")
      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&)>();
  at::AutoDispatchBelowADInplaceOrView below;
  return op.redispatch(keys & c10::after_autograd_keyset, x, w, bias);
}

// Register (bucket of m, n, k, layout, dtype, device). launch / launch_bias: C entry
// addresses of a kernel of that operand dtype, 0 for "cuBLAS serves it" (both 0: the bucket
// is cuBLAS's). `m` may be any m of the bucket.
void register_kernel(int64_t m, int64_t n, int64_t k, int64_t layout, int64_t dtype,
                     int64_t device, int64_t launch, int64_t launch_bias, const at::Tensor& workspace,
                     int64_t workspace_bytes, const std::string& program) {
  TORCH_CHECK(layout == kLayoutNN || layout == kLayoutNT, "gemmforge._register: layout 0 (nn) or 1 (nt)");
  TORCH_CHECK(dtype == kFloat16 || dtype == kBFloat16,
              "gemmforge._register: dtype 0 (f16) or 1 (bf16)");
  TORCH_CHECK(m > 0 && n > 0 && k > 0, "gemmforge._register: m, n and k must be positive");
  TORCH_CHECK(workspace_bytes >= 0 && workspace.nbytes() >= static_cast<size_t>(workspace_bytes),
              "gemmforge._register: the workspace holds ", workspace.nbytes(), " bytes, not ",
              workspace_bytes);
  std::unique_lock<std::shared_mutex> lock(table_mutex);
  table[{bucket_of(m), n, k, layout, dtype, device}] =
      Entry{reinterpret_cast<LaunchFn>(static_cast<intptr_t>(launch)),
            reinterpret_cast<LaunchBiasFn>(static_cast<intptr_t>(launch_bias)), workspace,
            workspace_bytes, program};
}

std::string registered(int64_t m, int64_t n, int64_t k, int64_t layout, int64_t dtype,
                       int64_t device) {
  std::shared_lock<std::shared_mutex> lock(table_mutex);
  auto found = table.find({bucket_of(m), n, k, layout, dtype, device});
  return found == table.end() ? std::string() : found->second.program;
}

int64_t bucket(int64_t m) { return bucket_of(m); }

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
  lib.def("linear(Tensor x, Tensor w, Tensor? bias=None) -> Tensor");
  lib.def("_register(int m, int n, int k, int layout, int dtype, int device, int launch, "
          "int launch_bias, Tensor workspace, int workspace_bytes, str program) -> ()",
          &register_kernel);
  lib.def("_registered(int m, int n, int k, int layout, int dtype, int device) -> str",
          &registered);
  lib.def("_bucket(int m) -> int", &bucket);
  lib.def("_forget_all() -> int", &forget_all);
}

TORCH_LIBRARY_IMPL(gemmforge, CUDA, lib) {
  lib.impl("mm", &mm_cuda);
  lib.impl("linear", &linear_cuda);
}
TORCH_LIBRARY_IMPL(gemmforge, CPU, lib) {
  lib.impl("mm", &mm_other);
  lib.impl("linear", &linear_other);
}
TORCH_LIBRARY_IMPL(gemmforge, Autograd, lib) { lib.impl("linear", &linear_autograd); }
TORCH_LIBRARY_IMPL(gemmforge, Meta, lib) { lib.impl("mm", &mm_meta); }
