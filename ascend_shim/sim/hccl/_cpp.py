"""The C++ half of the emulated ``hccl`` backend: a ``c10d::Backend`` subclass that forwards to Python.

torch 2.13 cannot subclass ``torch._C._distributed_c10d.Backend`` from Python (it has no bound
constructor), and a Python ``ProcessGroup`` returned by a backend factory *replaces* the whole
process group (``_new_process_group_helper``: "the old behavior for PythonProcessGroups"), which
loses the ``cpu:gloo,npu:hccl`` split, ``pg._get_backend(npu)`` and ``pg._device_types``. Real
torch_npu returns a C++ ``ProcessGroupHCCL`` (a ``c10d::Backend``), so this one is C++ too: every
virtual collective takes the GIL and calls the same-named method of a Python object
(``ascend_shim.sim.hccl._impl.HcclSim``) with the tensors and the options flattened to plain
values, then returns a completed ``Work`` whose future holds the output tensors, as NCCL/HCCL works
do. Python exceptions come back as the c10 error of the same kind (RuntimeError / ValueError /
TypeError / DistBackendError) so that callers in C++ (DDP's reducer, functional collectives) and in
Python see what real ProcessGroupHCCL's ``TORCH_CHECK`` would raise.

The source is kept in this module (not a ``.cpp`` file) so that it ships with the package without
package-data rules; it is built once per machine with ``torch.utils.cpp_extension.load_inline``.
"""
from __future__ import annotations

import os
import threading

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <string>

namespace py = pybind11;

namespace ascend_shim_sim __attribute__((visibility("hidden"))) {

using c10d::OpType;

// A collective that already ran (synchronously, in Python) when the backend call returned.
class SimWork : public c10d::Work {
 public:
  SimWork(int rank, OpType opType, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, opType), outputs_(std::move(outputs)) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    future_->markCompleted(c10::IValue(outputs_));
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

// (op, premul factor as float, premul factor as tensor) of a ReduceOp, as plain values.
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

class ProcessGroupHCCLSim : public c10d::Backend {
 public:
  ProcessGroupHCCLSim(int rank, int size, py::object impl)
      : c10d::Backend(rank, size), impl_(std::move(impl)) {}

  ~ProcessGroupHCCLSim() override {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) {
      impl_.release();  // interpreter gone: leak instead of touching it
      return;
    }
    py::gil_scoped_acquire gil;
    impl_ = py::object();
  }

  py::object impl() const { return impl_; }

  const std::string getBackendName() const override { return "hccl"; }
  bool supportsSplitting() const override { return false; }
  bool supportsCoalescing() const override { return false; }

