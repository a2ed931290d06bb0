// The emulated NPU itself: device selection, memory (host memory accounted per device), streams and events,
// per-device random generators, pinned host memory, and the PrivateUse1 hooks that expose all of it to torch.
#include "sim.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <c10/core/GeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/CachingHostAllocator.h>

#include <cstring>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <pthread.h>
#include <unistd.h>
#include <sstream>
#include <vector>

namespace ascend_sim {

// ================================================================================================================
// Devices
// ================================================================================================================

// The number of devices this process sees: set by the Python side (ASCEND_SHIM_SIM_DEVICES narrowed by
// ASCEND_RT_VISIBLE_DEVICES, both parsed there). As on the runtime, a program may still change the visible devices
// until it first uses a device (torch_npu's device_count() is not cached before initialization); from then on the
// count is fixed.
static std::atomic<int> g_configured_count{-1};
static std::atomic<bool> g_count_fixed{false};

void configure_device_count(int n) {
  TORCH_CHECK(n >= 0 && n <= kMaxDevices, "device count ", n, " is outside 0..", kMaxDevices);
  TORCH_CHECK(!g_count_fixed.load() || n == device_count(),
              "the emulated device count is already fixed at ", static_cast<int>(device_count()));
  g_configured_count.store(n);
}

c10::DeviceIndex device_count() {
  const int configured = g_configured_count.load(std::memory_order_relaxed);
  return static_cast<c10::DeviceIndex>(configured >= 0 ? configured : 8);
}

void fix_device_count() { g_count_fixed.store(true, std::memory_order_relaxed); }
bool device_count_fixed() { return g_count_fixed.load(std::memory_order_relaxed); }

// Like CUDA/ACL, the current device is per host thread.
static thread_local c10::DeviceIndex tls_device = 0;

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "Invalid NPU device index ", static_cast<int>(index),
              ": the emulated NPU has ", static_cast<int>(device_count()),
              " devices (set ASCEND_SHIM_SIM_DEVICES to change).");
}

c10::DeviceIndex current_device() { return tls_device; }

void set_device(c10::DeviceIndex index) {
  if (index < 0) return;  // torch's convention: a negative index is a no-op
  check_index(index);
  tls_device = index;
}

c10::DeviceIndex resolve_index(c10::DeviceIndex index) { return index < 0 ? current_device() : index; }

namespace {
std::atomic<bool> g_used{false};  // set by the first device allocation
std::atomic<bool> g_bad_fork{false};
const bool g_atfork_registered = [] {
  pthread_atfork(nullptr, nullptr, [] { g_bad_fork.store(g_used.load()); });
  return true;
}();
}  // namespace

bool in_bad_fork() { return g_bad_fork.load(std::memory_order_relaxed); }

void forget_use() {
  g_used.store(false);
  g_count_fixed.store(false);
}

void check_not_forked() {
  TORCH_CHECK(!in_bad_fork(), "Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, "
                              "you must use the 'spawn' start method");
}

// ================================================================================================================
// Memory: every npu storage is host memory wrapped in a DataPtr whose context accounts it to one device.
// ================================================================================================================

c10::StreamId current_stream_id(c10::DeviceIndex index);  // the thread's current stream (below)

