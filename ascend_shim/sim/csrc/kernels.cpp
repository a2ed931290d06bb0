// Kernels of the emulated NPU.
//
// A few ops get native kernels (factories, copies, views, set_, resize_, scalar reads, dropout); every other op
// runs the CPU kernel through `npu_fallback`, which is zero-copy: npu arguments are handed to the CPU kernel as
// CPU tensors aliasing the same host memory, in-place and out= writes land directly in npu memory, and fresh
// CPU results are adopted as npu storage without copying. Before running, the fallback enforces the device
// contract of a real accelerator (one device per op; 0-dim CPU scalars allowed).
#include "sim.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ascend_sim {
namespace {

constexpr c10::DispatchKeySet kNpuKeys(c10::DispatchKey::PrivateUse1);
constexpr c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);

// ---- host aliases --------------------------------------------------------------------------------------------

// Builds CPU tensors that alias npu tensors; npu tensors sharing a storage get aliases sharing one storage, so
// CPU kernels see the same aliasing the caller created.
class HostAliases {
 public:
  at::Tensor alias(const at::Tensor& t) {
    const c10::Storage& host = host_storage(t.storage());
    auto out = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(host), kCpuKeys, t.dtype());
    out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj()) out._set_conj(true);
    if (t.is_neg()) out._set_neg(true);
    return out;
  }

  // The npu storage a host storage aliases, or nullptr.
  const c10::Storage* npu_storage_of(const c10::StorageImpl* host) const {
    for (const auto& e : entries_)
      if (e.host.unsafeGetStorageImpl() == host) return &e.npu;
    return nullptr;
  }

  const c10::Storage* host_storage_of(const c10::StorageImpl* npu) const {
    for (const auto& e : entries_)
      if (e.npu.unsafeGetStorageImpl() == npu) return &e.host;
    return nullptr;
  }

 private:
  const c10::Storage& host_storage(const c10::Storage& npu) {
    if (const auto* found = host_storage_of(npu.unsafeGetStorageImpl())) return *found;
    c10::Storage host(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), npu.nbytes(),
                                                            host_view_of(npu), c10::GetCPUAllocator(),
                                                            npu.resizable()));
    entries_.push_back({npu, std::move(host)});
    return entries_.back().host;
  }

  struct Entry {
    c10::Storage npu;
    c10::Storage host;
  };
  c10::SmallVector<Entry, 4> entries_;
};

at::Tensor make_npu_tensor(c10::Storage storage, const at::Tensor& like) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), kNpuKeys, like.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) out._set_conj(true);
  if (like.is_neg()) out._set_neg(true);
  return out;
}

c10::Storage adopt_as_npu(const c10::Storage& host, c10::DeviceIndex index) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), host.nbytes(),
                                                            adopt_storage(host, index), npu_allocator(),
                                                            /*resizable=*/true));
}

// ---- the device contract -----------------------------------------------------------------------------------

// Ops whose `indices` may live on the host even for device tensors (as on CUDA).
bool accepts_host_indices(const c10::OperatorName& name) {
  const std::string& n = name.name;
  return n == "aten::index" || n == "aten::index_put_" || n == "aten::index_put" || n == "aten::_index_put_impl_" ||
         n == "aten::_unsafe_index" || n == "aten::_unsafe_index_put";
}

class DeviceCheck {
 public:
  explicit DeviceCheck(const c10::FunctionSchema& schema)
      : schema_(schema), host_indices_(accepts_host_indices(schema.operator_name())) {}

