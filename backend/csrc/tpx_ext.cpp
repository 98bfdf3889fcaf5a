// The tpx device: the pieces of a PrivateUse1 backend that PyTorch 2.13 cannot take from Python.
//
// * A device allocator (host memory, finite simulated capacity, accounting, OutOfMemoryError),
//   registered as the PrivateUse1 allocator and as the c10::DeviceAllocator behind the
//   torch.accelerator memory API. Without it torch.UntypedStorage(n, device="tpx") dereferences
//   a null allocator.
// * PrivateUse1 hooks (tpx's counter-based generators, pinned host memory for DataLoader,
//   storage resize) and a device guard (streams, timed events, device/accelerator synchronize).
// * Zero-copy aliasing between tpx and CPU tensors that keeps the other side's storage alive
//   (Python can only build non-owning storages from raw pointers).
// * The structural kernels that must create or mutate a tpx TensorImpl in place: empty,
//   empty_strided, as_strided, view, _reshape_alias, resize_, set_. Compute kernels live in
//   Python (backend/kernels.py).
#include <ATen/ScalarOps.h>
#include <ATen/Tensor.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/MT19937RNGEngine.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>
#include <ATen/Context.h>
#include <c10/core/AutogradState.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/COW.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <typeinfo>
#include <array>
#include <utility>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <tuple>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

// Hidden visibility: calls between the extension's own functions (from_cpu, to_cpu_plain, adopt, the
// counters, ...) go straight to them instead of through the PLT, and their code is not exported.
#pragma GCC visibility push(hidden)
namespace tpx {

using c10::DeviceIndex;
using c10::DeviceType;
constexpr DeviceType kTpx = DeviceType::PrivateUse1;

// ---------------------------------------------------------------- configuration state
// Up to kMaxDevices tpx devices per process (the visible ones, tpx:0..tpx:N-1), each with its own
// simulated capacity and its own accounting. The memory is host memory either way.
constexpr int kMaxDevices = 64;

struct DeviceMemory {
  std::atomic<int64_t> capacity{int64_t(16) << 30};
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> num_allocs{0};
  std::atomic<int64_t> num_frees{0};
  std::atomic<int64_t> num_ooms{0};
  std::atomic<int64_t> total_allocated{0};
  std::atomic<int64_t> total_freed{0};
};

DeviceMemory g_mem[kMaxDevices];
std::atomic<bool> g_float64_allowed{false};
std::atomic<int> g_device_count{2};
std::mutex g_hint_mu;
std::string g_device_hint = "TPX_DEVICE_COUNT=2, TPX_VISIBLE_DEVICES=unset";
thread_local int t_float64_scope = 0;
thread_local DeviceIndex t_current_device = 0;

bool float64_allowed() { return g_float64_allowed.load() || t_float64_scope > 0; }

std::string device_hint() {
  std::lock_guard<std::mutex> lock(g_hint_mu);
  return g_device_hint;
}

void check_index_failed(int64_t i, int n);

// An index of a visible device, or the error CUDA gives for a bad ordinal (inline: the memory
// accounting checks its index once per op).
inline void check_index(int64_t i) {
  int n = g_device_count.load(std::memory_order_relaxed);
  if (C10_LIKELY(i >= 0 && i < n)) return;
  check_index_failed(i, n);
}

void check_index_failed(int64_t i, int n) {
  if (n == 0) {
    TORCH_CHECK(false, "tpx error: no tpx device is visible (", device_hint(),
                "); unset TPX_VISIBLE_DEVICES or list the devices to use, e.g. TPX_VISIBLE_DEVICES=0");
  }
  TORCH_CHECK(false, "tpx error: invalid device ordinal: tpx:", i, " requested but only ", n,
              " tpx device(s) are visible, tpx:0..tpx:", n - 1, " (", device_hint(),
              "; raise TPX_DEVICE_COUNT for more devices)");
}

DeviceMemory& mem(int64_t i) {
  check_index(i);
  return g_mem[i];
}

std::string human(int64_t n) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  if (n >= (int64_t(1) << 30)) os << double(n) / double(int64_t(1) << 30) << " GiB";
  else if (n >= (int64_t(1) << 20)) os << double(n) / double(int64_t(1) << 20) << " MiB";
  else if (n >= 1024) os << double(n) / 1024.0 << " KiB";
  else os << n << " bytes";
  return os.str();
}

__attribute__((hot)) void account_alloc(int64_t n, DeviceIndex idx) {
  DeviceMemory& m = mem(idx);
  if (n <= 0) return;
  int64_t cur = m.allocated.fetch_add(n) + n;
  int64_t cap = m.capacity.load();
  if (cur > cap) {
    m.allocated.fetch_sub(n);
    m.num_ooms.fetch_add(1);
    TORCH_CHECK_WITH(OutOfMemoryError, false,
        "tpx out of memory on device tpx:", int(idx), ": tried to allocate ", human(n), " (requested ", n,
        " bytes); ", human(cur - n), " (", cur - n, " bytes) already allocated of ", human(cap), " (", cap,
        " bytes) capacity of tpx:", int(idx), ". Free tensors you no longer need, use a smaller batch, or "
        "raise the simulated capacity with backend.configure(memory_capacity=...) / TPX_MEMORY_CAPACITY.");
  }
  m.num_allocs.fetch_add(1);
  m.total_allocated.fetch_add(n);
  int64_t peak = m.peak.load();
  while (cur > peak && !m.peak.compare_exchange_weak(peak, cur)) {
  }
}

__attribute__((hot)) void account_free(int64_t n, DeviceIndex idx) {
  if (n <= 0 || idx < 0 || idx >= kMaxDevices) return;
  DeviceMemory& m = g_mem[idx];
  m.allocated.fetch_sub(n);
  m.num_frees.fetch_add(1);
  m.total_freed.fetch_add(n);
}

// ---------------------------------------------------------------- allocator
struct Block {
  void* ptr;
  int64_t nbytes;
  DeviceIndex device;
};

void free_block(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  std::free(b->ptr);
  account_free(b->nbytes, b->device);
  delete b;
}

c10::DataPtr allocate_block(size_t n, DeviceIndex idx) {
  check_index(idx);
  c10::Device dev(kTpx, idx);
  if (n == 0) return c10::DataPtr(nullptr, nullptr, &free_block, dev);
  account_alloc(static_cast<int64_t>(n), idx);
  size_t rounded = (n + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) {
    account_free(static_cast<int64_t>(n), idx);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "tpx: host allocation of ", human(n), " failed");
  }
  return c10::DataPtr(p, new Block{p, static_cast<int64_t>(n), idx}, &free_block, dev);
}