namespace {

// Ascend 910B3: 64 GiB HBM per device -- but never more than the host's physical memory, which holds the
// device's storages: a batch-size finder must not "fit" what the machine cannot hold.
int64_t device_memory() {
  static const int64_t total = [] {
    const int64_t hbm = int64_t(64) << 30;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? std::min(hbm, int64_t(pages) * int64_t(page)) : hbm;
  }();
  return total;
}
const int64_t kTotalMemory = device_memory();

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// current / peak / allocated / freed, as c10's Stat
struct Counter {
  std::atomic<int64_t> current{0}, peak{0}, allocated{0}, freed{0};
  void add(int64_t n) {
    raise_peak(peak, current.fetch_add(n, std::memory_order_relaxed) + n);
    allocated.fetch_add(n, std::memory_order_relaxed);
  }
  void sub(int64_t n) {
    current.fetch_sub(n, std::memory_order_relaxed);
    freed.fetch_add(n, std::memory_order_relaxed);
  }
  void reset_peak() { peak.store(current.load()); }
  void reset_accumulated() {
    allocated.store(0);
    freed.store(0);
  }
  CounterValues values() const { return {current.load(), peak.load(), allocated.load(), freed.load()}; }
};

// The statistics of one pool (all, small, large): bytes and blocks in use, bytes and segments reserved.
struct PoolCounters {
  Counter bytes, blocks, reserved, segments;
  std::array<Counter*, 4> all() { return {&bytes, &blocks, &reserved, &segments}; }
};

struct Block;
struct DeviceMemory {
  // in use: bytes of npu storages (memory_allocated()); reserved: capacity of every block the allocator holds
  // for the device, in use or cached for reuse (memory_reserved(), "segments")
  std::array<PoolCounters, kPools> pools;
  std::atomic<int64_t> ooms{0};
  std::atomic<int64_t> limit{kTotalMemory};
  std::atomic<double> fraction{1.0};
  std::mutex mutex;  // guards cache and live
  // (stream allocated on, capacity) -> free blocks kept for reuse (memory, bytes usable), the last freed last: as
  // torch_npu's allocator, a block freed on one stream is reused by allocations on that stream only
  std::map<std::pair<c10::StreamId, size_t>, std::vector<std::pair<void*, size_t>>> cache;
  std::set<Block*> live;  // blocks in use (memory snapshots list them)
};
std::array<DeviceMemory, kMaxDevices> g_memory;

// torch_npu's pools: blocks of at most 1 MiB come from the small pool
constexpr size_t kSmallSize = size_t(1) << 20;
int pool_of(size_t capacity) { return capacity <= kSmallSize ? kSmallPool : kLargePool; }

std::string format_bytes(int64_t n) {
  std::ostringstream out;
  out.precision(2);
  out << std::fixed;
  if (n >= (int64_t(1) << 30)) out << double(n) / double(int64_t(1) << 30) << " GiB";
  else if (n >= (int64_t(1) << 20)) out << double(n) / double(int64_t(1) << 20) << " MiB";
  else out << n << " bytes";
  return out.str();
}

// torch_npu's NPUCachingAllocator on Ascend910B: 32 bytes of padding, then whole 512-byte units.
constexpr size_t kMinBlockSize = 512;
constexpr size_t kPadSize = 32;
constexpr size_t kMaxAllocation = size_t(1) << 60;  // "more than 1EB"

size_t block_capacity(size_t nbytes) {
  const size_t padded = nbytes + kPadSize;
  return std::max(kMinBlockSize, kMinBlockSize * ((padded + kMinBlockSize - 1) / kMinBlockSize));
}

void account_reserve(DeviceMemory& m, size_t capacity) {
  const auto n = static_cast<int64_t>(capacity);
  for (int pool : {kAllPools, pool_of(capacity)}) {
    m.pools[pool].reserved.add(n);
    m.pools[pool].segments.add(1);
  }
}

void account_release(DeviceMemory& m, size_t capacity) {
  const auto n = static_cast<int64_t>(capacity);
  for (int pool : {kAllPools, pool_of(capacity)}) {
    m.pools[pool].reserved.sub(n);
    m.pools[pool].segments.sub(1);
  }
}

// Frees every cached block of the device (empty_cache(), or before giving up on an allocation).
void release_cached(c10::DeviceIndex index) {
  auto& m = g_memory.at(index);
  decltype(m.cache) cached;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    cached.swap(m.cache);
  }
  for (auto& [key, blocks] : cached) {
    for (const auto& [ptr, usable] : blocks) {
      c10::free_cpu(ptr);
      account_release(m, key.second);
    }
  }
}

// The smallest block cached for `stream` that fits `capacity` without wasting more than its size (blocks are
// not split) and holds `nbytes`; of equal ones the last freed, so a tensor freed and allocated again gets its
// memory back. `got`: its capacity and usable bytes.
void* take_cached(DeviceMemory& m, c10::StreamId stream, size_t capacity, size_t nbytes,
                  std::pair<size_t, size_t>* got) {
  std::lock_guard<std::mutex> lock(m.mutex);
  for (auto it = m.cache.lower_bound({stream, capacity});
       it != m.cache.end() && it->first.first == stream && it->first.second < 2 * capacity; ++it) {
    auto& blocks = it->second;
    for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
      if (b->second < nbytes) continue;
      void* ptr = b->first;
      *got = {it->first.second, b->second};
      blocks.erase(std::next(b).base());
      if (blocks.empty()) m.cache.erase(it);
      return ptr;
    }
  }
  return nullptr;
}

[[noreturn]] void out_of_memory(c10::DeviceIndex index, DeviceMemory& m, size_t nbytes) {
  m.ooms.fetch_add(1, std::memory_order_relaxed);
  const int64_t reserved = m.pools[kAllPools].reserved.current.load();
  TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory. Tried to allocate ",
                   format_bytes(static_cast<int64_t>(nbytes)), " (NPU ", static_cast<int>(index), "; ",
                   format_bytes(kTotalMemory), " total capacity; ",
                   format_bytes(m.pools[kAllPools].bytes.current.load()), " already allocated; ",
                   format_bytes(std::max<int64_t>(0, m.limit.load() - reserved)), " free; ", format_bytes(reserved),
                   " reserved in total by PyTorch; per-process memory fraction ", m.fraction.load(),
                   "). [emulated by ascend_shim's sim backend]");
}

