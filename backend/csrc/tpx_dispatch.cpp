// tpx's compute hot path in C++: a boxed PrivateUse1 kernel that runs the CPU kernel on zero-copy
// CPU aliases of the inputs (the same thing backend/kernels.py's run_info does, without Python).
//
// Per call: tpx tensors (also inside tensor lists) become CPU aliases and tpx devices the CPU
// device; a non-scalar CPU tensor next to tpx ones is the mixed-device error; float32 matmul
// operands are rounded to bfloat16 when tpx's matmul rule says so; the op is called again (the
// dispatcher now picks the CPU kernel); results that are aliases of inputs become the caller's own
// tpx tensors (in-place ops), other CPU results become tpx tensors over the same memory, and a
// float64 result is refused. Calls and time are counted per op (read by backend/stats.py).
//
// Random ops (a Generator argument, or native_dropout) draw from tpx's generators here with
// backend/rng.py's protocol: the op's tpx generator (its own or its device's default one) names
// the CPU generator the CPU kernel runs on, and its offset moves by the op's element count.
//
// Python keeps the special cases (reached through the PrivateUse3 key, see TpxKernel::python):
// data-dependent-shape ops on their first call (the warning) and in strict mode, syncs (item),
// random ops under TPX_RNG=host (parity's side runs), and any call while the profiler runs (it
// labels the op "tpx::<name>").
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/profiler/api.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <atomic>
#include <functional>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