struct TpxAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t n) override { return allocate_block(n, t_current_device); }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(DeviceIndex idx) override {
    DeviceMemory& m = mem(idx < 0 ? t_current_device : idx);
    c10::CachingDeviceAllocator::DeviceStats s;
    auto fill = [](c10::CachingDeviceAllocator::StatArray& a, int64_t cur, int64_t peak, int64_t alloc,
                   int64_t freed) {
      for (auto& st : a) {
        st.current = cur;
        st.peak = peak;
        st.allocated = alloc;
        st.freed = freed;
      }
    };
    int64_t cur = m.allocated.load(), peak = m.peak.load();
    int64_t ta = m.total_allocated.load(), tf = m.total_freed.load();
    fill(s.allocated_bytes, cur, peak, ta, tf);
    fill(s.reserved_bytes, cur, peak, ta, tf);
    fill(s.active_bytes, cur, peak, ta, tf);
    fill(s.requested_bytes, cur, peak, ta, tf);
    int64_t na = m.num_allocs.load(), nf = m.num_frees.load();
    fill(s.allocation, na - nf, na - nf, na, nf);
    s.num_ooms = m.num_ooms.load();
    return s;
  }
  void resetAccumulatedStats(DeviceIndex idx) override {
    DeviceMemory& m = mem(idx < 0 ? t_current_device : idx);
    m.total_allocated = 0;
    m.total_freed = 0;
    m.num_ooms = 0;
  }
  void resetPeakStats(DeviceIndex idx) override {
    DeviceMemory& m = mem(idx < 0 ? t_current_device : idx);
    m.peak = m.allocated.load();
  }
  std::pair<size_t, size_t> getMemoryInfo(DeviceIndex idx) override {
    DeviceMemory& m = mem(idx < 0 ? t_current_device : idx);
    int64_t cap = m.capacity.load(), cur = m.allocated.load();
    return {static_cast<size_t>(std::max<int64_t>(cap - cur, 0)), static_cast<size_t>(cap)};
  }
};

TpxAllocator g_allocator;

// Pinned host memory: tpx memory is host memory, so "pinned" buffers are ordinary aligned host
// buffers that we remember, so that Tensor.is_pinned() answers truthfully.
std::mutex g_pinned_mu;
std::unordered_set<const void*> g_pinned;

void free_pinned(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned.erase(p);
  }
  std::free(p);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &free_pinned, c10::Device(c10::kCPU));
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    TORCH_CHECK_WITH(OutOfMemoryError, p, "tpx: pinned host allocation of ", human(n), " failed");
    {
      std::lock_guard<std::mutex> lock(g_pinned_mu);
      g_pinned.insert(p);
    }
    return c10::DataPtr(p, p, &free_pinned, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

// ---------------------------------------------------------------- zero-copy aliasing
// A CPU storage that aliases a tpx storage keeps the tpx StorageImpl alive through its context;
// a tpx storage that wraps CPU memory keeps the CPU StorageImpl alive (and counts its bytes
// against the simulated capacity while it lives).
struct CpuRef {
  c10::intrusive_ptr<c10::StorageImpl> impl;
  int64_t counted;
  DeviceIndex device;
  bool mapped;  // entered in g_wrapped (see from_cpu)
};
// CPU StorageImpl -> the tpx storage already wrapping it, so that wrapping the same CPU memory
// twice (two views of one fresh result, repeated from_cpu calls) yields one tpx storage, counted
// once. An entry lives exactly as long as that tpx storage (removed by its deleter).
std::mutex g_wrap_mu;
std::unordered_map<const c10::StorageImpl*, c10::weak_intrusive_ptr<c10::StorageImpl>> g_wrapped;

// A CPU alias's DataPtr context is the tpx StorageImpl itself, holding one reference (taken in
// to_cpu): no separate holder object to allocate per alias.
__attribute__((hot)) void release_tpx_ref(void* ctx) { c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx)); }
void release_cpu_ref(void* ctx) {
  auto* r = static_cast<CpuRef*>(ctx);
  if (r->mapped) {
    std::lock_guard<std::mutex> lock(g_wrap_mu);
    auto it = g_wrapped.find(r->impl.get());
    if (it != g_wrapped.end() && it->second.expired()) g_wrapped.erase(it);
  }
  account_free(r->counted, r->device);
  delete r;
}

// A tpx storage over a kernel's fresh CPU result (see from_cpu): its context is the CPU
// StorageImpl itself, holding one reference, and the deleter names the device whose capacity the
// bytes count against (one deleter per device index): no holder object to allocate per result.
template <int I>
void release_fresh(void* ctx) {
  auto* impl = static_cast<c10::StorageImpl*>(ctx);
  int64_t n = static_cast<int64_t>(impl->nbytes());  // fixed: the storage was made unresizable
  c10::raw::intrusive_ptr::decref(impl);
  account_free(n, static_cast<DeviceIndex>(I));
}

template <size_t... I>
constexpr std::array<c10::DeleterFnPtr, sizeof...(I)> fresh_deleters(std::index_sequence<I...>) {
  return {&release_fresh<static_cast<int>(I)>...};
}
constexpr auto kFreshDeleters = fresh_deleters(std::make_index_sequence<kMaxDevices>{});

// A kernel's fresh CPU result adopted as a tpx tensor (see adopt): its DataPtr's own context and
// deleter, kept to free the memory, and the bytes counted against the device.
struct Adopted {
  void* ctx;
  c10::DeleterFnPtr deleter;
  int64_t counted;
  DeviceIndex device;
};

__attribute__((hot)) void release_adopted(void* ctx) {
  auto* a = static_cast<Adopted*>(ctx);
  if (a->deleter != nullptr) a->deleter(a->ctx);
  account_free(a->counted, a->device);
  delete a;
}

// The key set of a plain dense CPU tensor (what a CPU kernel's own result carries).
c10::DispatchKeySet plain_cpu_keys() {
  static const c10::DispatchKeySet keys = [] {
    c10::InferenceMode off(false);  // (an inference tensor's key set lacks the autograd keys)
    return at::detail::empty_cpu({0}, c10::TensorOptions()).key_set();
  }();
  return keys;
}

// Turn ``c``, a CPU kernel's fresh result that nothing else holds (its TensorImpl and its
// StorageImpl each referenced once, a plain dense CPU tensor with no autograd or Python state),
// into a tpx tensor in place: its storage's memory now counts against tpx:index and its device
// and dispatch keys become tpx's. No new TensorImpl or StorageImpl is made (two allocations and
// two frees per result saved). Returns false (nothing changed) when ``c`` does not qualify.
std::atomic<int64_t> g_adopted{0};  // results adopted so far (read by the tests)

