// The C++ half of the emulated ``hccl`` backend: a c10d::Backend subclass that forwards to Python.
//
// torch 2.13 cannot subclass torch._C._distributed_c10d.Backend from Python (it has no bound constructor), and a
// Python ProcessGroup returned by a backend factory *replaces* the whole process group
// (_new_process_group_helper: "the old behavior for PythonProcessGroups"), which loses the cpu:gloo,npu:hccl
// split, pg._get_backend(npu) and pg._device_types. Real torch_npu returns a C++ ProcessGroupHCCL (a
// c10d::Backend), so this one is C++ too: every virtual collective takes the GIL and calls the same-named method
// of a Python object (ascend_shim.sim.hccl._impl.HcclSim) with the tensors and the options flattened to plain
// values, then returns a completed Work whose future holds the output tensors, as NCCL/HCCL works do. Python
// exceptions come back as the c10 error of the same kind (RuntimeError / ValueError / TypeError /
// DistBackendError) so that callers in C++ (DDP's reducer, functional collectives) and in Python see what real
// ProcessGroupHCCL's TORCH_CHECK would raise.
//
// Built on first use by ascend_shim.sim._extension (extension HCCL), cached like the emulator's own extension.
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <mutex>
#include <string>

namespace py = pybind11;

namespace ascend_shim_sim __attribute__((visibility("hidden"))) {

using c10d::OpType;

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

[[noreturn]] void rethrow_python_error(py::error_already_set& e) {
  // Called with the GIL held. Map the Python exception onto the c10 error of the same kind.
  std::string type_name;
  std::string msg;
  {
    py::object type = e.type();
    py::object value = e.value();
    type_name = py::str(type.attr("__name__"));
    msg = py::str(value);
  }
  if (type_name == "ValueError") {
    C10_THROW_ERROR(ValueError, msg);
  } else if (type_name == "TypeError") {
    C10_THROW_ERROR(TypeError, msg);
  } else if (type_name == "NotImplementedError") {
    C10_THROW_ERROR(NotImplementedError, msg);
  } else if (type_name == "DistBackendError") {
    C10_THROW_ERROR(DistBackendError, msg);
  } else if (type_name == "DistStoreError") {
    C10_THROW_ERROR(DistStoreError, msg);
  } else if (type_name == "DistNetworkError") {
    C10_THROW_ERROR(DistNetworkError, msg);
  }
  TORCH_CHECK(false, msg);
}

c10::intrusive_ptr<c10::ivalue::Future> ready_future(const std::vector<at::Tensor>& outputs) {
  auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  // The data is ready when this runs: no storages, so no device events to record (a future typed by
  // the npu device would need the device's event support for nothing).
  fut->markCompleted(c10::IValue(outputs), std::vector<c10::ivalue::Future::WeakStorage>{});
  return fut;
}

// A collective that already ran (synchronously, in Python) when the backend call returned.
class SimWork : public c10d::Work {
 public:
  SimWork(int rank, OpType opType, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, opType), outputs_(std::move(outputs)), future_(ready_future(outputs_)) {
    finish();
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A point-to-point operation still in flight: Python returned an object with wait() / is_completed()
// (a gloo work plus the copy back into the npu tensor). Completes on wait(), or when polled done.
class PendingSimWork : public c10d::Work {
 public:
  PendingSimWork(int rank, OpType opType, std::vector<at::Tensor> outputs, py::object pending)
      : c10d::Work(rank, opType),
        outputs_(std::move(outputs)),
        pending_(std::move(pending)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  ~PendingSimWork() override {
    if (!python_alive()) {
      pending_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    pending_ = py::object();
  }

  bool isCompleted() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_) {
        return true;
      }
    }
    bool ready = false;
    {
      py::gil_scoped_acquire gil;
      try {
        ready = pending_.attr("is_completed")().cast<bool>();
      } catch (py::error_already_set& e) {
        rethrow_python_error(e);
      }
    }
    if (ready) {
      wait(std::chrono::milliseconds(0));
    }
    return ready;
  }
  bool isSuccess() const override { return true; }

  bool wait(std::chrono::milliseconds /*timeout*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      {
        py::gil_scoped_acquire gil;
        try {
          pending_.attr("wait")();
        } catch (py::error_already_set& e) {
          rethrow_python_error(e);
        }
      }
      done_ = true;
      future_->markCompleted(c10::IValue(outputs_), std::vector<c10::ivalue::Future::WeakStorage>{});
      finish();
    }
    return true;
  }
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::mutex mu_;
  bool done_ = false;
  std::vector<at::Tensor> outputs_;
  py::object pending_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// What endCoalescing() returns: the works issued since startCoalescing(), waited together.
class CoalescedSimWork : public c10d::Work {
 public:
  CoalescedSimWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
      : c10d::Work(rank, OpType::COALESCED),
        works_(std::move(works)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  bool isCompleted() override {
    for (auto& w : works_) {
      if (!w->isCompleted()) {
        return false;
      }
    }
    wait(std::chrono::milliseconds(0));
    return true;
  }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      std::vector<at::Tensor> outputs;
      for (auto& w : works_) {
        w->wait(timeout);
        auto r = w->result();
        outputs.insert(outputs.end(), r.begin(), r.end());
      }
      done_ = true;
      future_->markCompleted(c10::IValue(outputs), std::vector<c10::ivalue::Future::WeakStorage>{});
      finish();
    }
    return true;
  }
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::mutex mu_;
  bool done_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// (op, premul factor) of a ReduceOp as plain values; the factor is a float, a tensor or None.
py::tuple reduce_op_args(const c10d::ReduceOp& op) {
  py::object factor = py::none();
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM && op.supplement_) {
    auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    if (sup != nullptr) {
      if (sup->tensor_factor.defined()) {
        factor = py::cast(sup->tensor_factor);
      } else {
        factor = py::float_(sup->double_factor);
      }
    }
  }
  return py::make_tuple(static_cast<int>(op.op_), factor);
}

std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& l : lists) {
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

class ProcessGroupHCCLSim : public c10d::Backend {
 public:
  ProcessGroupHCCLSim(int rank, int size, py::object impl)
      : c10d::Backend(rank, size), impl_(std::move(impl)) {}

  ~ProcessGroupHCCLSim() override {
    if (!python_alive()) {
      impl_.release();  // interpreter gone: leak instead of touching it
      return;
    }
    py::gil_scoped_acquire gil;
    impl_ = py::object();
  }

  py::object impl() const { return impl_; }

  const std::string getBackendName() const override { return "hccl"; }
  bool supportsSplitting() const override { return false; }
  bool supportsCoalescing() const override { return true; }  // as ProcessGroupHCCL

  // Operations run (or, for p2p, start) as they are issued; endCoalescing() hands back one work over them.
  void startCoalescing() override {
    std::lock_guard<std::mutex> lock(coalesce_mu_);
    coalescing_ = true;
    coalesced_.clear();
  }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    {
      std::lock_guard<std::mutex> lock(coalesce_mu_);
      coalescing_ = false;
      works.swap(coalesced_);
    }
    return c10::make_intrusive<CoalescedSimWork>(getRank(), std::move(works));
  }

  void setTimeout(std::chrono::milliseconds timeout) override {
    py::gil_scoped_acquire gil;
    call("set_timeout", timeout.count());
  }

  // Every collective: take the GIL (the caller may be DDP's autograd thread), call the Python half,
  // wrap its result. Arguments are converted after the GIL is taken (they are evaluated in `call`'s
  // argument list, below the guard) and die before it is released.
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(OpType::BROADCAST, tensors, call("broadcast", tensors, opts.rootRank, opts.rootTensor));
  }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(OpType::ALLREDUCE, tensors, call("allreduce", tensors, reduce_op_args(opts.reduceOp)));
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(
        OpType::ALLREDUCE_COALESCED, tensors, call("allreduce_coalesced", tensors, reduce_op_args(opts.reduceOp)));
  }

  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(
        OpType::REDUCE, tensors,
        call("reduce", tensors, opts.rootRank, opts.rootTensor, reduce_op_args(opts.reduceOp)));
  }

  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& /*opts*/) override {
    py::gil_scoped_acquire gil;
    return work(OpType::ALLGATHER, flat(outputs), call("allgather", outputs, inputs));
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) override {
    py::gil_scoped_acquire gil;
    return work(OpType::_ALLGATHER_BASE, {output}, call("_allgather_base", output, input));
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& /*opts*/) override {
    py::gil_scoped_acquire gil;
    return work(OpType::ALLGATHER_COALESCED, flat(outputs), call("allgather_coalesced", outputs, inputs));
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& /*opts*/) override {
    py::gil_scoped_acquire gil;
    return work(OpType::COALESCED, outputs, call("allgather_into_tensor_coalesced", outputs, inputs));
  }

  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(OpType::GATHER, flat(outputs), call("gather", outputs, inputs, opts.rootRank));
  }

  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(OpType::SCATTER, outputs, call("scatter", outputs, inputs, opts.rootRank));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(
        OpType::REDUCE_SCATTER, outputs, call("reduce_scatter", outputs, inputs, reduce_op_args(opts.reduceOp)));
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(
        OpType::_REDUCE_SCATTER_BASE, {output},
        call("_reduce_scatter_base", output, input, reduce_op_args(opts.reduceOp)));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    py::gil_scoped_acquire gil;
    return work(
        OpType::COALESCED, outputs,
        call("reduce_scatter_tensor_coalesced", outputs, inputs, reduce_op_args(opts.reduceOp)));
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output,
      at::Tensor& input,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& /*opts*/) override {
    py::gil_scoped_acquire gil;
    return work(
        OpType::ALLTOALL_BASE, {output},
        call("alltoall_base", output, input, outputSplitSizes, inputSplitSizes));
  }

  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& /*opts*/) override {
    py::gil_scoped_acquire gil;
    return work(OpType::ALLTOALL, outputs, call("alltoall", outputs, inputs));
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override {
    py::gil_scoped_acquire gil;
    return work(OpType::SEND, tensors, call("send", tensors, dstRank, tag));
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override {
    py::gil_scoped_acquire gil;
    return work(OpType::RECV, tensors, call("recv", tensors, srcRank, tag));
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    py::gil_scoped_acquire gil;
    return work(OpType::RECVANYSOURCE, tensors, call("recv_anysource", tensors, tag));
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    std::string device = opts.device.has_value() ? opts.device->str() : std::string();
    py::gil_scoped_acquire gil;
    return work(OpType::BARRIER, {}, call("barrier", opts.device_ids, device));
  }

  c10::intrusive_ptr<c10d::Work> batch_isend_irecv(
      std::vector<std::string>& opTypes,
      std::vector<at::Tensor>& tensors,
      std::vector<int64_t>& remoteRanks) {
    py::gil_scoped_acquire gil;
    return work(OpType::COALESCED, tensors, call("batch_isend_irecv", opTypes, tensors, remoteRanks));
  }

  void setSequenceNumberForGroup() override { seq_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  void abort() override {
    if (python_alive()) {
      py::gil_scoped_acquire gil;
      call("abort");
    }
  }
  void shutdown() override {
    if (python_alive()) {
      py::gil_scoped_acquire gil;
      call("shutdown");
    }
  }

 private:
  // Requires the GIL.
  template <typename... Args>
  py::object call(const char* name, Args&&... args) {
    try {
      return impl_.attr(name)(std::forward<Args>(args)...);
    } catch (py::error_already_set& e) {
      rethrow_python_error(e);
    }
  }

  // Requires the GIL (``result`` is a Python object).
  c10::intrusive_ptr<c10d::Work> work(OpType opType, std::vector<at::Tensor> outputs, py::object result) {
    ++seq_;
    c10::intrusive_ptr<c10d::Work> w;
    if (result.is_none()) {
      w = c10::make_intrusive<SimWork>(getRank(), opType, std::move(outputs));
    } else {
      w = c10::make_intrusive<PendingSimWork>(getRank(), opType, std::move(outputs), std::move(result));
    }
    std::lock_guard<std::mutex> lock(coalesce_mu_);
    if (coalescing_) {
      coalesced_.push_back(w);
    }
    return w;
  }

  py::object impl_;
  std::atomic<uint64_t> seq_{0};
  std::mutex coalesce_mu_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
};

}  // namespace ascend_shim_sim

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using ascend_shim_sim::ProcessGroupHCCLSim;
  py::module_::import("torch.distributed");
  py::class_<ProcessGroupHCCLSim, c10d::Backend, c10::intrusive_ptr<ProcessGroupHCCLSim>>(m, "ProcessGroupHCCL")
      .def(py::init([](int rank, int size, py::object impl) {
             return c10::make_intrusive<ProcessGroupHCCLSim>(rank, size, std::move(impl));
           }),
           py::arg("rank"), py::arg("size"), py::arg("impl"))
      .def_property_readonly("_impl", &ProcessGroupHCCLSim::impl)
      .def("batch_isend_irecv", &ProcessGroupHCCLSim::batch_isend_irecv,
           py::arg("op_type"), py::arg("tensors"), py::arg("remote_rank_list"),
           py::call_guard<py::gil_scoped_release>());
}