// Hidden visibility: calls between the extension's own functions (from_cpu, to_cpu_plain, adopt, the
// counters, ...) go straight to them instead of through the PLT, and their code is not exported.
#pragma GCC visibility push(hidden)
namespace tpx {

// defined in tpx_ext.cpp
at::Tensor to_cpu(const at::Tensor& t);
at::Tensor from_cpu(const at::Tensor& c, int64_t index);
// fresh: ``c`` is a kernel's own CPU result, dropped by the caller right after
at::Tensor from_cpu(const at::Tensor& c, int64_t index, bool fresh);
bool float64_allowed();
// the generator protocol (tpx_ext.cpp, as backend/rng.py's acquire/advance)
bool rng_host_stream();
std::optional<at::Generator> rng_acquire(const at::Generator& g);
void rng_advance(const at::Generator& g, uint64_t increment);
// tpx_fast.cpp: unboxed kernels for the hot ops, in front of the generic one
std::vector<std::string> install_fast_kernels(torch::Library& lib,
                                              const std::function<bool(const std::string&)>& wanted);

namespace {

constexpr c10::DeviceType kTpx = c10::DeviceType::PrivateUse1;

std::atomic<bool> g_matmul_bf16{true};
std::atomic<int> g_fallback_epoch{1};
std::mutex g_cfg_mu;
std::unordered_set<std::string> g_fallback_ops;  // guarded by g_cfg_mu
// A fallback op runs here (no Python) once Python has warned about it (or warnings are off) and
// strict mode is off: Python owns the warning and the strict-mode error.
std::atomic<bool> g_strict{false};
std::atomic<bool> g_warn_fallback{true};
std::unordered_set<std::string> g_fallback_warned;  // guarded by g_cfg_mu

// Device-to-host syncs and transfers counted here (merged into torch.tpx.op_stats() by stats.py).
std::mutex g_sync_mu;
std::unordered_map<std::string, int64_t> g_syncs;  // guarded by g_sync_mu
// host->device bytes, device->host bytes, host->device copies, device->host copies
std::atomic<int64_t> g_transfers[4];

void record_sync(const std::string& kind) {
  std::lock_guard<std::mutex> lock(g_sync_mu);
  ++g_syncs[kind];
}

void record_transfer(bool to_device, int64_t nbytes) {
  g_transfers[to_device ? 0 : 1].fetch_add(nbytes, std::memory_order_relaxed);
  g_transfers[to_device ? 2 : 3].fetch_add(1, std::memory_order_relaxed);
}

const std::unordered_set<std::string>& mixed_ok_ops() {
  static const std::unordered_set<std::string> s{"index", "index_put_", "_index_put_impl_", "index_put",
                                                  "copy_", "_copy_from", "_copy_from_and_resize",
                                                  "_to_copy", "set_"};
  return s;
}

std::vector<int> matmul_operands(const std::string& base) {
  if (base == "mm" || base == "bmm" || base == "mv" || base == "dot" || base == "vdot" || base == "matmul" ||
      base == "linear" || base == "convolution" || base == "_convolution")
    return {0, 1};
  if (base == "addmm" || base == "addmv" || base == "baddbmm" || base == "addbmm") return {1, 2};
  if (base == "_scaled_dot_product_flash_attention_for_cpu") return {0, 1, 2};
  if (base == "_scaled_dot_product_flash_attention_for_cpu_backward") return {0, 1, 2, 3};
  return {};
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct OpCounter {
  std::string full;
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> ns{0};         // time of the timed calls
  std::atomic<int64_t> timed{0};      // calls timed (0: every call, see ns_estimate)
  std::atomic<uint32_t> tick{0};      // which calls are timed (kTimeEvery; from the first one after a reset)
  std::atomic<int64_t> fallbacks{0};  // calls run as counted CPU fallbacks
  // The total time of all calls: the timed calls' time scaled to every call.
  int64_t ns_estimate() const {
    int64_t n = ns.load(), t = timed.load(), c = calls.load();
    return t > 0 && t < c ? static_cast<int64_t>(static_cast<double>(n) * c / t) : n;
  }
};
// The generic kernel times one call in kTimeEvery (the first one included): two clock reads cost
// as much as a small op's whole dispatch on some machines; op_stats() scales the sample up.
constexpr int64_t kTimeEvery = 8;
std::mutex g_counters_mu;
std::vector<OpCounter*> g_counters;  // leaked with their kernels (kernels live as long as the process)

struct Alias {
  at::Tensor cpu;  // held until the results are wrapped: a freed alias's address may be reused
  at::Tensor tpx;
};

struct Args {
  c10::SmallVector<Alias, 4> aliases;  // no heap allocation for the usual few tensor arguments
  int tpx_index = -2;     // the tpx tensors' device index (-2: no tpx tensor)
  int device_index = -2;  // a tpx device named by an argument (device="tpx:1"), -2: none
  bool cpu_nonscalar = false;
  // a tensor that needs more than the CPU kernel itself (lazy conj/neg bits, a zero tensor, a
  // non-strided layout, a Python subclass): the call then goes through the whole dispatcher
  bool full_dispatch = false;
};

void note_tensor(const at::Tensor& t, Args& a) {
  if (t.is_conj() || t.is_neg() || t._is_zerotensor() || t.layout() != c10::kStrided ||
      t.key_set().has(c10::DispatchKey::Python))
    a.full_dispatch = true;
}

at::Tensor alias_of(const at::Tensor& t, Args& a) {
  int idx = t.device().index();
  if (a.tpx_index >= 0 && idx >= 0 && idx != a.tpx_index) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, tpx:",
                std::min(a.tpx_index, idx), " and tpx:", std::max(a.tpx_index, idx), "!");
  }
  at::Tensor c = to_cpu(t);
  note_tensor(c, a);
  a.aliases.push_back({c, t});
  a.tpx_index = idx;
  return c;
}

// Replace tpx tensors/devices in one argument by their CPU counterparts.
void unwrap_arg(c10::IValue& v, Args& a) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return;
    auto dt = t.device().type();
    if (dt == kTpx) {
      v = alias_of(t, a);
      return;
    }
    if (dt == c10::kCPU && t.dim() != 0) a.cpu_nonscalar = true;
    if (dt != c10::kCPU) a.full_dispatch = true;
    note_tensor(t, a);
    return;
  }
  if (v.isTensorList()) {
    auto list = v.toTensorList();
    bool any = false;
    for (size_t i = 0; i < list.size(); ++i) {
      at::Tensor t = list.get(i);
      if (t.defined() && t.device().type() == kTpx) {
        any = true;
        break;
      }
    }
    if (!any) {
      for (size_t i = 0; i < list.size(); ++i) {
        at::Tensor t = list.get(i);
        if (!t.defined()) continue;
        if (t.device().type() == c10::kCPU && t.dim() != 0) a.cpu_nonscalar = true;
        if (t.device().type() != c10::kCPU) a.full_dispatch = true;
        note_tensor(t, a);
      }
      return;
    }
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      at::Tensor t = list.get(i);
      if (t.defined() && t.device().type() == kTpx) {
        out.push_back(alias_of(t, a));
      } else {
        if (t.defined()) {
          if (t.device().type() == c10::kCPU && t.dim() != 0) a.cpu_nonscalar = true;
          if (t.device().type() != c10::kCPU) a.full_dispatch = true;
          note_tensor(t, a);
        }
        out.push_back(t);
      }
    }
    v = std::move(out);
    return;
  }
  if (v.isList()) {  // e.g. Tensor?[] (index, index_put_)
    auto list = v.toList();
    if (!list.elementType()->isSubtypeOf(*c10::OptionalType::ofTensor())) return;
    c10::List<std::optional<at::Tensor>> out;
    out.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      c10::IValue e = list.get(i);
      if (e.isTensor()) {
        const at::Tensor& t = e.toTensor();
        if (t.defined() && t.device().type() == kTpx) {
          out.push_back(alias_of(t, a));
          continue;
        }
        if (t.defined()) {
          if (t.device().type() == c10::kCPU && t.dim() != 0) a.cpu_nonscalar = true;
          if (t.device().type() != c10::kCPU) a.full_dispatch = true;
          note_tensor(t, a);
        }
        out.push_back(t);
      } else {
        out.push_back(std::nullopt);
      }
    }
    v = std::move(out);
    return;
  }
  if (v.isDevice()) {
    c10::Device d = v.toDevice();
    if (d.type() == kTpx) {
      if (a.device_index == -2) a.device_index = d.index();
      v = c10::Device(c10::kCPU);
    }
    return;
  }
}

[[noreturn]] void float64_refused(const std::string& full) {
  TORCH_CHECK_TYPE(false, "tpx does not support torch.float64 (", full,
                   "): the device has no float64 units. Use torch.float32 instead (e.g. .float(), "
                   "dtype=torch.float32, or torch.set_default_dtype(torch.float32)), or keep this "
                   "computation on the CPU.");
}

at::Tensor wrap_tensor(const at::Tensor& t, const Args& a, bool f64_ok, int64_t index, const std::string& full) {
  if (!t.defined()) return t;
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  for (const auto& al : a.aliases)
    if (al.cpu.unsafeGetTensorImpl() == impl) return al.tpx;
  if (t.device().type() != c10::kCPU) return t;
  auto st = t.scalar_type();
  if ((st == c10::kDouble || st == c10::kComplexDouble) && !f64_ok) float64_refused(full);
  return from_cpu(t, index, true);
}