// Reserves `capacity` bytes for a new block: the cache is released first when the limit would be passed.
void reserve_new(c10::DeviceIndex index, size_t nbytes, size_t capacity) {
  auto& m = g_memory.at(index);
  const auto n = static_cast<int64_t>(capacity);
  const auto& reserved = m.pools[kAllPools].reserved.current;
  if (reserved.load(std::memory_order_relaxed) + n > m.limit.load(std::memory_order_relaxed)) {
    release_cached(index);
    if (reserved.load(std::memory_order_relaxed) + n > m.limit.load(std::memory_order_relaxed)) {
      out_of_memory(index, m, nbytes);
    }
  }
  account_reserve(m, capacity);
}

void account_alloc(DeviceMemory& m, size_t nbytes, size_t capacity) {
  for (int pool : {kAllPools, pool_of(capacity)}) {
    m.pools[pool].bytes.add(static_cast<int64_t>(nbytes));
    m.pools[pool].blocks.add(1);
  }
}

void account_free(DeviceMemory& m, size_t nbytes, size_t capacity) {
  for (int pool : {kAllPools, pool_of(capacity)}) {
    m.pools[pool].bytes.sub(static_cast<int64_t>(nbytes));
    m.pools[pool].blocks.sub(1);
  }
}

// Context of every npu DataPtr: who owns the bytes, and which device they are accounted to. Host views
// (CPU aliases of npu memory) share the block, so the bytes live, and stay accounted, until the last user goes.
struct Block {
  void* raw = nullptr;           // memory of the caching allocator: back to its cache when the block dies
  c10::DataPtr owner;            // or memory adopted from a CPU allocation
  c10::Storage keep;             // or a CPU storage kept alive
  size_t nbytes = 0;
  size_t capacity = 0;           // bytes reserved for the block
  void* data = nullptr;          // where its bytes are
  c10::DeviceIndex index = 0;
  c10::StreamId stream = 0;      // the stream it was allocated on: its cache
  size_t usable = 0;             // bytes of memory behind `raw`
  std::atomic<int64_t> refs{1};
};

Block* track(Block* block) {
  auto& m = g_memory.at(block->index);
  account_alloc(m, block->nbytes, block->capacity);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.live.insert(block);
  return block;
}

// The memory of an adopted block (a host kernel's output) when the block alone holds it and the CPU allocator
// made it: kept by the allocator from then on, as torch_npu's allocator keeps every freed block; else nullptr.
void* take_over_host_memory(Block& block) {
  c10::DataPtr* data = &block.owner;
  c10::StorageImpl* storage = block.keep.unsafeGetStorageImpl();
  if (storage != nullptr) {
    if (block.keep.use_count() != 1) return nullptr;
    data = &storage->mutable_data_ptr();
  }
  if (data->get() == nullptr || data->get_context() != data->get() ||
      data->get_deleter() != c10::GetDefaultCPUAllocator()->raw_deleter())
    return nullptr;
  block.usable = block.nbytes;
  return data->release_context();
}

void release_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  if (block->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  auto& m = g_memory.at(block->index);
  account_free(m, block->nbytes, block->capacity);
  void* raw = block->raw ? block->raw : take_over_host_memory(*block);
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.live.erase(block);
    if (raw) m.cache[{block->stream, block->capacity}].emplace_back(raw, block->usable);
  }
  if (!raw) account_release(m, block->capacity);  // adopted memory goes back to its owner
  delete block;
}

c10::DataPtr make_block_ptr(void* data, Block* block) {
  block->data = data;
  return {data, block, &release_block, c10::Device(kNpu, block->index)};
}