// Adds one to a counter that only the tests read, without an atomic read-modify-write (one per
// op saved): two threads bumping it at the same moment may count once.
inline void bump(std::atomic<int64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// The weak reference count of a storage the caller holds, read without touching the counts
// (reclaim_copy(s).weak_use_count() adds a reference and drops it again: two atomic
// read-modify-writes per call on a path that runs once per op).
inline uint32_t storage_weak_count(c10::StorageImpl* s) {
  auto p = c10::intrusive_ptr<c10::StorageImpl>::reclaim(s);  // borrows the caller's reference
  uint32_t n = p.weak_use_count();
  p.release();  // and gives it back untouched
  return n;
}

// The key set a plain CPU result gets when adopted: what _change_backend_component_keys makes of
// plain_cpu_keys() for a tpx device (the same for every index), worked out once. adopt() only takes
// tensors whose key set is plain_cpu_keys(), so it stores this constant instead of working it out
// per result (toBackendComponent, the autocast keys, ...).
c10::DispatchKeySet adopted_keys() {
  static const c10::DispatchKeySet keys = [] {
    c10::InferenceMode off(false);
    at::Tensor e = at::detail::empty_cpu({0}, c10::TensorOptions());
    e.unsafeGetTensorImpl()->_change_backend_component_keys(c10::Device(kTpx, 0));
    return e.key_set();
  }();
  return keys;
}

// TensorImpl::key_set_ and device_opt_ are protected: pointers to them, taken where access is
// granted (a derived class), let adopt() set them directly.
struct ImplAccess : c10::TensorImpl {
  static constexpr c10::DispatchKeySet c10::TensorImpl::*keys() { return &ImplAccess::key_set_; }
  static constexpr std::optional<c10::Device> c10::TensorImpl::*device() { return &ImplAccess::device_opt_; }
};

__attribute__((hot)) bool adopt(const at::Tensor& c, DeviceIndex index) {
  c10::TensorImpl* t = c.unsafeGetTensorImpl();
  if (c.use_count() != 1 || t->key_set() != plain_cpu_keys() || t->autograd_meta() != nullptr ||
      !t->allow_tensor_metadata_change() || typeid(*t) != typeid(c10::TensorImpl) || !t->has_storage() ||
      t->is_wrapped_number() || t->pyobj_slot()->load_pyobj() != nullptr)
    return false;
  c10::StorageImpl* s = t->storage().unsafeGetStorageImpl();
  if (c10::raw::intrusive_ptr::use_count(s) != 1 ||
      storage_weak_count(s) > 1 || s->device().type() != c10::kCPU || c10::impl::cow::is_cow_data_ptr(s->data_ptr()) ||
      s->data_ptr().get_deleter() == &release_tpx_ref ||
      s->pyobj_slot()->load_pyobj() != nullptr)
    return false;
  int64_t n = static_cast<int64_t>(s->nbytes());
  account_alloc(n, index);  // may throw (out of memory): nothing changed yet
  c10::DataPtr& dp = s->mutable_data_ptr();
  void* data = dp.get();
  c10::DeleterFnPtr deleter = dp.get_deleter();
  void* ctx = dp.release_context();
  s->set_data_ptr_noswap(c10::DataPtr(data, new Adopted{ctx, deleter, n, index}, &release_adopted,
                                      c10::Device(kTpx, index)));
  s->set_allocator(&g_allocator);
  // the device follows the storage's (what set_storage_keep_dtype(t->storage()) does, without
  // copying the Storage: a reference taken and dropped) and the keys become tpx's
  // (_change_backend_component_keys for tpx, precomputed)
  t->*ImplAccess::device() = c10::Device(kTpx, index);
  t->*ImplAccess::keys() = adopted_keys();
  bump(g_adopted);
  return true;
}

at::Tensor make_like(c10::Storage storage, c10::DispatchKey key, const at::Tensor& meta_src) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                      meta_src.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(meta_src.sizes(), meta_src.strides(),
                                                   meta_src.storage_offset());
  // The math bits are part of the value: an alias of a lazily conjugated/negated view must stay
  // one, or ops that handle the bits themselves (copy_, clone, dot, mm... fall through the
  // Conjugate/Negative keys) would read the un-conjugated memory.
  if (meta_src.is_conj()) out._set_conj(true);
  if (meta_src.is_neg()) out._set_neg(true);
  return out;
}

// ---------------------------------------------------------------- autograd on the calling thread
// PyTorch's autograd engine runs the backward of a non-CPU device's nodes on a worker thread of
// that device, and the thread that called backward() waits for it: two thread hand-offs per
// backward (tens of microseconds, more on a busy machine), which matter next to a small model's
// step. tpx computes on the host, as the CPU does, so a thread that runs tpx ops gets what a CPU
// graph gets: its backward runs on the calling thread (torch.autograd.set_multithreading_enabled
// (False) for that thread, set once, the first time the thread touches a tpx tensor; the user may
// turn it back on). Not in a process that also has a real accelerator, whose graphs need their
// device threads.
thread_local bool t_backward_claimed = false;

void claim_backward_thread_slow() {
  t_backward_claimed = true;
  if (at::hasCUDA() || at::hasXPU() || at::hasMPS()) return;
  c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
}

inline void claim_backward_thread() {
  if (!t_backward_claimed) claim_backward_thread_slow();
}

at::Tensor to_cpu(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kTpx) return t;
  claim_backward_thread();
  TORCH_CHECK(t.layout() == c10::kStrided, "tpx: only strided tensors can be viewed on the CPU");
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  const c10::DataPtr& dp = impl->data_ptr();
  // Always a fresh CPU storage whose context holds the tpx storage. It is resizable with the CPU
  // allocator: a CPU kernel that must grow an out= tensor moves the CPU view to new memory
  // (the tpx kernel then notices and resizes the tpx tensor); the tpx memory never moves.
  c10::raw::intrusive_ptr::incref(impl);
  c10::DataPtr cdp(dp.get(), impl, &release_tpx_ref, c10::Device(c10::kCPU));
  c10::Storage cpu(c10::Storage::use_byte_size_t(), impl->nbytes(), std::move(cdp), c10::GetCPUAllocator(), true);
  return make_like(std::move(cpu), c10::DispatchKey::CPU, t);
}

// ---------------------------------------------------------------- reused CPU aliases
// The unboxed kernels (tpx_fast.cpp) make a CPU alias of every tpx input: a TensorImpl (with its
// version counter) and a StorageImpl, three allocations made and freed per input. After the op,
// an alias nothing else holds (its TensorImpl and StorageImpl each referenced once, no Python
// object, no autograd state, still a plain CPU tensor over the tpx memory it was made for) goes
// back to a small per-thread pool with its DataPtr released (so it keeps no tpx memory alive and
// counts no bytes); the next input takes it and only gets its memory, dtype, sizes and strides
// set. Aliases made in inference mode are neither taken from nor put back into the pool (their
// key sets differ: the kernels then use no pool). ``g_alias_reused`` counts the aliases taken from the pool (read by the tests).
constexpr size_t kAliasPool = 16;
std::atomic<int64_t> g_alias_reused{0};

// This thread's pool, reached through a plain pointer: a thread_local with a constructor or a
// destructor is reached through a TLS init function on every access, a trivial one is not. The
// pool itself (built at the thread's first op, destroyed at its exit) is looked up only once.
struct AliasPool;
static thread_local AliasPool* t_alias_pool = nullptr;
static thread_local bool t_alias_pool_gone = false;  // destroyed (the thread is exiting): no pool

struct AliasPool {
  c10::SmallVector<c10::TensorImpl*, kAliasPool> free;  // each holds one reference
  ~AliasPool() {
    t_alias_pool = nullptr;
    t_alias_pool_gone = true;
    for (c10::TensorImpl* t : free) c10::raw::intrusive_ptr::decref(t);
  }
};

AliasPool* make_alias_pool() {
  if (t_alias_pool_gone) return nullptr;
  thread_local AliasPool pool;
  t_alias_pool = &pool;
  return t_alias_pool;
}

// This thread's pool (one thread-local lookup per op: the kernels keep the pointer for the call),
// or null in inference mode (or once the thread's pool is gone).
__attribute__((hot)) AliasPool* alias_pool() {
  if (c10::InferenceMode::is_enabled()) return nullptr;
  AliasPool* p = t_alias_pool;
  return p != nullptr ? p : make_alias_pool();
}