c10::IValue wrap_value(const c10::IValue& v, const Args& a, bool f64_ok, int64_t index, const std::string& full) {
  if (v.isTensor()) return wrap_tensor(v.toTensor(), a, f64_ok, index, full);
  if (v.isTensorList()) {
    auto list = v.toTensorList();
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) out.push_back(wrap_tensor(list.get(i), a, f64_ok, index, full));
    return out;
  }
  if (v.isTuple()) {
    const auto& elems = v.toTupleRef().elements();
    std::vector<c10::IValue> out;
    out.reserve(elems.size());
    for (const auto& e : elems) out.push_back(wrap_value(e, a, f64_ok, index, full));
    return c10::ivalue::Tuple::create(std::move(out));
  }
  return v;
}

// After an out= or in-place view op: copy the CPU aliases' new metadata to the caller's tpx
// tensors (and move the data if the CPU kernel had to grow an output into new memory).
void sync_out_args(const Args& a) {
  for (const auto& al : a.aliases) {
    const at::Tensor& c = al.cpu;
    const at::Tensor& t = al.tpx;
    if (c.data_ptr() == t.data_ptr() && c.sizes() == t.sizes() && c.strides() == t.strides()) continue;
    if (c.storage().data() == t.storage().data()) {
      at::Tensor(t).set_(t.storage(), c.storage_offset(), c.sizes(), c.strides());
    } else {
      t.resize_(c.sizes());
      if (c.strides() != t.strides()) at::Tensor(t).set_(t.storage(), t.storage_offset(), c.sizes(), c.strides());
      to_cpu(t).copy_(c);
    }
  }
}

// The largest element count among an op's results (how far a random op moves its generator).
int64_t largest_numel(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() ? v.toTensor().numel() : 0;
  int64_t n = 0;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) n = std::max(n, t.defined() ? t.numel() : int64_t(0));
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) n = std::max(n, largest_numel(e));
  }
  return n;
}

uint64_t rng_increment(int64_t numel) { return static_cast<uint64_t>((std::max<int64_t>(numel, 1) + 3) / 4 * 4); }

// For an op that draws from the CPU default generator itself (native_dropout): that generator
// runs ``cpu``'s stream for the call and gets its own state back afterwards (rng.host_stream).
struct HostStream {
  at::Generator host, cpu;
  at::Tensor saved;
  explicit HostStream(at::Generator c) : host(at::detail::getDefaultCPUGenerator()), cpu(std::move(c)) {
    at::Tensor st;
    {
      std::lock_guard<std::mutex> lock(cpu.mutex());
      st = cpu.get_state();
    }
    std::lock_guard<std::mutex> lock(host.mutex());
    saved = host.get_state();
    host.set_state(st);
  }
  ~HostStream() {
    try {
      at::Tensor st;
      {
        std::lock_guard<std::mutex> lock(host.mutex());
        st = host.get_state();
        host.set_state(saved);
      }
      std::lock_guard<std::mutex> lock(cpu.mutex());
      cpu.set_state(st);
    } catch (...) {
    }
  }
};

struct TpxKernel final : c10::OperatorKernel {
  std::atomic<bool> ready{false};
  bool python_only = false;  // syncs (item): always Python
  int rng_arg = -1;          // a random op's Generator argument (-1: none)
  bool host_rng = false;     // a random op that draws from the CPU default generator itself
  bool mutable_out = false;  // out= and in-place view ops
  bool fallback = false;     // a data-dependent-shape op (config): Python
  int epoch = 0;
  bool mixed_ok = false;
  std::vector<int> matmul;
  std::string name, base;
  OpCounter* counter = nullptr;

  void init(const c10::OperatorHandle& op) {
    const auto& schema = op.schema();
    name = schema.name();
    base = name.rfind("aten::", 0) == 0 ? name.substr(6) : name;
    mutable_out = op.hasTag(at::Tag::inplace_view);
    for (const auto& arg : schema.arguments())
      if (arg.alias_info() && arg.alias_info()->isWrite() && arg.kwarg_only()) mutable_out = true;
    python_only = base == "_local_scalar_dense" || base == "item";
    host_rng = base == "native_dropout";  // rng.HOST_RNG_OPS
    const auto& args = schema.arguments();
    for (size_t i = 0; i < args.size(); ++i) {
      auto t = args[i].type();
      if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
      if (t->kind() == c10::TypeKind::GeneratorType) rng_arg = static_cast<int>(i);  // draws from a tpx generator
    }
    mixed_ok = mixed_ok_ops().count(base) > 0;
    matmul = matmul_operands(base);
    counter = new OpCounter();
    counter->full = name;
    {
      std::lock_guard<std::mutex> lock(g_counters_mu);
      g_counters.push_back(counter);
    }
    ready = true;
  }

  bool fallback_here = false;  // a fallback op this kernel may run itself (see g_fallback_warned)

  bool is_fallback() {
    int e = g_fallback_epoch.load(std::memory_order_relaxed);
    if (e != epoch) {
      std::lock_guard<std::mutex> lock(g_cfg_mu);
      fallback = g_fallback_ops.count(base) > 0;
      fallback_here = fallback && !g_strict.load() &&
                      (!g_warn_fallback.load() || g_fallback_warned.count(base) > 0);
      epoch = e;
    }
    return fallback;
  }

