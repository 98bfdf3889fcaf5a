// Unboxed tpx kernels for the ops small models run most (addmm, add, layer norm, cat, attention,
// index_select, the optimizer's in-place updates, ...).
//
// tpx_dispatch.cpp's generic kernel is boxed: every call packs the arguments into an IValue
// stack (an int list or a tensor list is a heap-allocated c10::List), walks the schema, and
// the CPU kernel unpacks them again. These kernels take the op's own C++ signature instead and
// call the CPU kernel with the same arguments, each tpx tensor replaced by its zero-copy CPU
// alias: no boxing either way. They run only the plain case: every tensor a strided tpx tensor of
// one device (or a CPU scalar), no lazy conj/neg bits, no Python subclass, the profiler off, the
// op not a configured fallback op, and no bf16 rounding due for a matmul. Anything else goes to
// the generic kernel, registered for the spare PrivateUse2 key of the same ops (kSlow), which
// keeps every rule (the errors, the Python path, the rounding). Calls are counted under the op's
// name, as the generic kernel counts them.
#include <ATen/ATen.h>
#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/index_add_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/scatter_add_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/topk_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/ops/zero_ops.h>
#include <ATen/ops/nonzero_ops.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/masked_select_ops.h>
#include <ATen/ops/_embedding_bag_ops.h>
#include <ATen/ops/_embedding_bag_forward_only_ops.h>
#include <ATen/ops/_embedding_bag_backward_ops.h>
#include <ATen/ops/index_put_ops.h>
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/scatter_ops.h>
#include <ATen/ops/arange_ops.h>
#include <ATen/ops/embedding_ops.h>
#include <torch/csrc/profiler/api.h>
#include <torch/library.h>

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

// Hidden visibility: calls between the extension's own functions (from_cpu, to_cpu_plain, adopt, the
// counters, ...) go straight to them instead of through the PLT, and their code is not exported.
#pragma GCC visibility push(hidden)
namespace tpx {

// defined in tpx_ext.cpp
at::Tensor to_cpu(const at::Tensor& t);
at::Tensor from_cpu(const at::Tensor& c, int64_t index, bool fresh);
at::Tensor from_cpu_fresh(at::Tensor&& c, int64_t index);  // from_cpu(c, index, true), moving c
struct AliasPool;
AliasPool* alias_pool();  // this thread's pool of CPU aliases (null in inference mode)
at::Tensor to_cpu_plain(const at::Tensor& t, AliasPool* p);  // to_cpu, reusing an alias from the pool
void recycle_alias(at::Tensor&& c, AliasPool* p);             // back to the pool if nothing else holds it
bool float64_allowed();

// defined in tpx_dispatch.cpp (its counters, configuration and errors)
struct FastCount;
FastCount* fast_counter(const char* full);
bool fast_timed(FastCount* c);  // whether this call is one of the timed ones
void fast_done(FastCount* c, bool timed, int64_t t0);
int64_t fast_now_ns();
int fast_fallback_mode(const char* full, std::atomic<int64_t>& cache);  // 0 no, 1 run here counted, 2 Python's
void fast_fallback_sync(const char* full);
void fast_fallback_done(FastCount* c);
bool fast_matmul_bf16();
bool fast_is_matmul(const char* full);
[[noreturn]] void fast_float64_refused(const char* full);

namespace {

constexpr c10::DeviceType kTpx = c10::DeviceType::PrivateUse1;
constexpr c10::DispatchKey kSlow = c10::DispatchKey::PrivateUse2;
// The key sets the kernels redispatch with, built at compile time (DispatchKeySet(key) at run
// time is an out-of-line constructor call per op).
constexpr c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);
constexpr c10::DispatchKeySet kSlowKeys(kSlow);

// Keys that ask for more than the CPU kernel itself (tpx_dispatch.cpp's note_tensor).
const c10::DispatchKeySet kSpecial({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative,
                                    c10::DispatchKey::ZeroTensor, c10::DispatchKey::Python,
                                    c10::DispatchKey::PythonTLSSnapshot});

// One call's conversions: the CPU aliases made (to recognise a result that is an input) and
// whether the call is plain enough for this path.
struct Ctx {
  bool ok = true;
  int index = -2;  // the tpx tensors' device index (-2: none seen)
  AliasPool* pool = nullptr;  // this thread's alias pool, looked up at the first tpx input
  bool pool_looked = false;
  // (alias, caller's tensor) pairs; the aliases live as long as the converted arguments
  c10::SmallVector<std::pair<const c10::TensorImpl*, const at::Tensor*>, 8> made;