// A caching DeviceAllocator in torch_npu's image: a freed block stays reserved for the next allocation of its
// size until empty_cache() (or memory pressure) returns it, so memory_reserved() >= memory_allocated().
struct NpuAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    check_not_forked();
    g_used.store(true, std::memory_order_relaxed);
    fix_device_count();
    const c10::DeviceIndex index = current_device();
    if (nbytes == 0) return {nullptr, c10::Device(kNpu, index)};
    TORCH_CHECK_WITH(OutOfMemoryError, nbytes < kMaxAllocation,
                     "NPU out of memory. Tried to allocate more than 1EB memory.");
    auto& m = g_memory.at(index);
    size_t capacity = block_capacity(nbytes);
    const c10::StreamId stream = current_stream_id(index);
    std::pair<size_t, size_t> cached{capacity, capacity};
    void* data = take_cached(m, stream, capacity, nbytes, &cached);
    capacity = cached.first;
    if (data == nullptr) {
      reserve_new(index, nbytes, capacity);
      try {
        data = c10::alloc_cpu(capacity);
      } catch (...) {
        account_release(m, capacity);
        throw;
      }
    }
    auto* block = new Block();
    block->raw = data;
    block->nbytes = nbytes;
    block->capacity = capacity;
    block->index = index;
    block->stream = stream;
    block->usable = cached.second;
    return make_block_ptr(data, track(block));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, std::size_t n) const override { default_copy_data(dst, src, n); }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) release_cached(i);
  }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex index) override;
  void resetAccumulatedStats(c10::DeviceIndex index) override { reset_accumulated(index); }
  void resetPeakStats(c10::DeviceIndex index) override { reset_peak(index); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    const auto reserved = memory_stats(index).reserved_bytes;  // free: what the allocator does not hold
    return {static_cast<size_t>(kTotalMemory - reserved), static_cast<size_t>(kTotalMemory)};
  }
};
NpuAllocator g_allocator;

void release_keepalive(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

}  // namespace

REGISTER_ALLOCATOR(kNpu, &g_allocator);

c10::Allocator* npu_allocator() { return &g_allocator; }

// A block for memory the device adopts, reserved in the allocator's units as one it made.
Block* adopted_block(size_t nbytes, c10::DeviceIndex index) {
  const size_t capacity = block_capacity(nbytes);
  reserve_new(index, nbytes, capacity);
  auto* block = new Block();
  block->nbytes = nbytes;
  block->capacity = capacity;
  block->index = index;
  block->stream = current_stream_id(index);
  return block;
}

c10::DataPtr adopt_data(c10::DataPtr owner, size_t nbytes, c10::DeviceIndex index) {
  void* data = owner.get();
  if (nbytes == 0) return {data, c10::Device(kNpu, index)};
  auto* block = adopted_block(nbytes, index);
  block->owner = std::move(owner);
  return make_block_ptr(data, track(block));
}

c10::DataPtr adopt_storage(const c10::Storage& cpu_storage, c10::DeviceIndex index) {
  const size_t nbytes = cpu_storage.nbytes();
  void* data = const_cast<void*>(cpu_storage.data());
  if (nbytes == 0) return {data, c10::Device(kNpu, index)};
  auto* block = adopted_block(nbytes, index);
  block->keep = cpu_storage;
  return make_block_ptr(data, track(block));
}

// A CPU DataPtr onto npu memory. It holds the memory block itself (not the storage), so a host alias stays valid
// even if the npu storage is later resized onto new memory.
c10::DataPtr host_view_of(const c10::Storage& npu_storage) {
  const c10::DataPtr& device_ptr = npu_storage.data_ptr();
  void* data = device_ptr.get();
  if (device_ptr.get_deleter() == &release_block) {
    auto* block = static_cast<Block*>(device_ptr.get_context());
    block->refs.fetch_add(1, std::memory_order_relaxed);
    return {data, block, &release_block, c10::Device(c10::kCPU)};
  }
  return {data, new c10::Storage(npu_storage), &release_keepalive, c10::Device(c10::kCPU)};  // no bytes owned
}

PoolStats pool_stats(c10::DeviceIndex index, int pool) {
  check_index(index);
  auto& p = g_memory[index].pools.at(pool);
  return {p.bytes.values(), p.blocks.values(), p.reserved.values(), p.segments.values()};
}

MemoryStats memory_stats(c10::DeviceIndex index) {
  const PoolStats all = pool_stats(index, kAllPools);
  return {all.bytes.current,    all.bytes.peak,    all.bytes.allocated,    all.bytes.freed,
          all.blocks.current,   all.blocks.peak,   all.blocks.allocated,   all.blocks.freed,
          all.reserved.current, all.reserved.peak, all.reserved.allocated, all.reserved.freed,
          all.segments.current, all.segments.peak, all.segments.allocated, all.segments.freed,
          g_memory[index].ooms.load()};
}

std::vector<Segment> segments(c10::DeviceIndex index) {
  check_index(index);
  auto& m = g_memory[index];
  std::vector<Segment> out;
  std::lock_guard<std::mutex> lock(m.mutex);
  for (const Block* block : m.live) {
    out.push_back({reinterpret_cast<uintptr_t>(block->data), block->capacity, block->nbytes});
  }
  for (const auto& [key, blocks] : m.cache) {
    for (const auto& cached : blocks) out.push_back({reinterpret_cast<uintptr_t>(cached.first), key.second, 0});
  }
  return out;
}