__attribute__((hot)) at::Tensor to_cpu_plain(const at::Tensor& t, AliasPool* p) {
  // (a pool with aliases in it means this thread made them with to_cpu: it claimed its backward)
  if (p == nullptr || p->free.empty() || t.is_conj() || t.is_neg()) return to_cpu(t);
  static const c10::Device cpu(c10::kCPU);
  at::Tensor c = at::Tensor(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(p->free.back()));
  p->free.pop_back();
  c10::TensorImpl* ci = c.unsafeGetTensorImpl();
  c10::StorageImpl* cs = ci->unsafe_storage().unsafeGetStorageImpl();
  c10::StorageImpl* impl = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(impl);
  cs->set_data_ptr_noswap(c10::DataPtr(impl->data_ptr().get(), impl, &release_tpx_ref, cpu));
  cs->set_nbytes(impl->nbytes());
  if (ci->dtype() != t.dtype()) ci->set_storage_and_dtype(ci->storage(), t.dtype());
  ci->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  bump(g_alias_reused);
  return c;
}

__attribute__((hot)) void recycle_alias(at::Tensor&& c, AliasPool* p) {
  if (p == nullptr || p->free.size() >= kAliasPool || !c.defined()) return;
  // ``c`` is an alias to_cpu or to_cpu_plain made (a plain c10::TensorImpl over a resizable CPU
  // storage with the CPU allocator, which no CPU kernel changes); what a kernel can change is
  // checked: other references, the key set, autograd or Python state, a resize to new memory.
  c10::TensorImpl* ci = c.unsafeGetTensorImpl();
  if (c.use_count() != 1 || c.weak_use_count() != 1 || ci->key_set() != plain_cpu_keys() ||
      ci->autograd_meta() != nullptr || !ci->allow_tensor_metadata_change() || !ci->has_storage() ||
      ci->is_wrapped_number() || ci->pyobj_slot()->load_pyobj() != nullptr)
    return;
  c10::StorageImpl* cs = ci->unsafe_storage().unsafeGetStorageImpl();
  if (c10::raw::intrusive_ptr::use_count(cs) != 1 || cs->data_ptr().get_deleter() != &release_tpx_ref ||
      cs->pyobj_slot()->load_pyobj() != nullptr ||
      storage_weak_count(cs) > 1)
    return;
  static const c10::Device cpu(c10::kCPU);
  cs->set_data_ptr_noswap(c10::DataPtr(nullptr, cpu));  // drops the tpx storage
  cs->set_nbytes(0);
  p->free.push_back(c.unsafeReleaseTensorImpl());
}

__attribute__((hot)) at::Tensor from_cpu(const at::Tensor& c, int64_t index, bool fresh) {
  DeviceIndex dev_index = index >= 0 ? static_cast<DeviceIndex>(index) : t_current_device;
  if (!c.defined() || c.device().type() == kTpx) return c;
  TORCH_CHECK(c.device().type() == c10::kCPU, "tpx.from_cpu expects a CPU tensor, got one on ", c.device());
  TORCH_CHECK(c.layout() == c10::kStrided, "tpx.from_cpu expects a strided tensor, got layout ", c.layout());
  TORCH_CHECK(!c.is_quantized(), "tpx.from_cpu: quantized tensors are not supported");
  c10::StorageImpl* impl = c.storage().unsafeGetStorageImpl();
  TORCH_CHECK(impl != nullptr, "tpx.from_cpu: tensor has no storage");
  if (c10::impl::cow::is_cow_data_ptr(impl->data_ptr())) {
    c10::impl::cow::materialize_cow(impl);
  }
  if (fresh && adopt(c, dev_index)) return c;
  const c10::DataPtr& dp = impl->data_ptr();
  c10::Storage dev;
  if (dp.get_deleter() == &release_tpx_ref) {
    dev = c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(static_cast<c10::StorageImpl*>(dp.get_context())));
  } else if (fresh && c.use_count() == 1 && c10::raw::intrusive_ptr::use_count(impl) == 1) {
    // A C++ kernel's fresh CPU result (``fresh``: the caller drops ``c`` right after), and only
    // ``c`` holds its memory: once the tpx storage below holds it, no tensor can reach this CPU
    // storage to wrap it again, so it needs no g_wrapped entry (and no lock).
    int64_t n = static_cast<int64_t>(impl->nbytes());
    account_alloc(n, dev_index);
    impl->set_resizable(false);
    c10::raw::intrusive_ptr::incref(impl);  // (account_alloc checked dev_index)
    c10::DataPtr tdp(impl->mutable_data(), impl, kFreshDeleters[dev_index], c10::Device(kTpx, dev_index));
    dev = c10::Storage(c10::Storage::use_byte_size_t(), impl->nbytes(), std::move(tdp), &g_allocator, true);
  } else {
    std::lock_guard<std::mutex> lock(g_wrap_mu);
    auto it = g_wrapped.find(impl);
    c10::intrusive_ptr<c10::StorageImpl> existing;
    if (it != g_wrapped.end()) existing = it->second.lock();
    if (existing) {
      dev = c10::Storage(std::move(existing));
    } else {
      int64_t n = static_cast<int64_t>(impl->nbytes());
      account_alloc(n, dev_index);
      impl->set_resizable(false);  // the tpx side holds this pointer: it must never move
      c10::DataPtr tdp(impl->mutable_data(),
                       new CpuRef{c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl), n, dev_index, true},
                       &release_cpu_ref, c10::Device(kTpx, dev_index));
      dev = c10::Storage(c10::Storage::use_byte_size_t(), impl->nbytes(), std::move(tdp), &g_allocator, true);
      g_wrapped.insert_or_assign(impl, dev.getWeakStorageImpl());
    }
  }
  return make_like(std::move(dev), c10::DispatchKey::PrivateUse1, c);
}

at::Tensor from_cpu(const at::Tensor& c, int64_t index) { return from_cpu(c, index, false); }

// from_cpu(c, index, true) for a kernel's fresh result the caller hands over: adopted, it is
// moved on as it is (no reference taken and dropped); anything else takes from_cpu's way.
__attribute__((hot)) at::Tensor from_cpu_fresh(at::Tensor&& c, int64_t index) {
  if (c.defined() && c.device().type() == c10::kCPU && c.layout() == c10::kStrided) {
    DeviceIndex dev_index = index >= 0 ? static_cast<DeviceIndex>(index) : t_current_device;
    if (adopt(c, dev_index)) return std::move(c);  // (adopt refuses a copy-on-write storage)
  }
  return from_cpu(c, index, true);
}

// Grow a tpx storage in place (new block from the tpx allocator, old bytes copied).
void grow_storage(c10::StorageImpl* impl, size_t newsize) {
  size_t old = impl->nbytes();
  if (newsize <= old && impl->data_ptr().get() != nullptr) {
    impl->set_nbytes(newsize);
    return;
  }
  c10::DataPtr fresh = allocate_block(newsize, impl->device().index() < 0 ? 0 : impl->device().index());
  size_t ncopy = std::min(old, newsize);
  if (ncopy && impl->data_ptr().get()) std::memcpy(fresh.get(), impl->data_ptr().get(), ncopy);
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(newsize);
}