  static bool plain(const at::Tensor& t) {
    return t.layout() == c10::kStrided && !t.key_set().has_any(kSpecial);
  }

  __attribute__((hot)) at::Tensor in(const at::Tensor& t) {
    if (!t.defined()) return t;
    if (t.device().type() == kTpx) {
      int idx = t.device().index();  // (a tensor's device always has its index)
      if (!plain(t) || (index != -2 && idx != index)) {
        ok = false;
        return t;
      }
      if (!pool_looked) {
        pool = alias_pool();
        pool_looked = true;
      }
      index = idx;
      at::Tensor c = to_cpu_plain(t, pool);
      made.emplace_back(c.unsafeGetTensorImpl(), &t);
      return c;
    }
    // a CPU scalar (a wrapped number) is fine next to tpx tensors; anything else is the generic
    // kernel's business (the mixed-device error)
    if (t.device().type() != c10::kCPU || t.dim() != 0 || !plain(t)) ok = false;
    return t;
  }

  // The caller's tpx tensor whose alias ``r`` is, if any.
  const at::Tensor* input_of(const at::Tensor& r) const {
    const c10::TensorImpl* impl = r.unsafeGetTensorImpl();
    for (const auto& m : made)
      if (m.first == impl) return m.second;
    return nullptr;
  }

  bool made_here(const at::Tensor& a) const {
    const c10::TensorImpl* impl = a.unsafeGetTensorImpl();
    for (const auto& m : made)
      if (m.first == impl) return true;
    return false;
  }