void reset_peak(c10::DeviceIndex index) {
  check_index(index);
  for (auto& pool : g_memory[index].pools) {
    for (Counter* counter : pool.all()) counter->reset_peak();
  }
}

void reset_accumulated(c10::DeviceIndex index) {
  check_index(index);
  for (auto& pool : g_memory[index].pools) {
    for (Counter* counter : pool.all()) counter->reset_accumulated();
  }
  g_memory[index].ooms.store(0);
}

void empty_cache(c10::DeviceIndex index) {
  check_index(index);
  release_cached(index);
}

int64_t total_memory() { return kTotalMemory; }

c10::CachingDeviceAllocator::DeviceStats NpuAllocator::getDeviceStats(c10::DeviceIndex index) {
  c10::CachingDeviceAllocator::DeviceStats stats;
  using c10::CachingDeviceAllocator::StatType;
  const std::pair<int, StatType> pools[] = {
      {kAllPools, StatType::AGGREGATE}, {kSmallPool, StatType::SMALL_POOL}, {kLargePool, StatType::LARGE_POOL}};
  const auto stat = [](const CounterValues& v) {
    c10::CachingAllocator::Stat s;
    s.current = v.current;
    s.peak = v.peak;
    s.allocated = v.allocated;
    s.freed = v.freed;
    return s;
  };
  for (const auto& [pool, type] : pools) {
    const PoolStats p = pool_stats(index, pool);
    const auto t = static_cast<size_t>(type);
    stats.allocation[t] = stats.active[t] = stat(p.blocks);
    stats.segment[t] = stat(p.segments);
    stats.allocated_bytes[t] = stats.active_bytes[t] = stats.requested_bytes[t] = stat(p.bytes);
    stats.reserved_bytes[t] = stat(p.reserved);
  }
  const MemoryStats m = memory_stats(index);
  stats.num_ooms = m.oom_count;
  stats.num_device_alloc = m.segments_allocated;
  stats.num_device_free = m.segments_freed;
  stats.max_split_size = -1;  // no split limit (torch_npu's default reports SIZE_MAX)
  return stats;
}

void set_memory_fraction(double fraction, c10::DeviceIndex index) {
  check_index(index);
  TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0, "Invalid fraction value: ", fraction, ". Allowed range: 0~1");
  g_memory[index].fraction.store(fraction);
  g_memory[index].limit.store(static_cast<int64_t>(fraction * double(kTotalMemory)));
  if (g_memory[index].pools[kAllPools].reserved.current.load() > g_memory[index].limit.load()) release_cached(index);
}

double memory_fraction(c10::DeviceIndex index) {
  check_index(index);
  return g_memory[index].fraction.load();
}

// ================================================================================================================
// Device-to-host transfer counter
// ================================================================================================================

namespace {
std::atomic<int64_t> g_d2h{0};
thread_local int tls_d2h_depth = 0;
thread_local bool tls_d2h_counted = false;

// torch_npu's sync debug mode: 1 warns, 2 raises on an operation that waits for the device (here: a
// device-to-host transfer, the synchronizing operation the emulator sees)
std::atomic<int> g_sync_debug_mode{0};
}  // namespace

void set_sync_debug_mode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "invalid value of debug_mode, expected one of 0,1,2");
  g_sync_debug_mode.store(mode);
}
int sync_debug_mode() { return g_sync_debug_mode.load(); }

void count_d2h() {
  if (tls_d2h_depth > 0) {
    if (tls_d2h_counted) return;
    tls_d2h_counted = true;
  }
  g_d2h.fetch_add(1, std::memory_order_relaxed);
  const int mode = g_sync_debug_mode.load(std::memory_order_relaxed);
  TORCH_CHECK(mode != 2, "called a synchronizing NPU operation");
  if (mode == 1) TORCH_WARN("called a synchronizing NPU operation");
}
int64_t d2h_syncs() { return g_d2h.load(); }
void reset_d2h() { g_d2h.store(0); }
void d2h_scope_enter() {
  if (tls_d2h_depth++ == 0) tls_d2h_counted = false;
}
void d2h_scope_exit() {
  if (tls_d2h_depth > 0) --tls_d2h_depth;
}

// ================================================================================================================
// Streams and events. Kernels run synchronously on the host, so every stream is always idle and an event is
// complete as soon as it is recorded; what remains observable is identity (ids, current stream per thread)
// and timing between recorded events.
// ================================================================================================================

