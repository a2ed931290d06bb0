// Python bindings of the emulated NPU: what ascend_shim.sim and its torch.npu module call into.
// Only the pybind11 glue for tensors: <torch/extension.h> would double the build time of this file.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/core/CachingHostAllocator.h>

#include "sim.h"

namespace ascend_sim {
at::Tensor cpu_alias(const at::Tensor& t);
at::Tensor npu_alias(const at::Tensor& t, c10::DeviceIndex index);
std::vector<std::string> register_host_kernels();
void bind_op_coverage(py::module_& m);  // op_coverage.cpp
}  // namespace ascend_sim

namespace {

namespace sim = ascend_sim;

c10::DeviceIndex index_arg(int64_t index) {
  const auto i = sim::resolve_index(static_cast<c10::DeviceIndex>(index));
  sim::check_index(i);
  return i;
}

py::dict memory_stats(int64_t index) {
  const sim::MemoryStats s = sim::memory_stats(index_arg(index));
  py::dict d;
  d["live_bytes"] = s.live_bytes;
  d["peak_bytes"] = s.peak_bytes;
  d["allocated_bytes"] = s.allocated_bytes;
  d["freed_bytes"] = s.freed_bytes;
  d["live_blocks"] = s.live_blocks;
  d["peak_blocks"] = s.peak_blocks;
  d["allocated_blocks"] = s.allocated_blocks;
  d["freed_blocks"] = s.freed_blocks;
  d["reserved_bytes"] = s.reserved_bytes;
  d["peak_reserved_bytes"] = s.peak_reserved_bytes;
  d["reserved_allocated_bytes"] = s.reserved_allocated_bytes;
  d["reserved_freed_bytes"] = s.reserved_freed_bytes;
  d["segments"] = s.segments;
  d["peak_segments"] = s.peak_segments;
  d["segments_allocated"] = s.segments_allocated;
  d["segments_freed"] = s.segments_freed;
  d["ooms"] = s.oom_count;
  return d;
}

py::dict pool_stats(int64_t index) {
  py::dict out;
  const char* names[sim::kPools] = {"all", "small_pool", "large_pool"};
  for (int pool = 0; pool < sim::kPools; ++pool) {
    const sim::PoolStats s = sim::pool_stats(index_arg(index), pool);
    py::dict d;
    const std::pair<const char*, const sim::CounterValues*> counters[] = {
        {"bytes", &s.bytes}, {"blocks", &s.blocks}, {"reserved", &s.reserved}, {"segments", &s.segments}};
    for (const auto& [name, c] : counters) {
      py::dict v;
      v["current"] = c->current;
      v["peak"] = c->peak;
      v["allocated"] = c->allocated;
      v["freed"] = c->freed;
      d[name] = v;
    }
    out[names[pool]] = d;
  }
  return out;
}

py::list segments(int64_t index) {
  py::list out;
  for (const auto& seg : sim::segments(index_arg(index))) {
    out.append(py::make_tuple(static_cast<uint64_t>(seg.address), seg.capacity, seg.allocated));
  }
  return out;
}

// torch_npu's _npu_hostMemoryStats: the PrivateUse1 host (pinned) allocator's statistics
py::dict host_memory_stats() {
  const auto stat = [](const c10::CachingAllocator::Stat& s) {
    py::dict d;
    d["current"] = s.current;
    d["peak"] = s.peak;
    d["allocated"] = s.allocated;
    d["freed"] = s.freed;
    return d;
  };
  const auto duration = [](const c10::CachingAllocator::DurationStat& s) {
    py::dict d;
    d["total"] = s.total;
    d["max"] = s.max;
    d["min"] = s.min;
    d["count"] = s.count;
    d["avg"] = s.count == 0 ? 0 : s.total / s.count;
    return d;
  };
  const at::HostStats stats = at::getHostAllocator(c10::DeviceType::PrivateUse1)->get_stats();
  py::dict result;
  result["num_host_alloc"] = stats.num_host_alloc;
  result["num_host_free"] = stats.num_host_free;
  result["allocations"] = stat(stats.allocations);
  result["active_requests"] = stat(stats.active_requests);
  result["allocated_bytes"] = stat(stats.allocated_bytes);
  result["active_bytes"] = stat(stats.active_bytes);
  result["host_alloc_time"] = duration(stats.host_alloc_time);
  result["host_free_time"] = duration(stats.host_free_time);
  return result;
}

py::object default_generator(int64_t index) {
  // The generator lives for the whole process, so the borrowed wrapper is safe.
  return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(sim::default_generator(index_arg(index))));
}