  void visit(const at::Tensor& t, const c10::Argument& arg, bool is_write) {
    if (!t.defined()) return;
    const c10::Device d = t.device();
    if (d.is_cpu()) {
      if (t.dim() == 0 && !is_write) return;  // a CPU scalar may join any op, as on CUDA
      if (host_indices_ && arg.name() == "indices") return;
    }
    if (d.type() == kNpu) has_npu_ = true;
    if (!first_) {
      first_ = d;
    } else if (*first_ != d) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
                  *first_, " and ", d, "! (when checking argument for argument ", arg.name(), " in method ",
                  schema_.operator_name(), ")");
    }
  }

  // An npu `device=` argument (factories that reach the fallback): the op runs on that device.
  void visit_device(c10::Device d) {
    if (!device_arg_) device_arg_ = d;
    has_npu_ = true;
  }

  bool has_npu() const { return has_npu_; }

  // The npu device the op runs on: its npu tensors' device, else an npu `device=` argument, else current.
  c10::Device target() const {
    if (first_ && first_->type() == kNpu) return *first_;
    if (device_arg_) return {kNpu, resolve_index(device_arg_->index())};
    return {kNpu, current_device()};
  }

 private:
  const c10::FunctionSchema& schema_;
  const bool host_indices_;
  bool has_npu_ = false;
  std::optional<c10::Device> first_;
  std::optional<c10::Device> device_arg_;
};

bool is_generator_arg(const c10::Argument& arg) {
  const auto& type = arg.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (const auto* opt = type->castRaw<c10::OptionalType>())
    return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  return false;
}

// ---- the zero-copy fallback ----------------------------------------------------------------------------------

class FallbackCall {
 public:
  FallbackCall(const c10::OperatorHandle& op, torch::jit::Stack* stack)
      : op_(op), schema_(op.schema()), stack_(stack), check_(schema_) {}

  void run() {
    const auto& args = schema_.arguments();
    const size_t base = stack_->size() - args.size();
    c10::SmallVector<size_t, 2> generator_slots;
    for (size_t i = 0; i < args.size(); ++i) {
      c10::IValue& v = (*stack_)[base + i];
      const auto& arg = args[i];
      const bool is_write = arg.alias_info() != nullptr && arg.alias_info()->isWrite();
      if (v.isTensor()) {
        v = to_host(v.toTensor(), arg, is_write);
      } else if (v.isTensorList()) {
        c10::List<at::Tensor> out;
        const auto list = v.toTensorList();
        out.reserve(list.size());
        for (const at::Tensor& t : list) out.push_back(to_host(t, arg, is_write));
        v = std::move(out);
      } else if (v.isOptionalTensorList()) {
        c10::List<std::optional<at::Tensor>> out;
        const auto list = v.toOptionalTensorList();
        out.reserve(list.size());
        for (const std::optional<at::Tensor>& t : list)
          out.push_back(t.has_value() ? std::optional<at::Tensor>(to_host(*t, arg, is_write)) : std::nullopt);
        v = std::move(out);
      } else if (v.isDevice()) {
        if (v.toDevice().type() == kNpu) {
          check_.visit_device(v.toDevice());
          v = c10::Device(c10::kCPU);
        }
      } else if (v.isGenerator() || (v.isNone() && is_generator_arg(arg))) {
        generator_slots.push_back(base + i);
      }
    }
    target_ = check_.target();
    for (size_t slot : generator_slots) bind_generator((*stack_)[slot]);

    op_.redispatchBoxed(kCpuKeys, stack_);

    for (auto& w : writes_) sync_written(w.first, w.second);
    const size_t nret = schema_.returns().size();
    const size_t rbase = stack_->size() - nret;
    for (size_t i = 0; i < nret; ++i) {
      c10::IValue& v = (*stack_)[rbase + i];
      if (v.isTensor()) {
        v = to_npu(v.toTensor());
      } else if (v.isTensorList()) {
        c10::List<at::Tensor> out;
        const auto list = v.toTensorList();
        out.reserve(list.size());
        for (const at::Tensor& t : list) out.push_back(to_npu(t));
        v = std::move(out);
      }
    }
  }

 private:
  at::Tensor to_host(const at::Tensor& t, const c10::Argument& arg, bool is_write) {
    check_.visit(t, arg, is_write);
    if (!t.defined()) return t;
    largest_numel_ = std::max<uint64_t>(largest_numel_, static_cast<uint64_t>(t.numel()));
    if (!t.is_privateuseone()) {
      host_inputs_.push_back(t.storage().unsafeGetStorageImpl());
      return t;
    }
    at::Tensor host = aliases_.alias(t);
    originals_.emplace_back(host.unsafeGetTensorImpl(), t);
    if (is_write) writes_.emplace_back(host, t);
    return host;
  }