namespace {

thread_local std::array<c10::StreamId, kMaxDevices> tls_stream{};  // 0 = the default stream

// torch_npu's stream ids (NPUStream.cpp): (type << 5) | index, each device handing out the 32 streams of a
// priority's pool round-robin; the ids of external streams carry bit 30 instead.
constexpr int kStreamsPerPoolBits = 5;
constexpr uint32_t kStreamsPerPool = 1u << kStreamsPerPoolBits;
constexpr int kStreamTypeNormal = 3;  // DEFAULT 0, SECONDARY 1, SYNCLAUNCH 2, NORMAL 3, HIGH 4
constexpr int kMaxStreamPriorities = 2;
std::array<std::array<std::atomic<uint32_t>, kMaxDevices>, kMaxStreamPriorities> g_pool_counters{};

c10::StreamId pool_stream_id(c10::DeviceIndex index, int priority) {
  const int pri = std::clamp(-priority, 0, kMaxStreamPriorities - 1);
  const uint32_t slot = g_pool_counters[pri][index].fetch_add(1, std::memory_order_relaxed) % kStreamsPerPool;
  return static_cast<c10::StreamId>(((kStreamTypeNormal + pri) << kStreamsPerPoolBits) | slot);
}

struct SimEvent {
  c10::DeviceIndex device = -1;
  bool timing = false;
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
};

struct NpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::DeviceIndex old = current_device();
    if (d.index() != old) set_device(d.index());
    return {kNpu, old};
  }
  c10::Device getDevice() const override { return {kNpu, current_device()}; }
  void setDevice(c10::Device d) const override { set_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) tls_device = d.index();
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  c10::Stream getStream(c10::Device d) const override {
    const auto index = resolve_index(d.index());
    return c10::Stream(c10::Stream::UNSAFE, {kNpu, index}, tls_stream.at(index));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, {kNpu, resolve_index(d.index())}, 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    const auto index = resolve_index(d.index());
    check_index(index);
    return c10::Stream(c10::Stream::UNSAFE, {kNpu, index}, pool_stream_id(index, priority));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return getNewStream(d, high_priority ? -1 : 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const auto index = resolve_index(s.device_index());
    check_index(index);
    const c10::Stream old(c10::Stream::UNSAFE, {kNpu, index}, tls_stream[index]);
    tls_stream[index] = s.id();
    return old;
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(c10::DeviceIndex index) const override {
    if (index >= 0) check_index(index);
  }

  void record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
              c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    auto* ev = static_cast<SimEvent*>(*event);
    if (ev == nullptr) {
      ev = new SimEvent();
      ev->device = stream.device_index();
      ev->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = ev;
    }
    ev->recorded = true;
    ev->when = std::chrono::steady_clock::now();
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void synchronizeEvent(void* /*event*/) const override {}
  void destroyEvent(void* event, c10::DeviceIndex) const noexcept override { delete static_cast<SimEvent*>(event); }
  double elapsedTime(void* start, void* end, c10::DeviceIndex) const override {
    auto* a = static_cast<SimEvent*>(start);
    auto* b = static_cast<SimEvent*>(end);
    TORCH_CHECK(a && b && a->recorded && b->recorded, "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(a->timing && b->timing, "Both events must be created with argument 'enable_timing=True'.");
    return std::chrono::duration<double, std::milli>(b->when - a->when).count();
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

}  // namespace

c10::StreamId current_stream_id(c10::DeviceIndex index) { return tls_stream.at(index); }

C10_REGISTER_GUARD_IMPL(PrivateUse1, NpuGuardImpl);

// ================================================================================================================
// Random generators: torch_npu's NPUGeneratorImpl contract. The state is Philox's (seed, offset): 16 bytes
// (uint64 seed, int64 offset), offsets are multiples of 4 and every random op advances the offset; setting a
// state reproduces the numbers drawn after it. The numbers come from the CPU kernels: each op draws from a fresh
// host generator seeded by a hash of (seed, offset), so they depend on nothing but the state.
// ================================================================================================================

namespace {

// One generator state; graphsafe_get_state hands out generators that share it (as NPUGeneratorState is shared).
struct PhiloxState final : c10::intrusive_ptr_target {
  std::mutex mutex;  // guards draws from kernels, which do not hold the generator's own mutex
  uint64_t seed = c10::default_rng_seed_val;
  uint64_t offset = 0;
};

uint64_t round_up_to_4(uint64_t n) { return (n + 3) / 4 * 4; }

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class NpuGenerator final : public c10::GeneratorImpl {
 public:
  static constexpr size_t kSeedSize = sizeof(uint64_t);
  static constexpr size_t kOffsetSize = sizeof(int64_t);
  static constexpr size_t kStateSize = kSeedSize + kOffsetSize;

  explicit NpuGenerator(c10::DeviceIndex index, c10::intrusive_ptr<PhiloxState> state = nullptr)
      : GeneratorImpl(c10::Device(kNpu, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        state_(state ? std::move(state) : c10::make_intrusive<PhiloxState>()) {}

  static c10::DeviceType device_type() { return kNpu; }

  // Callers from Python hold the generator's mutex (torch's Generator bindings take it), so these do not lock.
  void set_current_seed(uint64_t seed) override {
    state_->seed = seed;
    state_->offset = 0;
  }
  void set_offset(uint64_t offset) override {
    TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4");
    state_->offset = offset;
  }
  uint64_t get_offset() const override { return state_->offset; }
  uint64_t current_seed() const override { return state_->seed; }
  uint64_t seed() override {
    const uint64_t random = c10::detail::getNonDeterministicRandom(true);
    set_current_seed(random);
    return random;
  }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto state = at::detail::empty_cpu({static_cast<int64_t>(kStateSize)}, at::kByte, std::nullopt, std::nullopt,
                                       std::nullopt, std::nullopt);
    const uint64_t seed = state_->seed;
    const auto offset = static_cast<int64_t>(state_->offset);
    auto* bytes = state.data_ptr<uint8_t>();
    std::memcpy(bytes, &seed, kSeedSize);
    std::memcpy(bytes + kSeedSize, &offset, kOffsetSize);
    return state.getIntrusivePtr();
  }

  // Accepts 16 bytes (seed, offset) or, like torch_npu, 8 bytes (seed only; offset 0).
  void set_state(const c10::TensorImpl& new_state) override {
    at::detail::check_rng_state(new_state);
    const auto size = static_cast<size_t>(new_state.numel());
    TORCH_CHECK(size == kStateSize || size == kSeedSize, "RNG state is wrong size");
    const auto* bytes = new_state.data_dtype_initialized<uint8_t>();
    uint64_t seed = 0;
    int64_t offset = 0;
    std::memcpy(&seed, bytes, kSeedSize);
    if (size == kStateSize) std::memcpy(&offset, bytes + kSeedSize, kOffsetSize);
    TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4");
    state_->seed = seed;
    state_->offset = static_cast<uint64_t>(offset);
  }

  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& gen) override {
    auto* other = dynamic_cast<NpuGenerator*>(gen.get());
    TORCH_CHECK(other != nullptr, "Expected a NPU Generator");
    state_ = other->state_;
  }
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override {
    return c10::make_intrusive<NpuGenerator>(device_.index(), state_);
  }

  // (seed, offset) for one random op, advancing the offset by `increment` rounded up to a multiple of 4.
  std::pair<uint64_t, uint64_t> philox_engine_inputs(uint64_t increment) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const uint64_t offset = state_->offset;
    state_->offset += round_up_to_4(std::max<uint64_t>(increment, 1));
    return {state_->seed, offset};
  }

 private:
  NpuGenerator* clone_impl() const override {
    auto* copy = new NpuGenerator(device_.index());
    copy->state_->seed = state_->seed;
    copy->state_->offset = state_->offset;
    return copy;
  }
  c10::intrusive_ptr<PhiloxState> state_;
};

NpuGenerator* npu_generator_impl(const at::Generator& gen) {
  auto* impl = dynamic_cast<NpuGenerator*>(gen.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "Expected a NPU Generator, got a generator on ", gen.device());
  return impl;
}

std::once_flag g_generators_once;
std::vector<at::Generator> g_default_generators;

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  std::call_once(g_generators_once, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i)
      g_default_generators.push_back(at::make_generator<NpuGenerator>(i));
  });
  index = resolve_index(index);
  check_index(index);
  return g_default_generators[index];
}