// ---------------------------------------------------------------- generator
// tpx's generators are counter-based like CUDA's: the state is (seed, offset), laid out as CUDA's
// Philox state (16 bytes: seed, then offset, as uint64), and every random op advances the offset
// (by a multiple of 4, backend/rng.py). The numbers themselves come from the CPU kernels, driven
// by a CPU generator chosen per op (rng_acquire):
// * while the generator is "in step" (after manual_seed, or after jumping to a state this
//   generator handed out, get_state()), its CPU stream: the CPU default generator for the default
//   tpx generators (so a seeded run on tpx matches the CPU run draw for draw, as before), a private
//   one for torch.Generator(device="tpx") (which matches torch.Generator().manual_seed(s));
// * otherwise (a state it never handed out: DTensor's per-shard offsets, a state from another
//   process or a checkpoint) a fresh CPU generator whose MT19937 words are Philox4x32-10 of
//   (key=seed, subsequence=offset): the same numbers for the same (seed, offset) in every process.
// A state handed out is remembered with the stream's position (kSnapshots of them), so
// set_state(get_state()) replays exactly, in step.
constexpr size_t kSnapshots = 64;
// TPX_RNG=host (parity's side run that aligns the random draws with a CPU run): every random op
// draws from its generator's CPU stream in program order, as a CPU run does; states set from
// outside (DTensor's per-shard offsets) only move (seed, offset) and never rewind the stream.
std::atomic<bool> g_rng_host_stream{false};

struct RngState : c10::intrusive_ptr_target {
  uint64_t seed = c10::default_rng_seed_val;
  uint64_t offset = 0;
  bool follows_host = false;  // a default generator: in-step draws come from the CPU default generator
  at::Generator host;         // otherwise: the private CPU stream
  bool in_step = true;
  std::deque<std::tuple<uint64_t, uint64_t, c10::intrusive_ptr<c10::TensorImpl>>> snapshots;

  at::Generator stream() const { return follows_host ? at::detail::getDefaultCPUGenerator() : host; }

  void seed_stream(uint64_t s) {
    at::Generator g = stream();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(s);
  }

  void snapshot() {
    if (!in_step) return;
    at::Generator g = stream();
    c10::intrusive_ptr<c10::TensorImpl> st;
    {
      std::lock_guard<std::mutex> lock(g.mutex());
      st = g.get_state().getIntrusivePtr();
    }
    for (auto it = snapshots.begin(); it != snapshots.end(); ++it) {
      if (std::get<0>(*it) == seed && std::get<1>(*it) == offset) {
        snapshots.erase(it);
        break;
      }
    }
    snapshots.emplace_back(seed, offset, std::move(st));
    if (snapshots.size() > kSnapshots) snapshots.pop_front();
  }

  // Stand at (s, o): in step when a snapshot names it (the stream goes back there), else counter mode.
  void jump(uint64_t s, uint64_t o) {
    TORCH_CHECK(o % 4 == 0, "offset must be a multiple of 4");
    seed = s;
    offset = o;
    if (g_rng_host_stream.load()) {
      in_step = true;
      return;
    }
    in_step = false;
    for (const auto& snap : snapshots) {
      if (std::get<0>(snap) == s && std::get<1>(snap) == o) {
        at::Generator g = stream();
        std::lock_guard<std::mutex> lock(g.mutex());
        g.set_state(at::Tensor(std::get<2>(snap)));
        in_step = true;
        return;
      }
    }
  }

  c10::intrusive_ptr<RngState> clone() const {
    auto r = c10::make_intrusive<RngState>();
    r->seed = seed;
    r->offset = offset;
    r->in_step = in_step;
    r->snapshots = snapshots;
    at::Generator g = stream();
    std::lock_guard<std::mutex> lock(g.mutex());
    r->host = g.clone();  // a clone draws what this generator would draw next, independently
    return r;
  }
};

// The CPU generator a counter-mode op at (seed, offset) runs on.
at::Generator counter_stream(uint64_t seed, uint64_t offset) {
  at::philox_engine philox(seed, /*subsequence=*/offset, /*offset=*/0);
  at::mt19937_data_pod pod;
  pod.seed_ = seed;
  pod.left_ = 1;  // the first draw twists the state, as after seeding
  pod.seeded_ = true;
  pod.next_ = 0;
  for (auto& w : pod.state_) w = philox();
  at::mt19937 engine;
  engine.set_data(pod);
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  g.get<at::CPUGeneratorImpl>()->set_engine(engine);
  return g;
}

struct TpxGeneratorImpl final : c10::GeneratorImpl {
  TpxGeneratorImpl(DeviceIndex idx, c10::intrusive_ptr<RngState> state)
      : c10::GeneratorImpl(c10::Device(kTpx, idx), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        state_(std::move(state)) {}

  static at::Generator make(DeviceIndex idx, bool is_default) {
    auto st = c10::make_intrusive<RngState>();
    st->follows_host = is_default;
    if (is_default) {
      st->seed = at::detail::getDefaultCPUGenerator().current_seed();
    } else {
      st->host = at::make_generator<at::CPUGeneratorImpl>(st->seed);
    }
    return at::make_generator<TpxGeneratorImpl>(idx, std::move(st));
  }

  void set_current_seed(uint64_t seed) override {
    state_->seed = seed;
    state_->offset = 0;
    state_->in_step = true;
    state_->seed_stream(seed);
  }
  void set_offset(uint64_t offset) override { state_->jump(state_->seed, offset); }
  uint64_t get_offset() const override { return state_->offset; }
  uint64_t current_seed() const override { return state_->seed; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
    set_current_seed(s);
    return s;
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    state_->snapshot();
    auto t = at::detail::empty_cpu({16}, c10::ScalarType::Byte, std::nullopt, std::nullopt, std::nullopt,
                                   std::nullopt);
    auto* p = t.data_ptr<uint8_t>();
    uint64_t seed = state_->seed;
    int64_t offset = static_cast<int64_t>(state_->offset);
    std::memcpy(p, &seed, 8);
    std::memcpy(p + 8, &offset, 8);
    return t.getIntrusivePtr();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    at::detail::check_rng_state(new_state);
    auto n = new_state.numel();
    TORCH_CHECK(n == 16 || n == 8, "RNG state is wrong size: a tpx generator's state is 16 bytes (seed and offset, "
                "uint64 each, as CUDA's Philox state), got ", n);
    const auto* p = new_state.data_dtype_initialized<uint8_t>();
    uint64_t seed = 0;
    int64_t offset = 0;
    std::memcpy(&seed, p, 8);
    if (n == 16) std::memcpy(&offset, p + 8, 8);
    state_->jump(seed, static_cast<uint64_t>(offset));
  }
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& gen) override {
    auto* other = dynamic_cast<TpxGeneratorImpl*>(gen.get());
    TORCH_CHECK(other, "Expected a tpx Generator");
    state_ = other->state_;
  }
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override {
    return c10::make_intrusive<TpxGeneratorImpl>(device().index(), state_);
  }

  // The CPU generator this op draws from (None: the CPU default generator), see above.
  std::optional<at::Generator> acquire() {
    if (state_->in_step) {
      if (state_->follows_host) return std::nullopt;
      return state_->host;
    }
    return counter_stream(state_->seed, state_->offset);
  }
  void advance(uint64_t increment) { state_->offset += increment; }
  bool in_step() const { return state_->in_step; }

  c10::intrusive_ptr<RngState> state_;

