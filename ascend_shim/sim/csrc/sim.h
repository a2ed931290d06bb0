// Shared declarations of the emulated NPU ("sim"): a PrivateUse1 device whose memory is host memory.
//
// device.cpp   allocator + accounting, device/stream/event guard, hooks, generators, pinned host memory
// kernels.cpp  the few native kernels (factories, copies, views, set_, resize_) and the zero-copy CPU fallback
// nn.cpp       kernels for ops torch routes differently on accelerators (convolution, fused RNN cells)
// autocast.cpp AutocastPrivateUse1 policies (CUDA's op lists)
// op_coverage.cpp which ops the NPU has kernels for: torch_npu's CPU-fallback warning, once per op
// module.cpp   Python bindings
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace c10 {
class OperatorHandle;
}  // namespace c10

namespace ascend_sim {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;
// Upper bound for ASCEND_SHIM_SIM_DEVICES (a real Ascend server has 8 or 16 NPUs).
constexpr int kMaxDevices = 64;

// ---- devices -------------------------------------------------------------------------------------------------
c10::DeviceIndex device_count();
void configure_device_count(int n);  // until the program first uses a device
void fix_device_count();             // when the runtime initializes: first allocation, torch_npu's lazy init
bool device_count_fixed();
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);  // validates the index
void check_index(c10::DeviceIndex index);
c10::DeviceIndex resolve_index(c10::DeviceIndex index);  // -1 -> current device
// Like a real NPU runtime, a process forked after it used the device cannot use it again.
void check_not_forked();
bool in_bad_fork();
// The emulator's own bring-up probe is not the program's use: a fork stays clean, the visible devices open.
void forget_use();

// ---- memory ----------------------------------------------------------------------------------------------------
c10::Allocator* npu_allocator();
// Wraps memory owned by `owner` (a CPU DataPtr) as device memory of npu:index; accounted as live bytes.
c10::DataPtr adopt_data(c10::DataPtr owner, size_t nbytes, c10::DeviceIndex index);
// Wraps a CPU storage's memory as device memory of npu:index, keeping the CPU storage alive.
c10::DataPtr adopt_storage(const c10::Storage& cpu_storage, c10::DeviceIndex index);
// A CPU DataPtr onto an npu storage's memory that keeps that memory alive.
c10::DataPtr host_view_of(const c10::Storage& npu_storage);

struct MemoryStats {
  int64_t live_bytes, peak_bytes, allocated_bytes, freed_bytes;
  int64_t live_blocks, peak_blocks, allocated_blocks, freed_blocks;
  int64_t reserved_bytes, peak_reserved_bytes, reserved_allocated_bytes, reserved_freed_bytes;
  int64_t segments, peak_segments, segments_allocated, segments_freed;
  int64_t oom_count;
};
MemoryStats memory_stats(c10::DeviceIndex index);
// per pool, as torch_npu's allocator keeps them: all blocks, the small pool (<= 1 MiB), the large pool
constexpr int kAllPools = 0, kSmallPool = 1, kLargePool = 2, kPools = 3;
struct CounterValues {
  int64_t current, peak, allocated, freed;
};
struct PoolStats {
  CounterValues bytes, blocks, reserved, segments;
};
PoolStats pool_stats(c10::DeviceIndex index, int pool);
// every block the allocator holds for the device: in use (allocated bytes > 0) or cached
struct Segment {
  uintptr_t address;
  size_t capacity, allocated;
};
std::vector<Segment> segments(c10::DeviceIndex index);
void reset_peak(c10::DeviceIndex index);
void reset_accumulated(c10::DeviceIndex index);
void empty_cache(c10::DeviceIndex index);  // frees the device's cached blocks
int64_t total_memory();
void set_memory_fraction(double fraction, c10::DeviceIndex index);
double memory_fraction(c10::DeviceIndex index);

// ---- tensors across the host boundary (kernels.cpp) --------------------------------------------------------
// A CPU tensor aliasing an npu tensor's memory (same sizes, strides, offset; keeps the npu storage alive).
at::Tensor host_alias(const at::Tensor& npu_tensor);
// An npu tensor on npu:index that adopts a CPU tensor's memory without copying.
at::Tensor adopt_host_tensor(const at::Tensor& host_tensor, c10::DeviceIndex index);

// ---- operator coverage (op_coverage.cpp) ----------------------------------------------------------------------
// Before the fallback runs `op`: warns (once) or raises as torch_npu does when the NPU has no kernel for it.
void check_op_coverage(const c10::OperatorHandle& op);
// The suffix torch_npu's OPS_ERROR(ErrCode::NOT_SUPPORT) appends to a message (ERR01007).
std::string ops_not_supported_suffix();

// ---- counters --------------------------------------------------------------------------------------------------
// One user-visible device-to-host transfer. Inside a d2h scope (e.g. printing a tensor, which reads many
// elements) only the first transfer counts.
void count_d2h();
int64_t d2h_syncs();
void reset_d2h();
void d2h_scope_enter();
void d2h_scope_exit();
// torch_npu's sync debug mode (0 off, 1 warn, 2 error) on device-to-host transfers
void set_sync_debug_mode(int mode);
int sync_debug_mode();

// ---- random ----------------------------------------------------------------------------------------------------
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);
// (seed, offset) for one random op on an npu generator; advances its offset by `increment` (rounded up to 4).
std::pair<uint64_t, uint64_t> philox_engine_inputs(const at::Generator& npu_generator, uint64_t increment);
// A CPU generator for one op's CPU kernel: seeded from the npu generator's (seed, offset), which it advances.
at::Generator host_generator_for_op(const at::Generator& npu_generator, uint64_t increment);

}  // namespace ascend_sim