at::Generator new_generator(c10::DeviceIndex index) {
  index = resolve_index(index);
  check_index(index);
  return at::make_generator<NpuGenerator>(index);
}

std::pair<uint64_t, uint64_t> philox_engine_inputs(const at::Generator& npu_generator, uint64_t increment) {
  return npu_generator_impl(npu_generator)->philox_engine_inputs(increment);
}

at::Generator host_generator_for_op(const at::Generator& npu_generator, uint64_t increment) {
  const auto [seed, offset] = philox_engine_inputs(npu_generator, increment);
  // mt19937 takes a 32-bit seed: fold a 64-bit hash of (seed, offset) into it.
  const uint64_t mixed = splitmix64(seed ^ splitmix64(offset + 0x632BE59BD9B4E019ULL));
  return at::make_generator<at::CPUGeneratorImpl>((mixed ^ (mixed >> 32)) & 0xFFFFFFFFULL);
}

// ================================================================================================================
// Pinned host memory: ordinary host memory remembered so that is_pinned() can answer.
// ================================================================================================================

namespace {

std::mutex g_pinned_mutex;
std::map<uintptr_t, size_t> g_pinned;             // base address -> size, of every pinned block (in use or cached)
std::map<size_t, std::vector<void*>> g_pinned_cache;  // size -> freed pinned blocks kept for reuse, last freed last
at::HostStats g_host_stats;                        // guarded by g_pinned_mutex

// Pinned host memory with torch_npu's (and CUDA's) caching host allocator contract: blocks of power-of-two sizes,
// a freed block is reused by the next allocation of its size (copies run synchronously, so no event is pending),
// empty_host_cache() returns the cached ones. torch.accelerator's host-memory calls reach it as PrivateUse1's.
void release_pinned(void* ptr) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  const size_t size = g_pinned.at(reinterpret_cast<uintptr_t>(ptr));
  g_pinned_cache[size].push_back(ptr);
  g_host_stats.active_requests.decrease(1);
  g_host_stats.active_bytes.decrease(size);
}