  void setTimeout(std::chrono::milliseconds timeout) override {
    call_void("set_timeout", timeout.count());
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    call_void("broadcast", tensors, opts.rootRank, opts.rootTensor);
    return done(OpType::BROADCAST, tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    call_void("allreduce", tensors, reduce_op_args(opts.reduceOp));
    return done(OpType::ALLREDUCE, tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    call_void("allreduce_coalesced", tensors, reduce_op_args(opts.reduceOp));
    return done(OpType::ALLREDUCE_COALESCED, tensors);
  }

  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    call_void("reduce", tensors, opts.rootRank, opts.rootTensor, reduce_op_args(opts.reduceOp));
    return done(OpType::REDUCE, tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& /*opts*/) override {
    call_void("allgather", outputs, inputs);
    return done(OpType::ALLGATHER, flat(outputs));
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) override {
    call_void("_allgather_base", output, input);
    return done(OpType::_ALLGATHER_BASE, {output});
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& /*opts*/) override {
    call_void("allgather_coalesced", outputs, inputs);
    return done(OpType::ALLGATHER_COALESCED, flat(outputs));
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& /*opts*/) override {
    call_void("allgather_into_tensor_coalesced", outputs, inputs);
    return done(OpType::COALESCED, outputs);
  }

  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override {
    call_void("gather", outputs, inputs, opts.rootRank);
    return done(OpType::GATHER, flat(outputs));
  }

  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override {
    call_void("scatter", outputs, inputs, opts.rootRank);
    return done(OpType::SCATTER, outputs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    call_void("reduce_scatter", outputs, inputs, reduce_op_args(opts.reduceOp));
    return done(OpType::REDUCE_SCATTER, outputs);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    call_void("_reduce_scatter_base", output, input, reduce_op_args(opts.reduceOp));
    return done(OpType::_REDUCE_SCATTER_BASE, {output});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    call_void("reduce_scatter_tensor_coalesced", outputs, inputs, reduce_op_args(opts.reduceOp));
    return done(OpType::COALESCED, outputs);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output,
      at::Tensor& input,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& /*opts*/) override {
    call_void("alltoall_base", output, input, outputSplitSizes, inputSplitSizes);
    return done(OpType::ALLTOALL_BASE, {output});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& /*opts*/) override {
    call_void("alltoall", outputs, inputs);
    return done(OpType::ALLTOALL, outputs);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override {
    call_void("send", tensors, dstRank, tag);
    return done(OpType::SEND, tensors);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override {
    call_void("recv", tensors, srcRank, tag);
    return done(OpType::RECV, tensors);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    call_void("recv_anysource", tensors, tag);
    return done(OpType::RECVANYSOURCE, tensors);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    py::object device = py::none();
    {
      py::gil_scoped_acquire gil;
      if (opts.device.has_value()) {
        device = py::str(opts.device->str());
      }
    }
    call_void("barrier", opts.device_ids, device);
    return done(OpType::BARRIER, {});
  }

  c10::intrusive_ptr<c10d::Work> batch_isend_irecv(
      std::vector<std::string>& opTypes,
      std::vector<at::Tensor>& tensors,
      std::vector<int64_t>& remoteRanks) {
    call_void("batch_isend_irecv", opTypes, tensors, remoteRanks);
    return done(OpType::COALESCED, tensors);
  }

  void setSequenceNumberForGroup() override { seq_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  void abort() override { call_void("abort"); }
  void shutdown() override { call_void("shutdown"); }

 private:
  template <typename... Args>
  void call_void(const char* name, Args&&... args) {
    py::gil_scoped_acquire gil;
    try {
      impl_.attr(name)(std::forward<Args>(args)...);
    } catch (py::error_already_set& e) {
      rethrow_python_error(e);
    }
  }

  static std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& lists) {
    std::vector<at::Tensor> out;
    for (const auto& l : lists) {
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  }

  c10::intrusive_ptr<c10d::Work> done(OpType opType, std::vector<at::Tensor> outputs) {
    ++seq_;
    return c10::make_intrusive<SimWork>(getRank(), opType, std::move(outputs));
  }

  py::object impl_;
  std::atomic<uint64_t> seq_{0};
};

}  // namespace ascend_shim_sim

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using ascend_shim_sim::ProcessGroupHCCLSim;
  py::module_::import("torch.distributed");
  py::class_<ProcessGroupHCCLSim, c10d::Backend, c10::intrusive_ptr<ProcessGroupHCCLSim>>(
      m, "ProcessGroupHCCL")
      .def(py::init([](int rank, int size, py::object impl) {
             return c10::make_intrusive<ProcessGroupHCCLSim>(rank, size, std::move(impl));
           }),
           py::arg("rank"), py::arg("size"), py::arg("impl"))
      .def_property_readonly("_impl", &ProcessGroupHCCLSim::impl)
      .def("batch_isend_irecv", &ProcessGroupHCCLSim::batch_isend_irecv,
           py::arg("op_type"), py::arg("tensors"), py::arg("remote_rank_list"),
           py::call_guard<py::gil_scoped_release>());
}
"""

_lock = threading.Lock()
_module = None

# Bump when CPP_SOURCE changes in a way that must force a rebuild under the same name.
_ABI_TAG = "v1"


def load(verbose: bool = False):
    """Build (first call on a machine, ~1 min on 2 cores) or load the extension; returns the module."""
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            import torch.distributed  # noqa: F401  (registers the c10d pybind types first)
            from torch.utils.cpp_extension import load_inline

            _module = load_inline(
                name=f"ascend_shim_sim_hccl_{_ABI_TAG}",
                cpp_sources=[CPP_SOURCE],
                extra_cflags=["-O1"],
                verbose=verbose or bool(os.environ.get("ASCEND_SHIM_SIM_BUILD_VERBOSE")),
            )
    return _module