  // CPU kernels draw random numbers from a host generator seeded by the npu generator's (seed, offset); the op
  // advances the offset by one 32-bit draw per element of its largest tensor, as a Philox kernel would. A missing
  // generator means the target device's default generator, exactly as a device kernel would use it.
  void bind_generator(c10::IValue& v) {
    if (!check_.has_npu()) {
      if (v.isGenerator() && v.toGenerator().device().type() == kNpu)
        TORCH_CHECK(false, "Expected a 'cpu' device type for generator but found 'npu'");
      return;
    }
    if (v.isNone()) {
      v = host_generator_for_op(default_generator(target_.index()), largest_numel_);
      return;
    }
    const at::Generator gen = v.toGenerator();
    TORCH_CHECK(gen.device().type() == kNpu, "Expected a 'npu' device type for generator but found '",
                gen.device().type(), "'");
    v = host_generator_for_op(gen, largest_numel_);
  }

  // After the CPU kernel wrote through a host alias: if it resized (reallocated) the alias storage, the npu
  // storage adopts the new memory; if it restrided or replaced the storage (set_), the npu tensor follows.
  void sync_written(const at::Tensor& host, const at::Tensor& npu) {
    c10::TensorImpl* h = host.unsafeGetTensorImpl();
    c10::TensorImpl* d = npu.unsafeGetTensorImpl();
    c10::StorageImpl* host_storage = h->storage().unsafeGetStorageImpl();
    const c10::Storage* npu_storage = aliases_.npu_storage_of(host_storage);
    if (npu_storage == nullptr) {
      d->set_storage_keep_dtype(npu_storage_for(h->storage()));
    } else if (host_storage->data() != npu_storage->data() || host_storage->nbytes() != npu_storage->nbytes()) {
      const size_t nbytes = host_storage->nbytes();
      c10::DataPtr moved = host_storage->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
      c10::StorageImpl* target = npu_storage->unsafeGetStorageImpl();
      target->set_data_ptr_noswap(adopt_data(std::move(moved), nbytes, target_.index()));
      target->set_nbytes(nbytes);
      host_storage->set_data_ptr_noswap(host_view_of(*npu_storage));
    }
    if (h->sizes() != d->sizes() || h->strides() != d->strides() || h->storage_offset() != d->storage_offset())
      d->set_sizes_and_strides(h->sizes(), h->strides(), h->storage_offset());
  }

  // The npu storage backing a host storage produced by the CPU kernel.
  c10::Storage npu_storage_for(const c10::Storage& host) {
    const c10::StorageImpl* impl = host.unsafeGetStorageImpl();
    if (const auto* npu = aliases_.npu_storage_of(impl)) return *npu;
    for (const auto& a : adopted_)
      if (a.first == impl) return a.second;
    c10::Storage npu = adopt_as_npu(host, target_.index());
    adopted_.emplace_back(impl, npu);
    return npu;
  }

  at::Tensor to_npu(const at::Tensor& out) {
    if (!out.defined() || !out.is_cpu()) return out;
    if (out._is_zerotensor())  // no memory behind it: rebuild it on the device rather than adopt nothing
      return at::_efficientzerotensor(out.sizes(), out.options().device(target_));
    for (const auto& o : originals_)
      if (o.first == out.unsafeGetTensorImpl()) return o.second;
    for (const c10::StorageImpl* s : host_inputs_) {
      if (s == out.storage().unsafeGetStorageImpl()) {  // a CPU input passed through: never alias user memory
        const at::Tensor copy = out.clone();
        return make_npu_tensor(npu_storage_for(copy.storage()), copy);
      }
    }
    return make_npu_tensor(npu_storage_for(out.storage()), out);
  }