  // The Python path: backend/kernels.py registers its kernels (the fallback and the direct
  // ones) for the otherwise unused PrivateUse3 key too, so that this redispatch reaches them.
  static void python(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse3), stack);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    if (!ready) {
      static std::mutex init_mu;
      std::lock_guard<std::mutex> lock(init_mu);
      if (!ready) init(op);
    }
    bool random = rng_arg >= 0 || host_rng;
    if (python_only || torch::profiler::impl::profilerEnabled() || (random && rng_host_stream()))
      return python(op, stack);
    bool fb = is_fallback();
    if (fb && !fallback_here) return python(op, stack);
    bool timed = counter->tick.fetch_add(1, std::memory_order_relaxed) % kTimeEvery == 0;
    int64_t t0 = timed ? now_ns() : 0;
    if (fb) record_sync(base);
    size_t nargs = op.schema().arguments().size();
    size_t first = stack->size() - nargs;
    Args a;
    for (size_t i = 0; i < nargs; ++i) unwrap_arg((*stack)[first + i], a);
    // results go to the device the op names (empty_like(x, device="tpx:1")), else to its tensors'
    if (a.device_index != -2 && (a.device_index >= 0 || a.tpx_index == -2)) a.tpx_index = a.device_index;
    if (a.cpu_nonscalar && a.tpx_index != -2 && !mixed_ok) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, tpx:",
                  a.tpx_index >= 0 ? a.tpx_index : 0, " and cpu!");
    }
    if (!matmul.empty() && g_matmul_bf16.load(std::memory_order_relaxed)) {
      for (int i : matmul) {
        if (static_cast<size_t>(i) >= nargs) continue;
        auto& v = (*stack)[first + i];
        if (v.isTensor() && v.toTensor().defined() && v.toTensor().scalar_type() == at::kFloat)
          v = v.toTensor().to(at::kBFloat16).to(at::kFloat);
      }
    }
    // A random op: the tpx generator it draws from (its own, or the default one of its device; a
    // CPU generator argument is the CPU kernel's as it is) and the CPU generator it runs on.
    at::Generator gen;
    std::optional<at::Generator> cpu_gen;
    if (random) {
      c10::IValue* garg = rng_arg >= 0 ? &(*stack)[first + rng_arg] : nullptr;
      if (garg == nullptr || garg->isNone()) {
        gen = at::detail::getPrivateUse1Hooks().getDefaultGenerator(
            static_cast<c10::DeviceIndex>(a.tpx_index >= 0 ? a.tpx_index : -1));
      } else if (garg->isGenerator() && garg->toGenerator().device().type() == kTpx) {
        gen = garg->toGenerator();
      }
      if (gen.defined()) {
        cpu_gen = rng_acquire(gen);
        if (garg != nullptr) *garg = cpu_gen.has_value() ? c10::IValue(*cpu_gen) : c10::IValue();
      }
    }
    // Every tensor is now a plain strided CPU tensor: straight to the CPU kernel (the dispatch
    // table's CPU entry, a composite kernel for the ops without a CPU one), without recomputing
    // the dispatch keys or running the profiler hooks a second time.
    {
      std::optional<HostStream> host;
      if (host_rng && cpu_gen.has_value()) host.emplace(*cpu_gen);
      if (a.full_dispatch || a.aliases.empty())
        op.callBoxed(stack);
      else
        op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    }
    if (mutable_out) sync_out_args(a);
    size_t nout = op.schema().returns().size();
    size_t ofirst = stack->size() - nout;
    if (gen.defined()) {
      int64_t numel = 0;
      for (size_t i = 0; i < nout; ++i) numel = std::max(numel, largest_numel((*stack)[ofirst + i]));
      rng_advance(gen, rng_increment(numel));
    }
    bool f64_ok = float64_allowed();
    int64_t index = a.tpx_index >= 0 ? a.tpx_index : -1;
    for (size_t i = 0; i < nout; ++i) {
      auto& v = (*stack)[ofirst + i];
      v = wrap_value(v, a, f64_ok, index, counter->full);
    }
    counter->calls.fetch_add(1, std::memory_order_relaxed);
    if (timed) {
      counter->ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
      counter->timed.fetch_add(1, std::memory_order_relaxed);
    }
    if (fb) counter->fallbacks.fetch_add(1, std::memory_order_relaxed);
  }
};

// ---------------------------------------------------------------- fused RNN cells
// PyTorch's LSTM/GRU take the fused-cell path on a PrivateUse1 device and the CPU build has no
// kernel for those ops: these compute the cell equations with CPU ops on zero-copy aliases (the
// same formulas, and the same workspace layout, as backend/rnn_kernels.py, the Python kernels
// that run while the profiler is on or before the extension is built).

OpCounter* new_counter(const char* full) {
  auto* c = new OpCounter();
  c->full = full;
  std::lock_guard<std::mutex> lock(g_counters_mu);
  g_counters.push_back(c);
  return c;
}

struct Timed {
  OpCounter* c;
  int64_t t0 = now_ns();
  ~Timed() {
    c->calls.fetch_add(1, std::memory_order_relaxed);
    c->ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  }
};

at::Tensor opt_cpu(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? to_cpu(*t) : at::Tensor();
}

at::Tensor dev(const at::Tensor& c, int64_t index) { return from_cpu(c.contiguous(), index, true); }