 private:
  TpxGeneratorImpl* clone_impl() const override { return new TpxGeneratorImpl(device().index(), state_->clone()); }
};

TpxGeneratorImpl* tpx_generator(const at::Generator& g) {
  auto* impl = g.defined() ? dynamic_cast<TpxGeneratorImpl*>(g.unsafeGetGeneratorImpl()) : nullptr;
  TORCH_CHECK_TYPE(impl, "expected a tpx Generator");
  return impl;
}

// For the C++ kernels' random ops (tpx_dispatch.cpp): the same protocol as backend/rng.py's
// acquire/advance around one op.
bool rng_host_stream() { return g_rng_host_stream.load(); }

std::optional<at::Generator> rng_acquire(const at::Generator& g) {
  auto* impl = tpx_generator(g);
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return impl->acquire();
}

void rng_advance(const at::Generator& g, uint64_t increment) {
  auto* impl = tpx_generator(g);
  std::lock_guard<std::mutex> lock(impl->mutex_);
  impl->advance(increment);
}

// ---------------------------------------------------------------- hooks
struct TpxHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_device_count.load() > 0; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(g_device_count.load()); }
  void setCurrentDevice(DeviceIndex d) const override {
    check_index(d);
    t_current_device = d;
  }
  DeviceIndex getCurrentDevice() const override { return t_current_device; }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    auto old = t_current_device;
    if (d < 0) return old;
    check_index(d);
    t_current_device = d;
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override { return exchangeDevice(d); }
  const at::Generator& getDefaultGenerator(DeviceIndex idx) const override {
    static std::vector<at::Generator> gens = [] {
      std::vector<at::Generator> v;
      for (int i = 0; i < kMaxDevices; ++i) v.push_back(TpxGeneratorImpl::make(static_cast<DeviceIndex>(i), true));
      return v;
    }();
    DeviceIndex i = idx < 0 ? t_current_device : idx;
    check_index(i);
    return gens[i];
  }
  at::Generator getNewGenerator(DeviceIndex idx) const override {
    DeviceIndex i = idx < 0 ? t_current_device : idx;
    check_index(i);
    return TpxGeneratorImpl::make(i, false);
  }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kTpx, t_current_device); }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    return g_pinned.count(data) > 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    grow_storage(storage.unsafeGetStorageImpl(), newsize);
  }
};

// ---------------------------------------------------------------- device guard: streams, events
struct TimedEvent {
  int64_t ns = 0;
  bool recorded = false;
};

thread_local int64_t t_current_stream[64] = {0};
std::atomic<int64_t> g_next_stream{1};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct TpxGuardImpl final : c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return kTpx; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = t_current_device;
    if (d.index() >= 0 && d.index() != old) {
      check_index(d.index());
      t_current_device = d.index();
    }
    return c10::Device(kTpx, old);
  }
  c10::Device getDevice() const override { return c10::Device(kTpx, t_current_device); }
  void setDevice(c10::Device d) const override {
    if (d.index() < 0) return;
    check_index(d.index());
    t_current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) t_current_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    DeviceIndex i = d.index() < 0 ? t_current_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpx, i), t_current_stream[i & 63]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    DeviceIndex i = d.index() < 0 ? t_current_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpx, i), 0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getNewStream(d, 0); }
  c10::Stream getNewStream(c10::Device d, int) const override {
    DeviceIndex i = d.index() < 0 ? t_current_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpx, i), g_next_stream.fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    DeviceIndex i = s.device_index() < 0 ? t_current_device : s.device_index();
    int64_t old = t_current_stream[i & 63];
    t_current_stream[i & 63] = s.id();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpx, i), old);
  }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    delete static_cast<TimedEvent*>(event);
  }
  void record(void** event, const c10::Stream&, const DeviceIndex, const c10::EventFlag) const override {
    if (*event == nullptr) *event = new TimedEvent();
    auto* e = static_cast<TimedEvent*>(*event);
    e->ns = now_ns();  // kernels run synchronously, so "now" is when prior work completed
    e->recorded = true;
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  DeviceIndex deviceCount() const noexcept override { return static_cast<DeviceIndex>(g_device_count.load()); }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start && end, "tpx: both events must be recorded before elapsed_time()");
    auto* a = static_cast<TimedEvent*>(start);
    auto* b = static_cast<TimedEvent*>(end);
    TORCH_CHECK(a->recorded && b->recorded, "tpx: both events must be recorded before elapsed_time()");
    return double(b->ns - a->ns) / 1e6;
  }
};

// ---------------------------------------------------------------- structural kernels
void check_dtype(c10::ScalarType dt, const char* op) {
  if ((dt == c10::kDouble || dt == c10::kComplexDouble) && !float64_allowed()) {
    TORCH_CHECK_TYPE(false, "tpx does not support ", c10::toString(dt), " (", op,
                     "): the device has no float64 units. Use torch.float32 (e.g. .float(), or "
                     "dtype=torch.float32), or keep this tensor on the CPU.");
  }
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> mf) {
  auto dt = c10::dtype_or_default(dtype);
  check_dtype(dt, "aten::empty");
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided, "tpx supports only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
  c10::DeviceGuard g(c10::device_or_default(device));
  return at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dt, mf);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  auto dt = c10::dtype_or_default(dtype);
  check_dtype(dt, "aten::empty_strided");
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided, "tpx supports only strided tensors");
  c10::DeviceGuard g(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dt);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> mf) {
  auto* impl = self.unsafeGetTensorImpl();
  int64_t numel = c10::multiply_integers(size);
  impl->set_sizes_contiguous(size);
  auto fmt = mf.value_or(c10::MemoryFormat::Contiguous);
  if (fmt != c10::MemoryFormat::Preserve && fmt != c10::MemoryFormat::Contiguous) impl->empty_tensor_restride(fmt);
  if (numel > 0) {
    size_t need = static_cast<size_t>(self.storage_offset() + numel) * self.dtype().itemsize();
    if (!self.storage()) {
      impl->set_storage_keep_dtype(c10::Storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, true));
    }
    auto* st = self.storage().unsafeGetStorageImpl();
    if (need > st->nbytes()) grow_storage(st, need);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kTpx, "Expected a tpx storage for set_(), got one on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (!(impl->storage().is_alias_of(source))) impl->set_storage_keep_dtype(std::move(source));
  if (stride.data() != nullptr && !stride.empty()) impl->set_sizes_and_strides(size, stride, offset);
  else {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(offset);
  }
  int64_t numel = c10::multiply_integers(size);
  if (numel > 0) {
    int64_t max_index = offset;
    for (size_t i = 0; i < size.size(); ++i) max_index += (size[i] - 1) * self.stride(i);
    size_t need = static_cast<size_t>(max_index + 1) * self.dtype().itemsize();
    auto* st = self.storage().unsafeGetStorageImpl();
    if (need > st->nbytes()) grow_storage(st, need);
  }
  return self;
}

at::Tensor& set_storage_only(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& src) {
  TORCH_CHECK(src.device().type() == kTpx, "Expected a tpx tensor for set_(), got one on ", src.device());
  if (self.is_same(src)) return self;
  return set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  return set_storage(self, c10::Storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, true), 0, {0}, {});
}