  const c10::OperatorHandle& op_;
  const c10::FunctionSchema& schema_;
  torch::jit::Stack* stack_;
  DeviceCheck check_;
  c10::Device target_{kNpu, 0};
  uint64_t largest_numel_ = 0;
  HostAliases aliases_;
  c10::SmallVector<std::pair<c10::TensorImpl*, at::Tensor>, 8> originals_;
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 4> writes_;
  c10::SmallVector<const c10::StorageImpl*, 4> host_inputs_;
  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 4> adopted_;
};

void npu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_not_forked();
  check_op_coverage(op);
  FallbackCall(op, stack).run();
}

// ---- native kernels ------------------------------------------------------------------------------------------

void check_factory_options(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "The emulated NPU supports only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_factory_options(layout, pin_memory);
  const c10::DeviceGuard guard(device.value_or(c10::Device(kNpu)));
  return at::detail::empty_generic(size, npu_allocator(), kNpuKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_factory_options(layout, pin_memory);
  const c10::DeviceGuard guard(device.value_or(c10::Device(kNpu)));
  return at::detail::empty_strided_generic(size, stride, npu_allocator(), kNpuKeys, c10::dtype_or_default(dtype));
}

// Gradients of sign(), where()... are "zero tensors": no memory, and a ZeroTensor key that makes ops read zeros.
// The CPU kernel would build a CPU one, which must not be adopted as npu memory.
at::Tensor efficient_zero_tensor(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                 std::optional<bool> pin_memory) {
  check_factory_options(layout, pin_memory);
  at::native::ZeroTensorAllocator allocator(c10::Device(kNpu, resolve_index(device ? device->index() : -1)));
  const auto keys = kNpuKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &allocator, keys, c10::dtype_or_default(dtype), std::nullopt);
}

// Every copy between npu and host (or between npu indices) lands here; npu->host copies are the transfers
// user code can observe (.cpu(), .tolist(), print, torch.save).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  check_not_forked();
  if (self.is_privateuseone() && dst.is_cpu()) count_d2h();
  HostAliases aliases;
  at::Tensor dst_host = dst.is_privateuseone() ? aliases.alias(dst) : dst;
  const at::Tensor src_host = self.is_privateuseone() ? aliases.alias(self) : self;
  dst_host.copy_(src_host, non_blocking);
  return dst;
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.is_privateuseone()) resize_(dst, self.sym_sizes(), std::nullopt);
  else dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  count_d2h();
  return at::_local_scalar_dense(host_alias(self));
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset, at::IntArrayRef size,
                        at::IntArrayRef stride) {
  const c10::DeviceGuard guard(self.device());
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, npu_allocator(), /*resizable=*/true);
  return self.set_(std::move(storage), 0, {0}, {});
}

at::Tensor as_strided(const at::Tensor& self, at::IntArrayRef size, at::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, at::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, at::IntArrayRef size, at::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// Without a caching allocator there is nothing to protect across streams.
void record_stream(at::Tensor&, c10::Stream) {}

// The CPU kernel would draw from the CPU default generator; this draws from the npu one, like a device kernel.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input, input.options().dtype(at::kBool))};
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const double keep = 1. - p;
  const double scale = keep == 0 ? 0. : 1. / keep;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool), at::MemoryFormat::Contiguous);
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(scale), mask};
}

// torch_npu's contiguous (TensorProperties.cpp): a copy into the contiguous format only; channels-last and
// preserve are refused unless the tensor is already contiguous in that format. Registered at the autograd key
// too, as torch_npu's is, so torch's decomposition (which would make the channels-last copy) never runs; the
// copy goes through clone, which autograd records.
at::Tensor contiguous(const at::Tensor& self, c10::MemoryFormat memory_format) {
  if (self.is_contiguous(memory_format)) return self;
  TORCH_CHECK(memory_format == c10::MemoryFormat::Contiguous,
              "NPU contiguous operator only supported contiguous memory format.", ops_not_supported_suffix());
  return self.clone(memory_format);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("contiguous", contiguous); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("contiguous", contiguous);
  m.impl("empty_strided", empty_strided);
  m.impl("_efficientzerotensor", efficient_zero_tensor);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("record_stream", record_stream);
  m.impl("native_dropout", native_dropout);
}