// torch_npu's npu_change_data_ptr: ``dst``'s storage keeps its size and now points into ``src``'s memory at
// element ``index`` (NpuFusedAdamW flattens parameters this way). Only the data pointer moves; ``src`` must
// outlive ``dst``'s use of it, as on the NPU.
int64_t change_data_ptr(const at::Tensor& dst, const at::Tensor& src, int64_t index) {
  TORCH_CHECK(dst.device().type() == c10::DeviceType::PrivateUse1 && dst.device() == src.device(),
              "npu_change_data_ptr: dst and src must be on the same npu device, got ", dst.device(), " and ",
              src.device());
  TORCH_CHECK(index >= 0, "npu_change_data_ptr: index must be >= 0, got ", index);
  TORCH_CHECK(dst.scalar_type() == src.scalar_type(), "npu_change_data_ptr: dst and src must have the same dtype");
  auto* impl = dst.storage().unsafeGetStorageImpl();
  const size_t offset = static_cast<size_t>(index) * src.element_size();
  const size_t available = src.storage().nbytes() - static_cast<size_t>(src.storage_offset()) * src.element_size();
  TORCH_CHECK(offset + impl->nbytes() <= available, "npu_change_data_ptr: dst's storage (", impl->nbytes(),
              " bytes) does not fit in src at element ", index);
  char* base = static_cast<char*>(src.data_ptr()) + offset;
  impl->set_data_ptr_noswap(at::DataPtr(base, dst.device()));
  return 0;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ascend_shim sim: an emulated Ascend NPU on host memory (PrivateUse1)";
  m.def("device_count", [] { return static_cast<int64_t>(sim::device_count()); });
  m.def("device_count_fixed", &sim::device_count_fixed);
  m.def("fix_device_count", &sim::fix_device_count);
  m.def("forget_use", &sim::forget_use);
  m.def("configure_device_count", [](int64_t n) { sim::configure_device_count(static_cast<int>(n)); });
  m.def("current_device", [] { return static_cast<int64_t>(sim::current_device()); });
  m.def("set_device", [](int64_t i) { sim::set_device(static_cast<c10::DeviceIndex>(i)); });
  m.def("exchange_device", [](int64_t i) {
    const auto old = sim::current_device();
    sim::set_device(static_cast<c10::DeviceIndex>(i));
    return static_cast<int64_t>(old);
  });
  m.def("check_index", [](int64_t i) { return static_cast<int64_t>(index_arg(i)); });

  m.def("cpu_alias", &sim::cpu_alias);
  m.def("change_data_ptr", &change_data_ptr);
  m.def("npu_alias", [](const at::Tensor& t, int64_t i) { return sim::npu_alias(t, static_cast<c10::DeviceIndex>(i)); });

  m.def("memory_stats", &memory_stats);
  m.def("reset_peak", [](int64_t i) { sim::reset_peak(index_arg(i)); });
  m.def("reset_accumulated", [](int64_t i) { sim::reset_accumulated(index_arg(i)); });
  m.def("empty_cache", [](int64_t i) { sim::empty_cache(index_arg(i)); });
  m.def("pool_stats", &pool_stats);
  m.def("host_memory_stats", &host_memory_stats);
  m.def("host_reset_accumulated", [] { at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_accumulated_stats(); });
  m.def("host_reset_peak", [] { at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_peak_stats(); });
  m.def("host_empty_cache", [] { at::getHostAllocator(c10::DeviceType::PrivateUse1)->empty_cache(); });
  m.def("segments", &segments);
  m.def("total_memory", &sim::total_memory);
  m.def("set_memory_fraction", [](double f, int64_t i) { sim::set_memory_fraction(f, index_arg(i)); });
  m.def("memory_fraction", [](int64_t i) { return sim::memory_fraction(index_arg(i)); });

  m.def("d2h_syncs", &sim::d2h_syncs);
  m.def("reset_d2h", &sim::reset_d2h);
  m.def("set_sync_debug_mode", [](int64_t mode) { sim::set_sync_debug_mode(static_cast<int>(mode)); });
  m.def("sync_debug_mode", &sim::sync_debug_mode);
  m.def("d2h_scope_enter", &sim::d2h_scope_enter);
  m.def("d2h_scope_exit", &sim::d2h_scope_exit);

  m.def("default_generator", &default_generator);
  m.def("philox_engine_inputs", [](py::object generator, uint64_t increment) {
    TORCH_CHECK(THPGenerator_Check(generator.ptr()), "philox_engine_inputs expects a torch.Generator");
    return sim::philox_engine_inputs(reinterpret_cast<THPGenerator*>(generator.ptr())->cdata, increment);
  });
  m.def("in_bad_fork", &sim::in_bad_fork);
  m.def("register_host_kernels", &sim::register_host_kernels);
  sim::bind_op_coverage(m);
}