constexpr auto kPython = c10::DispatchKey::PrivateUse3;

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  if (torch::profiler::impl::profilerEnabled()) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("aten::_thnn_fused_lstm_cell", "")
                         .typed<decltype(lstm_cell)>();
    return op.redispatch(c10::DispatchKeySet(kPython), input_gates, hidden_gates, cx, input_bias, hidden_bias);
  }
  static OpCounter* counter = new_counter("aten::_thnn_fused_lstm_cell");
  Timed timed{counter};
  at::Tensor gates = at::add(to_cpu(input_gates), to_cpu(hidden_gates));
  at::Tensor ib = opt_cpu(input_bias), hb = opt_cpu(hidden_bias);
  if (ib.defined()) gates = gates + ib;
  if (hb.defined()) gates = gates + hb;
  auto ch = gates.chunk(4, 1);
  at::Tensor i = ch[0].sigmoid(), f = ch[1].sigmoid(), g = ch[2].tanh(), o = ch[3].sigmoid();
  at::Tensor cy = f * to_cpu(cx) + i * g;
  at::Tensor hy = o * cy.tanh();
  at::Tensor workspace = at::cat({i, f, g, o}, 1);
  int64_t index = input_gates.device().index();
  return {dev(hy, index), dev(cy, index), dev(workspace, index)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  if (torch::profiler::impl::profilerEnabled()) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("aten::_thnn_fused_lstm_cell_backward_impl", "")
                         .typed<decltype(lstm_cell_backward)>();
    return op.redispatch(c10::DispatchKeySet(kPython), grad_hy, grad_cy, cx, cy, workspace, has_bias);
  }
  static OpCounter* counter = new_counter("aten::_thnn_fused_lstm_cell_backward_impl");
  Timed timed{counter};
  auto ch = to_cpu(workspace).chunk(4, 1);
  const at::Tensor &i = ch[0], &f = ch[1], &g = ch[2], &o = ch[3];
  at::Tensor cx_ = to_cpu(cx), cy_ = to_cpu(cy);
  at::Tensor tanh_cy = cy_.tanh();
  at::Tensor d_cy = at::zeros_like(cy_), d_o = at::zeros_like(cy_);
  at::Tensor gh = opt_cpu(grad_hy), gc = opt_cpu(grad_cy);
  if (gh.defined()) {
    d_cy = d_cy + gh * o * (1 - tanh_cy * tanh_cy);
    d_o = gh * tanh_cy * o * (1 - o);
  }
  if (gc.defined()) d_cy = d_cy + gc;
  at::Tensor d_i = d_cy * g * i * (1 - i);
  at::Tensor d_f = d_cy * cx_ * f * (1 - f);
  at::Tensor d_g = d_cy * i * (1 - g * g);
  at::Tensor grad_gates = at::cat({d_i, d_f, d_g, d_o}, 1);
  at::Tensor grad_cx = d_cy * f;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::empty({0}, grad_gates.options());
  int64_t index = workspace.device().index();
  return {dev(grad_gates, index), dev(grad_cx, index), dev(grad_bias, index)};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  if (torch::profiler::impl::profilerEnabled()) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("aten::_thnn_fused_gru_cell", "")
                         .typed<decltype(gru_cell)>();
    return op.redispatch(c10::DispatchKeySet(kPython), input_gates, hidden_gates, hx, input_bias, hidden_bias);
  }
  static OpCounter* counter = new_counter("aten::_thnn_fused_gru_cell");
  Timed timed{counter};
  at::Tensor ig = to_cpu(input_gates), hg = to_cpu(hidden_gates);
  at::Tensor ib = opt_cpu(input_bias), hb = opt_cpu(hidden_bias);
  if (ib.defined()) ig = ig + ib;
  if (hb.defined()) hg = hg + hb;
  auto ic = ig.chunk(3, 1);
  auto hc = hg.chunk(3, 1);
  at::Tensor r = (ic[0] + hc[0]).sigmoid();
  at::Tensor z = (ic[1] + hc[1]).sigmoid();
  at::Tensor n = (ic[2] + r * hc[2]).tanh();
  at::Tensor hx_ = to_cpu(hx);
  at::Tensor hy = n + z * (hx_ - n);
  at::Tensor workspace = at::cat({r, z, n, hx_, hc[2]}, 1);
  int64_t index = input_gates.device().index();
  return {dev(hy, index), dev(workspace, index)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  if (torch::profiler::impl::profilerEnabled()) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("aten::_thnn_fused_gru_cell_backward", "")
                         .typed<decltype(gru_cell_backward)>();
    return op.redispatch(c10::DispatchKeySet(kPython), grad_hy, workspace, has_bias);
  }
  static OpCounter* counter = new_counter("aten::_thnn_fused_gru_cell_backward");
  Timed timed{counter};
  auto ch = to_cpu(workspace).chunk(5, 1);
  const at::Tensor &r = ch[0], &z = ch[1], &n = ch[2], &hx = ch[3], &hn = ch[4];
  at::Tensor gh = to_cpu(grad_hy);
  at::Tensor d_n = gh * (1 - z);
  at::Tensor d_z = gh * (hx - n);
  at::Tensor d_hx = gh * z;
  at::Tensor d_npre = d_n * (1 - n * n);
  at::Tensor d_hn = d_npre * r;
  at::Tensor d_rpre = d_npre * hn * r * (1 - r);
  at::Tensor d_zpre = d_z * z * (1 - z);
  at::Tensor grad_ig = at::cat({d_rpre, d_zpre, d_npre}, 1);
  at::Tensor grad_hg = at::cat({d_rpre, d_zpre, d_hn}, 1);
  at::Tensor empty = at::empty({0}, grad_ig.options());
  at::Tensor gib = has_bias ? grad_ig.sum(0) : empty;
  at::Tensor ghb = has_bias ? grad_hg.sum(0) : empty;
  int64_t index = workspace.device().index();
  return {dev(grad_ig, index), dev(grad_hg, index), dev(d_hx, index), dev(gib, index), dev(ghb, index)};
}