// torch_npu's registration: CPU and npu dense tensors may take each other's TensorImpl (`param.data = t`,
// Module._apply keeping the Parameter, so tied weights stay tied across `.to`). torch's own rule knows only its
// in-tree dense backends; like torch_npu, this replaces the operator's catch-all kernel for every device.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const c10::DispatchKeySet self_keys = self.key_set();
  const c10::DispatchKeySet from_keys = from.key_set();
  const auto is_dense = [](c10::DispatchKeySet keys) {
    return keys.has(c10::DispatchKey::CPU) || keys.has(c10::DispatchKey::PrivateUse1);
  };
  return self_keys == from_keys || (is_dense(self_keys) && is_dense(from_keys));
}

// Registered at load with the dispatcher's "overriding a kernel" warning silenced: the override is intended.
struct SilentWarnings final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

const bool g_shallow_copy_registered = [] {
  SilentWarnings silent;
  const c10::WarningUtils::WarningHandlerGuard guard(&silent);
  static auto* library =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::CatchAll, __FILE__, __LINE__);
  library->impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  return true;
}();

// Copies handle conjugate/negative views themselves (the host aliases keep those bits and the CPU copy resolves
// them); without these fallthroughs the math-bit fallbacks would materialize the source with clone(), which
// copies through _copy_from again, forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&npu_fallback>());
}

}  // namespace

at::Tensor host_alias(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone()) return t;
  HostAliases aliases;
  return aliases.alias(t);
}

at::Tensor adopt_host_tensor(const at::Tensor& host, c10::DeviceIndex index) {
  if (!host.defined()) return host;
  return make_npu_tensor(adopt_as_npu(host.storage(), index), host);
}

// Many ops have a CPU kernel and also a composite one that PrivateUse1 would pick over the fallback: the
// CompositeExplicitAutogradNonFunctional wrappers of structured ops (add, mul, mse_loss...: meta + `.out`) and a
// few CompositeExplicitAutograd decompositions (native_layer_norm into batch_norm). A device backend registers
// its own kernels there, as CUDA does; ours is the CPU kernel through the zero-copy fallback, so npu ops behave
// (results, warnings) exactly like CPU ops. Found by asking the dispatcher, so it tracks the torch version.
std::vector<std::string> register_host_kernels() {
  static std::once_flag once;
  static std::vector<std::string> registered;
  std::call_once(once, [] {
    static auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                              __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      const auto op = dispatcher.findOp(name);
      if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
        continue;
      if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
          !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
        continue;
      std::string qualified = name.name.substr(6);
      if (!name.overload_name.empty()) qualified += "." + name.overload_name;
      library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&npu_fallback>());
      registered.push_back(name.name + (name.overload_name.empty() ? "" : "." + name.overload_name));
    }
  });
  return registered;
}

// Public helpers for the Python bindings.
at::Tensor cpu_alias(const at::Tensor& t) {
  TORCH_CHECK(t.is_privateuseone(), "cpu_alias expects an npu tensor, got a tensor on ", t.device());
  const c10::Storage& npu = t.storage();
  c10::Storage host(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), npu.nbytes(),
                                                          host_view_of(npu), nullptr, /*resizable=*/false));
  auto out = at::detail::make_tensor<c10::TensorImpl>(std::move(host), kCpuKeys, t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

at::Tensor npu_alias(const at::Tensor& t, c10::DeviceIndex index) {
  TORCH_CHECK(t.is_cpu() && t.layout() == at::kStrided, "npu_alias expects a strided CPU tensor, got ",
              t.device(), " ", t.layout());
  index = resolve_index(index);
  check_index(index);
  c10::Storage npu(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), t.storage().nbytes(),
                                                         adopt_storage(t.storage(), index), npu_allocator(),
                                                         /*resizable=*/false));
  return make_npu_tensor(std::move(npu), t);
}

}  // namespace ascend_sim
