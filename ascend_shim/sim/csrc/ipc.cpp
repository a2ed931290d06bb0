// Memory of npu tensors shared with other processes (torch.multiprocessing). The emulated device's memory is host
// memory, so an npu storage is shared by moving it, in place, onto a host storage in shared memory, which torch's
// CPU sharing then hands to the other process; every tensor and view on that storage goes on using it.
#include "sim.h"

#include <torch/library.h>

namespace ascend_sim {
namespace {

// The npu storage under `npu` takes `host`'s memory (the caller copied the bytes over): same StorageImpl, so every
// tensor on it sees the shared bytes. Shared memory cannot grow, so the storage is no longer resizable.
void adopt_host_storage(const at::Tensor& npu, const at::Tensor& host) {
  TORCH_CHECK(npu.is_privateuseone(), "adopt_host_storage: expected an npu tensor, got one on ", npu.device());
  TORCH_CHECK(host.is_cpu(), "adopt_host_storage: expected a CPU tensor, got one on ", host.device());
  c10::StorageImpl* target = npu.storage().unsafeGetStorageImpl();
  const c10::Storage& source = host.storage();
  TORCH_CHECK(source.nbytes() == target->nbytes(), "adopt_host_storage: the host storage has ", source.nbytes(),
              " bytes, the npu storage ", target->nbytes());
  target->set_data_ptr_noswap(adopt_storage(source, npu.device().index()));
  target->set_resizable(false);
}

TORCH_LIBRARY(ascend_sim_ipc, m) {
  m.def("adopt_host_storage(Tensor npu, Tensor host) -> ()", &adopt_host_storage);
}

}  // namespace
}  // namespace ascend_sim