// ---------------------------------------------------------------- copies
// _to_copy of a tpx tensor (.to(dtype), .cpu(), .float(), autocast's casts) and _copy_from(_and_resize)
// (copy_ into or out of tpx): the same rules as backend/copies.py, whose Python kernels they
// replace once the extension is loaded. These are where transfers and syncs are counted.

int64_t nbytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

bool is_f64(c10::ScalarType st) { return st == c10::kDouble || st == c10::kComplexDouble; }

at::Tensor to_copy(const at::Tensor& x, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                   std::optional<c10::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<c10::MemoryFormat> memory_format) {
  static OpCounter* counter = new_counter("aten::_to_copy");
  Timed timed{counter};
  c10::Device target = device.has_value() ? *device : x.device();
  c10::ScalarType st = dtype.has_value() ? *dtype : x.scalar_type();
  if (target.type() == kTpx && is_f64(st) && !float64_allowed())
    float64_refused(std::string("aten::_to_copy to torch.") + (st == c10::kDouble ? "float64" : "complex128"));
  TORCH_CHECK(!layout.has_value() || *layout == c10::kStrided,
              "tpx: only strided tensors are supported, got layout=", *layout);
  TORCH_CHECK(target.type() == kTpx || target.type() == c10::kCPU, "tpx: cannot copy a tpx tensor to ", target,
              "; move it to the CPU first");
  at::Tensor cx = to_cpu(x);
  bool pin = pin_memory.value_or(false) && target.type() == c10::kCPU;
  at::Tensor out = at::empty_like(cx, cx.options().dtype(st).pinned_memory(pin),
                                  memory_format.value_or(c10::MemoryFormat::Preserve));
  out.copy_(cx);
  if (target.type() == c10::kCPU) {
    record_transfer(false, nbytes(out));
    if (!non_blocking) record_sync("cpu");
    return out;
  }
  if (x.device().type() == c10::kCPU) record_transfer(true, nbytes(out));
  return from_cpu(out, target.has_index() ? target.index() : -1, true);
}

at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  static OpCounter* counter = new_counter("aten::copy_");
  Timed timed{counter};
  bool src_tpx = src.device().type() == kTpx, dst_tpx = dst.device().type() == kTpx;
  if (dst_tpx && is_f64(dst.scalar_type()) && !float64_allowed()) float64_refused("aten::copy_");
  at::Tensor csrc = src_tpx ? to_cpu(src) : src;
  at::Tensor cdst = dst_tpx ? to_cpu(dst) : dst;
  TORCH_CHECK(csrc.device().type() == c10::kCPU && cdst.device().type() == c10::kCPU, "tpx: cannot copy from ",
              src.device(), " to ", dst.device());
  cdst.copy_(csrc);
  if (src_tpx && !dst_tpx) {
    record_transfer(false, nbytes(dst));
    if (!non_blocking) record_sync("copy_to_host");
  } else if (dst_tpx && !src_tpx) {
    record_transfer(true, nbytes(dst));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.sizes() != src.sizes()) dst.resize_(src.sizes());
  return copy_from(src, dst, false);
}

int64_t install_copy_kernels(torch::Library& lib) {
  auto& d = c10::Dispatcher::singleton();
  auto free = [&](const char* name) {
    auto op = d.findOp(c10::OperatorName(std::string("aten::") + name, ""));
    return op && !op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1);
  };
  int64_t n = 0;
  if (free("_to_copy")) lib.impl("_to_copy", TORCH_FN(to_copy)), ++n;
  if (free("_copy_from")) lib.impl("_copy_from", TORCH_FN(copy_from)), ++n;
  if (free("_copy_from_and_resize")) lib.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize)), ++n;
  return n;
}

// The cell kernels above, for each of the ops that has no tpx kernel yet (in the process that
// built the extension, the Python kernels registered first keep the ops).
int64_t install_rnn_kernels(torch::Library& lib) {
  auto& d = c10::Dispatcher::singleton();
  auto free = [&](const char* name) {
    auto op = d.findOp(c10::OperatorName(std::string("aten::") + name, ""));
    return op && !op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1);
  };
  int64_t n = 0;
  if (free("_thnn_fused_lstm_cell")) lib.impl("_thnn_fused_lstm_cell", TORCH_FN(lstm_cell)), ++n;
  if (free("_thnn_fused_lstm_cell_backward_impl"))
    lib.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward)), ++n;
  if (free("_thnn_fused_gru_cell")) lib.impl("_thnn_fused_gru_cell", TORCH_FN(gru_cell)), ++n;
  if (free("_thnn_fused_gru_cell_backward")) lib.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward)), ++n;
  return n;
}

std::vector<std::unique_ptr<torch::Library>> g_libs;
std::mutex g_libs_mu;