// ---------------------------------------------------------------- attention kernel choice
// scaled_dot_product_attention (a composite) asks the device's _fused_sdp_choice_stub which
// kernel to use and takes the math one when the device registered none. tpx asks the CPU's
// choice for CPU aliases of the same inputs, so eager tpx runs the very kernel the CPU would
// (flash-attention-for-CPU or math, each with its own autograd formula) and agrees bitwise.
// The CPU's choice reads only metadata (shapes, strides, dtypes, flags), so it is called
// directly on the tpx tensors: no dispatch, which also keeps it working on FakeTensors while
// torch.compile traces (a CPU alias of a fake tensor would be a real tensor there).
int64_t sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  return at::native::_fused_sdp_choice_cpp(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

// ---------------------------------------------------------------- batch argument conversion
// The Python kernels' hot path in one call: replace every tpx tensor in args/kwargs (also inside
// lists and tuples) by its CPU alias and tpx devices by the CPU device; remember the pairs.
struct Unwrap {
  py::list pairs;
  int tpx_index = -2;     // the tpx tensors' device index (-2: no tpx tensor)
  int device_index = -2;  // an explicit tpx device argument's index (-1: "tpx", the current one)
  bool cpu_nonscalar = false;
  bool other = false;  // an object the Python path must handle (e.g. a tpx Generator)
};

py::object unwrap_one(py::handle obj, Unwrap& u);

py::object unwrap_seq(py::handle seq, Unwrap& u, bool is_tuple) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  bool changed = false;
  std::vector<py::object> out;
  out.reserve(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    py::object o = unwrap_one(items[i], u);
    if (o.ptr() != items[i]) changed = true;
    out.push_back(std::move(o));
  }
  if (!changed) return py::reinterpret_borrow<py::object>(seq);
  if (is_tuple) {
    py::tuple t(n);
    for (Py_ssize_t i = 0; i < n; ++i) t[i] = out[i];
    return std::move(t);
  }
  py::list l(n);
  for (Py_ssize_t i = 0; i < n; ++i) l[i] = out[i];
  return std::move(l);
}

py::object unwrap_one(py::handle obj, Unwrap& u) {
  PyObject* p = obj.ptr();
  if (THPVariable_Check(p)) {
    const at::Tensor& t = THPVariable_Unpack(p);
    if (!t.defined()) return py::reinterpret_borrow<py::object>(obj);
    auto dt = t.device().type();
    if (dt == kTpx) {
      py::object c = py::reinterpret_steal<py::object>(THPVariable_Wrap(to_cpu(t)));
      u.pairs.append(py::make_tuple(c, obj));
      int idx = t.device().index();
      if (u.tpx_index >= 0 && idx != u.tpx_index) {
        // what CUDA says for cuda:0 and cuda:1 operands of one op
        TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, tpx:",
                    std::min(idx, u.tpx_index), " and tpx:", std::max(idx, u.tpx_index), "!");
      }
      u.tpx_index = idx;
      return c;
    }
    if (dt == c10::kCPU && t.dim() != 0) u.cpu_nonscalar = true;
    return py::reinterpret_borrow<py::object>(obj);
  }
  if (PyList_CheckExact(p)) return unwrap_seq(obj, u, false);
  if (PyTuple_CheckExact(p)) return unwrap_seq(obj, u, true);
  if (THPDevice_Check(p)) {
    if (reinterpret_cast<THPDevice*>(p)->device.type() == kTpx) {
      if (u.device_index == -2) u.device_index = reinterpret_cast<THPDevice*>(p)->device.index();
      return py::reinterpret_steal<py::object>(THPDevice_New(c10::Device(c10::kCPU)));
    }
    return py::reinterpret_borrow<py::object>(obj);
  }
  if (p == Py_None || PyLong_CheckExact(p) || PyFloat_CheckExact(p) || PyBool_Check(p)) {
    return py::reinterpret_borrow<py::object>(obj);
  }
  if (std::string(Py_TYPE(p)->tp_name) == "torch._C.Generator") u.other = true;
  return py::reinterpret_borrow<py::object>(obj);
}

// -> (cargs: list, ckwargs: dict, pairs: list[(cpu, tpx)], tpx_index, cpu_nonscalar, other)
py::tuple unwrap(py::tuple args, py::dict kwargs) {
  Unwrap u;
  py::list cargs(args.size());
  for (size_t i = 0; i < args.size(); ++i) cargs[i] = unwrap_one(args[i], u);
  py::dict ckw;
  for (auto item : kwargs) ckw[item.first] = unwrap_one(item.second, u);
  // Results go to the device the op names (empty_like(x, device="tpx:1")), else to its tensors'.
  if (u.device_index != -2 && (u.device_index >= 0 || u.tpx_index == -2)) u.tpx_index = u.device_index;
  return py::make_tuple(cargs, ckw, u.pairs, u.tpx_index, u.cpu_nonscalar, u.other);
}

// CPU results -> tpx tensors (the caller's own tpx tensor when the result is one of its aliases).
py::object wrap_one(py::handle out, py::list& pairs, bool f64_ok, bool& f64_hit, int64_t index) {
  PyObject* p = out.ptr();
  if (THPVariable_Check(p)) {
    for (auto pr : pairs) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(pr);
      if (t[0].ptr() == p) return t[1];
    }
    const at::Tensor& t = THPVariable_Unpack(p);
    if (!t.defined() || t.device().type() != c10::kCPU) return py::reinterpret_borrow<py::object>(out);
    auto st = t.scalar_type();
    if ((st == c10::kDouble || st == c10::kComplexDouble) && !f64_ok) {
      f64_hit = true;
      return py::none();
    }
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(from_cpu(t, index)));
  }
  if (PyTuple_Check(p) || PyList_Check(p)) {
    bool is_tuple = PyTuple_Check(p);
    py::sequence seq = py::reinterpret_borrow<py::sequence>(out);
    size_t n = seq.size();
    py::list l(n);
    for (size_t i = 0; i < n; ++i) l[i] = wrap_one(seq[i], pairs, f64_ok, f64_hit, index);
    if (is_tuple) return py::tuple(l);
    return std::move(l);
  }
  return py::reinterpret_borrow<py::object>(out);
}

// -> (result, float64_refused)
py::tuple wrap(py::object out, py::list pairs, bool f64_ok, int64_t index) {
  bool f64_hit = false;
  py::object r = wrap_one(out, pairs, f64_ok, f64_hit, index);
  return py::make_tuple(r, f64_hit);
}

// ---------------------------------------------------------------- registration
TpxHooks* g_hooks = nullptr;
TpxGuardImpl g_guard;

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::SetAllocator(kTpx, &g_allocator, /*priority=*/100);
    c10::impl::registerDeviceGuard(kTpx, &g_guard);
    if (!at::isPrivateUse1HooksRegistered()) {
      g_hooks = new TpxHooks();
      at::RegisterPrivateUse1HooksInterface(g_hooks);
    }
  });
}

}  // namespace tpx
#pragma GCC visibility pop

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpx::sdp_choice)
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(tpx::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(tpx::empty_strided));
  m.impl("as_strided", TORCH_FN(tpx::as_strided));
  m.impl("view", TORCH_FN(tpx::view));
  m.impl("_reshape_alias", TORCH_FN(tpx::reshape_alias));
  m.impl("resize_", TORCH_FN(tpx::resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(tpx::set_storage));
  m.impl("set_.source_Storage", TORCH_FN(tpx::set_storage_only));
  m.impl("set_.source_Tensor", TORCH_FN(tpx::set_tensor));
  m.impl("set_", TORCH_FN(tpx::set_empty));
}