size_t pinned_block_size(size_t nbytes) {
  size_t size = 1;
  while (size < nbytes) size <<= 1;
  return size;
}

struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const size_t size = pinned_block_size(nbytes ? nbytes : 1);
    void* data = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      auto it = g_pinned_cache.find(size);
      if (it != g_pinned_cache.end()) {
        data = it->second.back();
        it->second.pop_back();
        if (it->second.empty()) g_pinned_cache.erase(it);
      }
    }
    if (data == nullptr) {
      data = c10::alloc_cpu(size);
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned[reinterpret_cast<uintptr_t>(data)] = size;
      g_host_stats.allocations.increase(1);
      g_host_stats.allocated_bytes.increase(size);
      g_host_stats.num_host_alloc += 1;
    }
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_host_stats.active_requests.increase(1);
    g_host_stats.active_bytes.increase(size);
    return {data, data, &release_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release_pinned; }
  void copy_data(void* dst, const void* src, std::size_t n) const override { default_copy_data(dst, src, n); }

  bool record_event(void*, void*, c10::Stream) override { return true; }  // kernels have finished already
  void empty_cache() override {
    std::map<size_t, std::vector<void*>> cached;
    {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      cached.swap(g_pinned_cache);
      for (auto& [size, blocks] : cached) {
        for (void* ptr : blocks) {
          g_pinned.erase(reinterpret_cast<uintptr_t>(ptr));
          g_host_stats.allocations.decrease(1);
          g_host_stats.allocated_bytes.decrease(size);
          g_host_stats.num_host_free += 1;
        }
      }
    }
    for (auto& entry : cached) {
      for (void* ptr : entry.second) c10::free_cpu(ptr);
    }
  }
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_host_stats;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    for (auto* stat : {&g_host_stats.active_requests, &g_host_stats.active_bytes, &g_host_stats.allocations,
                       &g_host_stats.allocated_bytes}) {
      stat->reset_accumulated();
    }
    g_host_stats.num_host_alloc = g_host_stats.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    for (auto* stat : {&g_host_stats.active_requests, &g_host_stats.active_bytes, &g_host_stats.allocations,
                       &g_host_stats.allocated_bytes}) {
      stat->reset_peak();
    }
  }
};
PinnedAllocator g_pinned_allocator;

bool is_pinned_ptr(const void* ptr) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  return p < it->first + it->second;
}

// ================================================================================================================
// Hooks: how torch's device-generic code (accelerator API, pin_memory, generators, storage resize) reaches us.
// ================================================================================================================

struct NpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const auto old = current_device();
    set_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override { return new_generator(index); }

  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }

  at::Device getDeviceFromPtr(void*) const override {
    TORCH_CHECK(false, "getDeviceFromPtr is not emulated by ascend_shim's sim backend: npu memory is host memory "
                       "and carries no device tag.");
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    const c10::Device device = storage.device();
    const c10::DeviceGuard guard(device);
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), nbytes);
    // Resized to nothing, the CPU helper leaves an empty CPU DataPtr: the storage must stay on its device
    // (FSDP frees a FlatParameter's storage with resize_(0), then set_()s it onto its shard).
    if (nbytes == 0) storage.unsafeGetStorageImpl()->set_data_ptr_noswap(c10::DataPtr(nullptr, device));
  }
};

const bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new NpuHooks());
  at::setHostAllocator(kNpu, &g_pinned_allocator);
  return true;
}();

}  // namespace

}  // namespace ascend_sim