bool plain_fallback_op(const c10::OperatorHandle& op) {
  using K = c10::DispatchKey;
  return !op.hasKernelForDispatchKey(K::PrivateUse1) && !op.hasKernelForDispatchKey(K::CompositeExplicitAutograd) &&
         !op.hasKernelForDispatchKey(K::CompositeExplicitAutogradNonFunctional) &&
         !op.hasKernelForDispatchKey(K::CompositeImplicitAutograd) && op.hasKernelForDispatchKey(K::CPU);
}

// Give every aten op that would reach tpx's (Python) backend fallback a C++ kernel, plus the
// named ops ("op" or "op.overload": the ones Python would otherwise give direct kernels).
// Ops that already have a tpx kernel keep it. Returns the number of kernels registered.
int64_t install_kernels(const std::vector<std::string>& forced) {
  std::lock_guard<std::mutex> lock(g_libs_mu);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                              __FILE__, __LINE__);
  int64_t n = 0;
  auto& d = c10::Dispatcher::singleton();
  std::unordered_set<std::string> done;
  // The hot ops first: unboxed kernels (tpx_fast.cpp) for those this function would give the
  // generic kernel, which they hand what they do not run themselves through PrivateUse2.
  std::unordered_set<std::string> forced_set(forced.begin(), forced.end());
  auto wanted = [&](const std::string& key) {
    auto dot = key.find('.');
    std::string base = dot == std::string::npos ? key : key.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : key.substr(dot + 1);
    auto op = d.findOp(c10::OperatorName("aten::" + base, overload));
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return false;
    // (also an op of tpx_fast.cpp's list with a CompositeExplicitAutograd kernel: the CPU key runs
    // that kernel on the CPU aliases, where tpx would run its pieces one tpx op at a time)
    return forced_set.count(key) > 0 || forced_set.count(base) > 0 || plain_fallback_op(*op) ||
           op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
  };
  auto slow = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse2,
                                               __FILE__, __LINE__);
  for (const auto& key : install_fast_kernels(*lib, wanted)) {
    slow->impl(key.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<TpxKernel>()));
    done.insert(key);
    ++n;
  }
  g_libs.push_back(std::move(slow));
  for (const auto& qual : forced) {
    std::string base = qual, overload;
    auto dot = qual.find('.');
    if (dot != std::string::npos) {
      base = qual.substr(0, dot);
      overload = qual.substr(dot + 1);
    }
    auto op = d.findOp(c10::OperatorName("aten::" + base, overload));
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    std::string key = overload.empty() ? base : base + "." + overload;
    if (!done.insert(key).second) continue;
    lib->impl(key.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<TpxKernel>()));
    ++n;
  }
  for (const auto& name : d.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = d.findOp(name);
    if (!op || !plain_fallback_op(*op)) continue;
    std::string key = name.name.substr(6);
    if (!name.overload_name.empty()) key += "." + name.overload_name;
    if (!done.insert(key).second) continue;
    lib->impl(key.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<TpxKernel>()));
    ++n;
  }
  n += install_rnn_kernels(*lib);
  n += install_copy_kernels(*lib);
  g_libs.push_back(std::move(lib));
  return n;
}

// torch.compile's runtime wrapper (backend/compile.py): the CPU views of a graph's tpx inputs,
// and its outputs flagged in ``on_tpx`` wrapped back as tpx tensors, each in one call.
py::list to_cpu_list(const py::list& xs) {
  py::list out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    PyObject* p = xs[i].ptr();
    if (THPVariable_Check(p)) {
      const at::Tensor& t = THPVariable_Unpack(p);
      if (t.defined() && t.device().type() == kTpx) {
        out[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(to_cpu(t)));
        continue;
      }
    }
    out[i] = xs[i];
  }
  return out;
}

py::list from_cpu_list(const py::sequence& outs, const std::vector<bool>& on_tpx, int64_t index) {
  size_t n = outs.size();
  py::list out(n);
  for (size_t i = 0; i < n; ++i) {
    py::object o = outs[i];
    PyObject* p = o.ptr();
    if (i < on_tpx.size() && on_tpx[i] && THPVariable_Check(p)) {
      const at::Tensor& t = THPVariable_Unpack(p);
      if (t.defined() && t.device().type() == c10::kCPU) {
        out[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(from_cpu(t, index)));
        continue;
      }
    }
    out[i] = o;
  }
  return out;
}

}  // namespace