#pragma GCC visibility push(hidden)
namespace tpx {
void register_dispatch_bindings(py::module& m);  // tpx_dispatch.cpp: the C++ compute kernels
}
#pragma GCC visibility pop

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  tpx::install();
  tpx::register_dispatch_bindings(m);
  m.def("to_cpu", &tpx::to_cpu, "zero-copy CPU view of a tpx tensor");
  m.def("reused_aliases", [] { return tpx::g_alias_reused.load(); },
        "CPU aliases the unboxed kernels took from the per-thread pool instead of making them (tests)");
  m.def("adopted_results", [] { return tpx::g_adopted.load(); },
        "kernel results turned into tpx tensors in place (no new TensorImpl/StorageImpl) so far");
  // What ATen's Scalar-overload composites pass to the Tensor overload (copysign.Scalar,
  // remainder.Scalar...): a 0-dim CPU tensor flagged as a wrapped number (it takes part in type
  // promotion like a Python number). Python kernels receive it as a plain Python number, and a
  // Python number cannot be bound to a Tensor argument again, nor can Python set the flag.
  m.def("wrapped_number", [](py::handle v) {
    PyObject* p = v.ptr();
    at::Scalar s;
    if (PyBool_Check(p)) s = at::Scalar(p == Py_True);
    else if (PyLong_Check(p)) s = at::Scalar(static_cast<int64_t>(v.cast<int64_t>()));
    else if (PyFloat_Check(p)) s = at::Scalar(PyFloat_AS_DOUBLE(p));
    else if (PyComplex_Check(p)) s = at::Scalar(c10::complex<double>(PyComplex_RealAsDouble(p), PyComplex_ImagAsDouble(p)));
    else TORCH_CHECK_TYPE(false, "tpx.wrapped_number expects a Python bool, int, float or complex");
    at::Tensor t = at::scalar_to_tensor(s);
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
  }, "0-dim CPU tensor marked as a wrapped Python number");
  m.def("unwrap", &tpx::unwrap, "tpx tensors/devices in (args, kwargs) -> CPU aliases");
  m.def("wrap", &tpx::wrap, "CPU results -> tpx tensors");
  m.def("from_cpu", static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(&tpx::from_cpu), "zero-copy tpx tensor over a CPU tensor's memory",
        py::arg("t"), py::arg("index") = -1);
  // Memory accounting, per device index (-1: the current device). set_capacity(n) sets every
  // device's capacity; set_capacity(n, i) one device's.
  auto dev = [](int64_t i) -> tpx::DeviceMemory& { return tpx::mem(i < 0 ? tpx::t_current_device : i); };
  m.def("set_capacity", [](int64_t n, int64_t i) {
    if (i < 0) {
      for (auto& d : tpx::g_mem) d.capacity = n;
    } else {
      tpx::mem(i).capacity = n;
    }
  }, py::arg("n"), py::arg("index") = -1);
  m.def("capacity", [dev](int64_t i) { return dev(i).capacity.load(); }, py::arg("index") = -1);
  m.def("memory_allocated", [dev](int64_t i) { return dev(i).allocated.load(); }, py::arg("index") = -1);
  m.def("max_memory_allocated", [dev](int64_t i) { return dev(i).peak.load(); }, py::arg("index") = -1);
  m.def("reset_peak", [dev](int64_t i) {
    auto& d = dev(i);
    d.peak = d.allocated.load();
  }, py::arg("index") = -1);
  m.def("num_ooms", [dev](int64_t i) { return dev(i).num_ooms.load(); }, py::arg("index") = -1);
  m.def("memory_stats", [dev](int64_t i) {
    auto& d = dev(i);
    py::dict r;
    int64_t na = d.num_allocs.load(), nf = d.num_frees.load();
    r["allocated_bytes.all.current"] = d.allocated.load();
    r["allocated_bytes.all.peak"] = d.peak.load();
    r["allocated_bytes.all.allocated"] = d.total_allocated.load();
    r["allocated_bytes.all.freed"] = d.total_freed.load();
    r["allocation.all.current"] = na - nf;
    r["allocation.all.allocated"] = na;
    r["allocation.all.freed"] = nf;
    r["num_ooms"] = d.num_ooms.load();
    r["capacity"] = d.capacity.load();
    return r;
  }, py::arg("index") = -1);
  m.def("set_float64_allowed", [](bool v) { tpx::g_float64_allowed = v; });
  m.def("set_rng_host_stream", [](bool v) { tpx::g_rng_host_stream = v; },
        "TPX_RNG=host: random ops draw from the CPU stream in program order, states set from outside do not rewind it");
  m.def("float64_scope_enter", [] { ++tpx::t_float64_scope; });
  m.def("float64_scope_exit", [] { --tpx::t_float64_scope; });
  m.def("float64_allowed", &tpx::float64_allowed);
  m.def("set_device_count", [](int n, std::string hint) {
    TORCH_CHECK(n >= 0 && n <= tpx::kMaxDevices, "tpx: device count must be 0..", tpx::kMaxDevices, ", got ", n);
    tpx::g_device_count = n;
    if (!hint.empty()) {
      std::lock_guard<std::mutex> lock(tpx::g_hint_mu);
      tpx::g_device_hint = hint;
    }
    if (tpx::t_current_device >= n) tpx::t_current_device = 0;
  }, py::arg("n"), py::arg("hint") = "");
  m.def("device_count", [] { return tpx::g_device_count.load(); });
  m.def("current_device", [] { return int(tpx::t_current_device); });
  m.def("set_device", [](int i) {
    tpx::check_index(i);
    tpx::t_current_device = static_cast<c10::DeviceIndex>(i);
  });
  m.def("check_device", [](int64_t i) { tpx::check_index(i); }, "raise the invalid-ordinal error unless visible");
  // Generators (backend/rng.py): the default one of a device, and the per-op draw protocol.
  m.def("default_generator", [](int64_t i) {
    tpx::install();
    return at::Generator(at::detail::getPrivateUse1Hooks().getDefaultGenerator(static_cast<c10::DeviceIndex>(i)));
  }, "the default tpx generator of device i (-1: the current device)");
  m.def("rng_acquire", [](const at::Generator& g) {
    auto* impl = tpx::tpx_generator(g);
    std::lock_guard<std::mutex> lock(impl->mutex_);
    return impl->acquire();
  }, "the CPU generator the next op of this tpx generator draws from (None: the CPU default one)");
  m.def("rng_advance", [](const at::Generator& g, uint64_t increment) {
    auto* impl = tpx::tpx_generator(g);
    TORCH_CHECK(increment % 4 == 0, "offset increment must be a multiple of 4");
    std::lock_guard<std::mutex> lock(impl->mutex_);
    impl->advance(increment);
  }, "advance a tpx generator's offset after an op");
  m.def("rng_in_step", [](const at::Generator& g) { return tpx::tpx_generator(g)->in_step(); },
        "whether the generator draws from its CPU stream (else from (seed, offset))");
  m.def("storage_is_shared", [](const at::Tensor& a, const at::Tensor& b) {
    return a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
  });
}