  // (``r`` by value: an adopted result is moved on, no reference taken and dropped)
  __attribute__((hot)) at::Tensor out(at::Tensor r, const char* full) const {
    if (!r.defined()) return r;
    if (const at::Tensor* d = input_of(r)) return *d;
    if (r.device().type() != c10::kCPU) return r;
    auto st = r.scalar_type();
    if ((st == c10::kDouble || st == c10::kComplexDouble) && !float64_allowed()) fast_float64_refused(full);
    return from_cpu_fresh(std::move(r), index >= 0 ? index : -1);
  }
};

// How each argument type is converted: tpx tensors (also inside lists) to CPU aliases, the rest
// passed on unchanged.
template <class T>
struct Cv {
  using type = T;
  static T go(T v, Ctx&) { return std::forward<T>(v); }
};
template <>
struct Cv<const at::Tensor&> {
  using type = at::Tensor;
  static at::Tensor go(const at::Tensor& t, Ctx& c) { return c.in(t); }
};
template <>
struct Cv<at::Tensor&> {
  using type = at::Tensor;
  static at::Tensor go(at::Tensor& t, Ctx& c) { return c.in(t); }
};
template <>
struct Cv<const std::optional<at::Tensor>&> {
  using type = std::optional<at::Tensor>;
  static std::optional<at::Tensor> go(const std::optional<at::Tensor>& t, Ctx& c) {
    if (!t.has_value()) return t;
    return c.in(*t);
  }
};
// A tensor list, kept as a vector; ``arg`` gives the op the list type it takes.
struct TensorVec {
  std::vector<at::Tensor> v;
};
template <class L>
TensorVec convert_list(const L& list, Ctx& c) {
  TensorVec out;
  out.v.reserve(list.size());
  for (const at::Tensor& t : list) out.v.push_back(c.in(t));
  return out;
}
template <>
struct Cv<at::TensorList> {
  using type = TensorVec;
  static TensorVec go(at::TensorList l, Ctx& c) { return convert_list(l, c); }
};
template <>
struct Cv<const at::ITensorListRef&> {
  using type = TensorVec;
  static TensorVec go(const at::ITensorListRef& l, Ctx& c) { return convert_list(l, c); }
};

// A factory's device (arange(..., device="tpx")): the op runs on the CPU and its result becomes a
// tpx tensor of the device named ("tpx": the current one). Any other device, or a tpx device
// next to tensors of another index, is the generic kernel's.
template <>
struct Cv<std::optional<at::Device>> {
  using type = std::optional<at::Device>;
  static type go(std::optional<at::Device> d, Ctx& c) {
    if (!d.has_value()) return d;
    if (d->type() != kTpx) {
      c.ok = false;
      return d;
    }
    int idx = d->has_index() ? d->index() : -1;
    if (c.index != -2 && c.index != idx) c.ok = false;
    c.index = idx;
    return at::Device(c10::kCPU);
  }
};

// index/index_put_'s indices
template <>
struct Cv<const c10::List<std::optional<at::Tensor>>&> {
  using type = c10::List<std::optional<at::Tensor>>;
  static type go(const c10::List<std::optional<at::Tensor>>& l, Ctx& c) {
    type out;
    out.reserve(l.size());
    for (const std::optional<at::Tensor>& t : l) out.push_back(t.has_value() ? std::optional<at::Tensor>(c.in(*t)) : t);
    return out;
  }
};

// After the op: the aliases made for it go back to the thread's pool (recycle_alias keeps only
// those nothing else holds; the arguments passed on unchanged are never touched).
template <class T>
void give_back(T&, const Ctx&) {}
__attribute__((hot)) inline void give_back(at::Tensor& t, const Ctx& c) {
  if (t.defined() && c.made_here(t)) recycle_alias(std::move(t), c.pool);
}
inline void give_back(std::optional<at::Tensor>& t, const Ctx& c) {
  if (t.has_value()) give_back(*t, c);
}
inline void give_back(TensorVec& v, const Ctx& c) {
  for (at::Tensor& t : v.v) give_back(t, c);
}
template <class Tup>
void give_back_all(Tup& cv, const Ctx& c) {
  std::apply([&](auto&... x) { (give_back(x, c), ...); }, cv);
}

template <class T>
T& arg(T& v) {
  return v;
}
inline at::TensorList arg(TensorVec& v) { return at::TensorList(v.v); }

// Results: new tensors become tpx tensors (an input returned as is, in-place, is the caller's).
template <class R>
struct Out;
template <>
struct Out<at::Tensor> {
  static at::Tensor go(at::Tensor r, const Ctx& c, const char* full) { return c.out(std::move(r), full); }
};
template <class... T>
struct Out<std::tuple<T...>> {
  static std::tuple<T...> go(std::tuple<T...> r, const Ctx& c, const char* full) {
    return std::apply([&](auto&... x) { return std::tuple<T...>(Out<T>::go(std::move(x), c, full)...); }, r);
  }
};
template <>
struct Out<std::vector<at::Tensor>> {
  static std::vector<at::Tensor> go(std::vector<at::Tensor> r, const Ctx& c, const char* full) {
    for (auto& t : r) t = c.out(std::exchange(t, at::Tensor()), full);
    return r;
  }
};
template <>
struct Out<at::Tensor&> {
  static at::Tensor& go(at::Tensor& r, const Ctx& c, const char*) {
    const at::Tensor* d = c.input_of(r);
    TORCH_INTERNAL_ASSERT(d != nullptr, "tpx: an in-place op returned a tensor that is not its input");
    return const_cast<at::Tensor&>(*d);
  }
};

// Counts a fallback op's call once it ran (the sync when it starts, as the generic kernel does).
struct FallbackCount {
  FastCount* c;
  FallbackCount(FastCount* cnt, const char* full) : c(cnt) {
    if (c != nullptr) fast_fallback_sync(full);
  }
  void done() const {
    if (c != nullptr) fast_fallback_done(c);
  }
};


template <class Op, class Sig = typename Op::schema>
struct Fast;

template <class Op, class Ret, class... Args>
struct Fast<Op, Ret(Args...)> {
  static FastCount* counter() {
    static FastCount* c = fast_counter(Op::name);
    return c;
  }