// For tpx_fast.cpp: the counters, configuration and errors the generic kernel uses.
struct FastCount : OpCounter {};
std::vector<FastCount*> g_fast_counters;  // guarded by g_counters_mu
FastCount* fast_counter(const char* full) {
  auto* c = new FastCount();
  c->full = full;
  std::lock_guard<std::mutex> lock(g_counters_mu);
  g_counters.push_back(c);
  g_fast_counters.push_back(c);
  return c;
}
// Which calls are timed: the completed-call count (fast_done adds to it) read, not bumped, so a call
// costs one atomic add for its counting instead of two (one call in kTimeEvery, the first one after
// a reset included, as the generic kernel's tick gives; with several threads the sample is as good).
__attribute__((hot)) bool fast_timed(FastCount* c) { return c->calls.load(std::memory_order_relaxed) % kTimeEvery == 0; }
__attribute__((hot)) void fast_done(FastCount* c, bool timed, int64_t t0) {
  c->calls.fetch_add(1, std::memory_order_relaxed);
  if (timed) {
    c->ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    c->timed.fetch_add(1, std::memory_order_relaxed);
  }
}
int64_t fast_now_ns() { return now_ns(); }
// 0: not a configured fallback op; 1: a fallback op this thread may run itself, counted (Python
// has warned about it, or warnings are off, and strict mode is off: TpxKernel's fallback_here);
// 2: Python's (the first call's warning, strict mode's error).
// ``cache`` is the op's own (one per kernel, shared by all threads): the epoch it was worked out at,
// shifted left by 2, and the mode. A plain atomic load per call, no thread-local lookup (a
// function-level thread_local in a shared library costs a __tls_get_addr call per op). Threads
// that race store what they worked out; a value tagged with an older epoch is worked out again.
__attribute__((hot)) int fast_fallback_mode(const char* full, std::atomic<int64_t>& cache) {
  int e = g_fallback_epoch.load(std::memory_order_acquire);
  int64_t v = cache.load(std::memory_order_acquire);
  if ((v >> 2) == e) return static_cast<int>(v & 3);
  std::string base(full);
  if (base.rfind("aten::", 0) == 0) base = base.substr(6);
  int mode;
  {
    std::lock_guard<std::mutex> lock(g_cfg_mu);
    bool fb = g_fallback_ops.count(base) > 0;
    bool here = fb && !g_strict.load() && (!g_warn_fallback.load() || g_fallback_warned.count(base) > 0);
    mode = !fb ? 0 : (here ? 1 : 2);
  }
  cache.store((static_cast<int64_t>(e) << 2) | mode, std::memory_order_release);
  return mode;
}
// A fallback op run by an unboxed kernel: the device-to-host sync a real accelerator would need
// and the CPU-fallback call, counted as the generic kernel counts them.
void fast_fallback_sync(const char* full) {
  const char* base = std::strncmp(full, "aten::", 6) == 0 ? full + 6 : full;
  record_sync(base);
}
void fast_fallback_done(FastCount* c) { c->fallbacks.fetch_add(1, std::memory_order_relaxed); }
bool fast_matmul_bf16() { return g_matmul_bf16.load(std::memory_order_relaxed); }
bool fast_is_matmul(const char* full) {
  std::string base(full);
  if (base.rfind("aten::", 0) == 0) base = base.substr(6);
  return !matmul_operands(base).empty();
}
[[noreturn]] void fast_float64_refused(const char* full) { float64_refused(full); }

void register_dispatch_bindings(py::module& m) {
  m.def("install_kernels", &install_kernels, "C++ tpx kernels for the plain-fallback aten ops and the named ones");
  m.def("to_cpu_list", &to_cpu_list, "CPU views of the tpx tensors in a list (others unchanged)");
  m.def("from_cpu_list", &from_cpu_list, "tpx tensors (on device index, -1: the current one) over the CPU tensors flagged in on_tpx",
        py::arg("outs"), py::arg("on_tpx"), py::arg("index") = -1);
  m.def("set_matmul_bf16", [](bool v) { g_matmul_bf16 = v; });
  m.def("set_fallback_ops", [](const std::vector<std::string>& names) {
    std::lock_guard<std::mutex> lock(g_cfg_mu);
    g_fallback_ops = std::unordered_set<std::string>(names.begin(), names.end());
    g_fallback_epoch.fetch_add(1);
  });
  m.def("set_fallback_rules", [](bool strict, bool warn, const std::vector<std::string>& warned) {
    std::lock_guard<std::mutex> lock(g_cfg_mu);
    g_strict = strict;
    g_warn_fallback = warn;
    g_fallback_warned = std::unordered_set<std::string>(warned.begin(), warned.end());
    g_fallback_epoch.fetch_add(1);
  }, "strict mode, warn_fallback and the fallback ops Python has warned about");
  m.def("op_counters", [] {
    std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> out;
    std::lock_guard<std::mutex> lock(g_counters_mu);
    for (auto* c : g_counters) {
      int64_t calls = c->calls.load();
      if (calls) out.emplace_back(c->full, calls, c->ns_estimate(), c->fallbacks.load());
    }
    return out;
  }, "(op, calls, ns, cpu_fallback_calls) of the ops the C++ kernels ran");
  m.def("fast_op_calls", [] {
    std::unordered_map<std::string, int64_t> out;
    std::lock_guard<std::mutex> lock(g_counters_mu);
    for (auto* c : g_fast_counters) out[c->full] += c->calls.load();
    return out;
  }, "calls the unboxed kernels (tpx_fast.cpp) ran themselves, by op (since the last reset)");
  m.def("sync_counters", [] {
    std::lock_guard<std::mutex> lock(g_sync_mu);
    return std::unordered_map<std::string, int64_t>(g_syncs);
  }, "device-to-host syncs counted by the C++ kernels, by kind");
  m.def("transfer_counters", [] {
    return std::vector<int64_t>{g_transfers[0].load(), g_transfers[1].load(), g_transfers[2].load(),
                                g_transfers[3].load()};
  }, "[host->device bytes, device->host bytes, host->device copies, device->host copies] of the C++ kernels");
  m.def("reset_op_counters", [] {
    {
      std::lock_guard<std::mutex> lock(g_counters_mu);
      for (auto* c : g_counters) {
        c->calls = 0;
        c->ns = 0;
        c->timed = 0;
        c->tick = 0;
        c->fallbacks = 0;
      }
    }
    std::lock_guard<std::mutex> lock(g_sync_mu);
    g_syncs.clear();
    for (auto& t : g_transfers) t = 0;
  });
}

}  // namespace tpx
#pragma GCC visibility pop