  static Ret slow(Args... args) {
    return Op::redispatch(kSlowKeys, std::forward<Args>(args)...);
  }

  __attribute__((hot)) static Ret call(Args... args) {
    static const bool matmul = fast_is_matmul(Op::name);
    // whether the op is a configured fallback op (fast_fallback_mode), kept until the
    // configuration's epoch changes (-1: not worked out yet)
    static std::atomic<int64_t> fb_cache{-1};
    if (torch::profiler::impl::profilerEnabled() || (matmul && fast_matmul_bf16())) return slow(std::forward<Args>(args)...);
    int fb = fast_fallback_mode(Op::name, fb_cache);
    if (fb == 2) return slow(std::forward<Args>(args)...);
    FastCount* cnt = counter();
    bool timed = fast_timed(cnt);
    int64_t t0 = timed ? fast_now_ns() : 0;
    Ctx ctx;
    std::tuple<typename Cv<Args>::type...> cv{Cv<Args>::go(args, ctx)...};
    if (!ctx.ok || ctx.index == -2) return slow(std::forward<Args>(args)...);
    // a configured fallback op (nonzero, masked_select, ...): counted as the generic kernel counts
    // it, a device-to-host sync and a CPU-fallback call
    FallbackCount fbc{fb == 1 ? cnt : nullptr, Op::name};
    // The dispatch table's CPU entry (a composite kernel for an op without a CPU one), as the
    // generic kernel calls it.
    if constexpr (std::is_void_v<Ret>) {  // the in-place foreach ops
      std::apply([](auto&... x) { Op::redispatch(kCpuKeys, arg(x)...); }, cv);
      give_back_all(cv, ctx);
      fbc.done();
      fast_done(cnt, timed, t0);
    } else if constexpr (std::is_same_v<Ret, at::Tensor&>) {
      at::Tensor& r = std::apply(
          [](auto&... x) -> at::Tensor& {
            return Op::redispatch(kCpuKeys, arg(x)...);
          },
          cv);
      at::Tensor& res = Out<at::Tensor&>::go(r, ctx, Op::name);
      give_back_all(cv, ctx);
      fbc.done();
      fast_done(cnt, timed, t0);
      return res;
    } else {
      Ret r = std::apply(
          [](auto&... x) { return Op::redispatch(kCpuKeys, arg(x)...); }, cv);
      Ret res = Out<Ret>::go(std::move(r), ctx, Op::name);
      give_back_all(cv, ctx);
      fbc.done();
      fast_done(cnt, timed, t0);
      return res;
    }
  }
};

struct Entry {
  std::string key;  // "op" or "op.overload"
  std::function<void(torch::Library&)> add;
};

template <class Op>
Entry entry() {
  std::string key = std::string(Op::name).substr(6);
  if (Op::overload_name[0] != '\0') key += std::string(".") + Op::overload_name;
  return {key, [key](torch::Library& lib) {
            lib.impl(key.c_str(), torch::CppFunction::makeFromUnboxedFunction(TORCH_FN(Fast<Op>::call)));
          }};
}

std::vector<Entry> entries() {
  namespace o = at::_ops;
  return {
      // matmuls, norms, attention, activations
      entry<o::addmm>(), entry<o::mm>(), entry<o::bmm>(), entry<o::native_layer_norm>(), entry<o::native_layer_norm_backward>(),
      entry<o::_scaled_dot_product_flash_attention_for_cpu>(),
      entry<o::_scaled_dot_product_flash_attention_for_cpu_backward>(), entry<o::gelu>(), entry<o::gelu_backward>(),
      entry<o::relu>(), entry<o::threshold_backward>(), entry<o::tanh>(), entry<o::tanh_backward>(), entry<o::sigmoid>(),
      entry<o::sigmoid_backward>(), entry<o::_softmax>(), entry<o::_softmax_backward_data>(), entry<o::_log_softmax>(),
      entry<o::_log_softmax_backward_data>(), entry<o::nll_loss_forward>(), entry<o::nll_loss_backward>(),
      // element-wise and reductions
      entry<o::add_Tensor>(), entry<o::sub_Tensor>(), entry<o::mul_Tensor>(), entry<o::div_Tensor>(),
      entry<o::add_Scalar>(), entry<o::sub_Scalar>(), entry<o::mul_Scalar>(), entry<o::div_Scalar>(), entry<o::neg>(),
      entry<o::exp>(), entry<o::sqrt>(), entry<o::rsqrt>(), entry<o::pow_Tensor_Scalar>(), entry<o::clamp>(),
      entry<o::bitwise_not>(), entry<o::eq_Scalar>(), entry<o::eq_Tensor>(), entry<o::where_self>(), entry<o::sum_dim_IntList>(),
      entry<o::mean_dim>(), entry<o::any_dim>(), entry<o::argmax>(),
      // indexing and joins
      entry<o::cat>(), entry<o::index_select>(), entry<o::gather>(), entry<o::topk>(), entry<o::embedding_dense_backward>(),
      entry<o::scatter_add>(), entry<o::index_add>(), entry<o::index_Tensor>(), entry<o::embedding>(),
      entry<o::_embedding_bag>(), entry<o::_embedding_bag_forward_only>(), entry<o::_embedding_bag_backward>(), entry<o::scatter_src>(), entry<o::scatter_value>(),
      entry<o::masked_fill_Scalar>(), entry<o::masked_fill_Tensor>(),
      // data-dependent shapes (configured fallback ops: counted as CPU fallbacks and syncs)
      entry<o::nonzero>(), entry<o::masked_select>(),
      // factories with device=tpx
      entry<o::arange>(), entry<o::arange_start>(), entry<o::arange_start_step>(),
      // in-place (the optimizers' updates, masks, accumulation)
      entry<o::add__Tensor>(), entry<o::mul__Tensor>(), entry<o::div__Tensor>(), entry<o::sub__Tensor>(),
      entry<o::add__Scalar>(), entry<o::mul__Scalar>(), entry<o::div__Scalar>(), entry<o::sub__Scalar>(),
      entry<o::sqrt_>(), entry<o::lerp__Scalar>(),
      entry<o::addcmul_>(), entry<o::addcdiv_>(), entry<o::zero_>(), entry<o::fill__Scalar>(), entry<o::index_add_>(),
      entry<o::scatter_add_>(), entry<o::masked_fill__Scalar>(), entry<o::masked_fill__Tensor>(), entry<o::scatter__src>(),
      entry<o::scatter__value>(), entry<o::index_put_>(), entry<o::_index_put_impl_>(),
      // the optimizers' foreach updates: one tpx call, the per-tensor loop on the CPU aliases
      entry<o::_foreach_add__Scalar>(), entry<o::_foreach_add__List>(), entry<o::_foreach_add__Tensor>(),
      entry<o::_foreach_mul__Scalar>(), entry<o::_foreach_mul__List>(), entry<o::_foreach_div__ScalarList>(),
      entry<o::_foreach_lerp__Scalar>(), entry<o::_foreach_addcmul__Scalar>(),
      entry<o::_foreach_addcdiv__Scalar>(), entry<o::_foreach_addcdiv__ScalarList>(), entry<o::_foreach_sqrt>(),
      entry<o::_foreach_sqrt_>(),
  };
}

}  // namespace

// Register the unboxed kernels in ``lib`` (aten, PrivateUse1) for the ops ``wanted`` accepts
// (those the generic kernel would otherwise take); returns their keys, which the caller gives
// the generic kernel under PrivateUse2.
std::vector<std::string> install_fast_kernels(torch::Library& lib, const std::function<bool(const std::string&)>& wanted) {
  std::vector<std::string> keys;
  for (auto& e : entries()) {
    if (!wanted(e.key)) continue;
    e.add(lib);
    keys.push_back(e.key);
  }
  return keys;
}

}  // namespace tpx
#pragma GCC visibility pop
