// The NPU's operator coverage on the emulated device.
//
// torch_npu registers NPU kernels for a fixed list of aten operators (its build-time yaml) and a boxed fallback
// for PrivateUse1 that runs every other operator on the CPU: the first call of each operator prints, through
// c10's base warning handler (stderr, not Python's warnings), "CAUTION: The operator '<name>' is not currently
// supported on the NPU backend and will fall back to run on the CPU. This may have performance implications."
// (once per operator name, only on rank 0 or without RANK, unless TORCH_NPU_WARNING_DISABLE /
// TORCH_NPU_DISABLED_WARNING is 1); with TORCH_NPU_FALLBACK_CPU_DISABLE=1 every such call raises instead.
//
// The emulated device runs every operator on host memory, so it must be told which operators the NPU has kernels
// for: `install` gives it the list. `check_op_coverage`, called by the emulator's fallback before each operator,
// then answers from a lock-free table of decisions, one per operator, made once: a listed operator costs a few
// loads. An operator without an NPU kernel asks Python once (`resolver`) which name the NPU would report
// (the emulator runs some composite operators as one CPU kernel where the NPU runs torch's decomposition into
// the `.out` operator) and to record the call site in the migration report.
//
// Where the NPU has a kernel for an operator that the emulator runs as torch's decomposition (linalg_cholesky,
// inverse, slogdet...), the decomposition may reach operators without NPU kernels that the NPU never runs.
// Those composites get a kernel here that marks the thread while the decomposition runs ("scopes"); inside one,
// no operator warns, nor in the backward of the autograd nodes the decomposition made (the NPU kernel's backward
// is the NPU's own). Which composites need it is measured (`set_tracing`), not guessed.
#include "sim.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <iomanip>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace ascend_sim {
namespace {

enum class Verdict : uint8_t {
  kNpuKernel,   // listed, or decomposes on the NPU into listed operators: silent
  kFallback,    // runs on the CPU through torch_npu's fallback (warned once per reported name)
  kRefused,     // TORCH_NPU_FALLBACK_CPU_DISABLE=1: every call raises
  kPending,     // being decided by another thread: silent for now
};

struct Decision {
  c10::OperatorHandle op;
  Verdict verdict;
  std::string reported;  // the operator name the NPU reports (kFallback, kRefused)
};

std::atomic<bool> g_active{false};
std::atomic<bool> g_tracing{false};
std::atomic<int> g_scopes_running{0};  // scopes running on any thread: when 0, no thread needs its own look
std::atomic<int> g_marked_nodes{0};    // live autograd nodes made inside a scope

// The hot path's table: decisions by a hash of their operator, open addressing with a short probe (a miss takes
// the locked path). Slots only go from empty to a decision until an installation empties them all; decisions are
// never freed, so a reader never holds a dangling one.
constexpr size_t kSlots = 4096;
constexpr size_t kProbes = 8;
std::atomic<const Decision*> g_slots[kSlots];

size_t hash_of(const c10::OperatorHandle& op) {
  const size_t h = std::hash<c10::OperatorHandle>{}(op);
  return (h >> 4) ^ (h >> 16);
}

const Decision* published(const c10::OperatorHandle& op) {
  const size_t h = hash_of(op);
  for (size_t i = 0; i < kProbes; ++i) {
    const Decision* d = g_slots[(h + i) & (kSlots - 1)].load(std::memory_order_acquire);
    if (d == nullptr || d->op == op) return d;
  }
  return nullptr;
}

void publish_locked(const Decision* d) {
  const size_t h = hash_of(d->op);
  for (size_t i = 0; i < kProbes; ++i) {
    auto& slot = g_slots[(h + i) & (kSlots - 1)];
    const Decision* there = slot.load(std::memory_order_relaxed);
    if (there == nullptr) {
      slot.store(d, std::memory_order_release);
      return;
    }
    if (there->op == d->op) return;
  }  // a full probe window: this operator keeps taking the locked path
}

std::mutex g_mutex;  // guards everything below; never held while calling into Python
std::unordered_set<std::string> g_kernels;                       // "aten::add.Tensor"
std::deque<Decision> g_store;                                     // every decision made (stable addresses)
std::unordered_map<c10::OperatorHandle, Decision*> g_decided;    // this installation's decisions
std::unordered_set<std::string> g_warned;
std::vector<std::string> g_fallbacks;                     // reported names, in order of first use
std::set<std::pair<std::string, std::string>> g_traced;   // (composite with an NPU kernel, operator it reached)
std::set<std::string> g_entered;                          // composites with an NPU kernel that ran while tracing
py::object* g_resolver = nullptr;                         // leaked on purpose: never destroyed after Python
// Owners of the scope kernels (deleted to unregister them; left alone at exit, like the other registrations).
torch::Library* g_scope_backend = nullptr;
torch::Library* g_scope_autograd = nullptr;

// Composites with an NPU kernel running on this thread, innermost last.
std::vector<c10::OperatorHandle>& thread_scopes() {
  thread_local std::vector<c10::OperatorHandle> scopes;
  return scopes;
}

std::string qualified(const std::string& name) {
  return name.find("::") == std::string::npos ? "aten::" + name : name;
}

bool listed_locked(const std::string& full_name) {
  if (full_name.rfind("npu::", 0) == 0) return true;  // torch_npu's own operators
  return g_kernels.count(full_name) > 0;
}

bool env_is_one(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strtol(value, nullptr, 10) == 1;
}

// torch_npu's OptionsManager reads these once per process.
bool fallback_disabled() {
  static const bool disabled = env_is_one("TORCH_NPU_FALLBACK_CPU_DISABLE");
  return disabled;
}

bool should_print_warning() {
  static const bool print = [] {
    const char* name = std::getenv("TORCH_NPU_WARNING_DISABLE") ? "TORCH_NPU_WARNING_DISABLE"
                                                                 : "TORCH_NPU_DISABLED_WARNING";
    if (env_is_one(name)) return false;
    const char* rank = std::getenv("RANK");
    const long rank_id = rank ? std::strtol(rank, nullptr, 10) : -1;
    return rank_id == 0 || rank_id == -1;
  }();
  return print;
}

void print_caution(const std::string& reported) {
  if (!should_print_warning()) return;
  // torch_npu's TORCH_NPU_WARN: c10's base handler, whatever handler Python installed.
  c10::WarningHandler base;
  base.process(c10::Warning(c10::UserWarning(), {"npu_cpu_fallback", __FILE__, static_cast<uint32_t>(__LINE__)},
                            "CAUTION: The operator '" + reported + "' is not currently supported on the NPU backend "
                            "and will fall back to run on the CPU. This may have performance implications.",
                            false));
}

[[noreturn]] void refuse(const std::string& reported) {
  TORCH_CHECK(false, "The operator '", reported, "' would execute its main computation on CPU through dispatcher "
              "backend fallback because no kernel is registered for the NPU PrivateUse1 backend, but CPU fallback "
              "is disabled by TORCH_NPU_FALLBACK_CPU_DISABLE=1.", ops_not_supported_suffix());
}

bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// The name the NPU reports for an operator without a kernel ("" when it decomposes into NPU kernels there),
// asked of Python, which also records the call site. `composite`: the emulator runs torch's CPU kernel where the
// NPU runs the operator's composite kernel.
std::string resolve(const std::string& name, bool composite, bool refused) {
  py::object* resolver;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    resolver = g_resolver;
  }
  if (resolver != nullptr && python_usable()) {
    py::gil_scoped_acquire gil;
    try {
      return (*resolver)(name, composite, refused).cast<std::string>();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("ascend_shim.sim op coverage");
    }
  }
  return composite ? "" : name;
}

// The locked path: the operator's decision, made on its first call (nullptr while another thread makes it).
const Decision* decide(const c10::OperatorHandle& op) {
  std::string name;
  Decision* d;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto found = g_decided.find(op);
    if (found != g_decided.end()) {
      d = found->second;
      if (d->verdict == Verdict::kPending) return nullptr;
      publish_locked(d);
      return d;
    }
    name = c10::toString(op.operator_name());
    const bool listed = listed_locked(name);
    d = &g_store.emplace_back(Decision{op, listed ? Verdict::kNpuKernel : Verdict::kPending, ""});
    g_decided.emplace(op, d);
    if (listed) {
      publish_locked(d);
      return d;
    }
  }
  const bool composite = op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  const bool refused = fallback_disabled();
  const std::string reported = resolve(name, composite, refused);
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (reported.empty() || listed_locked(reported)) {
      d->verdict = Verdict::kNpuKernel;
    } else {
      d->reported = reported;
      d->verdict = refused ? Verdict::kRefused : Verdict::kFallback;
      if (!refused) {
        first = g_warned.insert(reported).second;
        if (first) g_fallbacks.push_back(reported);
      }
    }
    const auto current = g_decided.find(op);
    if (current != g_decided.end() && current->second == d) publish_locked(d);  // not forgotten meanwhile
  }
  if (first) print_caution(reported);
  return d;
}

void trace(const c10::OperatorHandle& op, const c10::OperatorHandle& scope) {
  const std::string name = c10::toString(op.operator_name());
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!listed_locked(name)) g_traced.emplace(c10::toString(scope.operator_name()), name);
}

// Marks an autograd node made inside a scope: its backward is part of the NPU kernel's.
struct InsideNpuKernel final : torch::autograd::FunctionPreHook {
  InsideNpuKernel() { g_marked_nodes.fetch_add(1, std::memory_order_relaxed); }
  ~InsideNpuKernel() override { g_marked_nodes.fetch_sub(1, std::memory_order_relaxed); }
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override { return grads; }
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs&) const override {}  // changes no gradient
};

bool in_marked_backward() {
  const auto node = torch::autograd::get_current_node();
  if (!node) return false;
  for (const auto& hook : node->pre_hooks())
    if (dynamic_cast<const InsideNpuKernel*>(hook.get()) != nullptr) return true;
  return false;
}

template <typename F>
void for_each_tensor(const c10::IValue* begin, const c10::IValue* end, F f) {
  for (const c10::IValue* v = begin; v != end; ++v) {
    if (v->isTensor()) {
      f(v->toTensor());
    } else if (v->isTensorList()) {
      for (const at::Tensor& t : v->toTensorList()) f(t);
    }
  }
}

// Marks the nodes between the outputs on the stack and the inputs' gradient edges (`before`).
void mark_new_nodes(const torch::jit::Stack& stack, size_t returns,
                    const std::unordered_set<const torch::autograd::Node*>& before) {
  std::vector<torch::autograd::Node*> todo;
  std::unordered_set<const torch::autograd::Node*> seen(before);
  for_each_tensor(stack.data() + stack.size() - returns, stack.data() + stack.size(), [&](const at::Tensor& t) {
    if (t.defined() && t.grad_fn() && seen.insert(t.grad_fn().get()).second) todo.push_back(t.grad_fn().get());
  });
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.back();
    todo.pop_back();
    node->add_pre_hook(std::make_unique<InsideNpuKernel>());
    for (const auto& edge : node->next_edges())
      if (edge.function && seen.insert(edge.function.get()).second) todo.push_back(edge.function.get());
  }
}

// A composite with an NPU kernel: its decomposition runs marked as inside that kernel.
template <c10::DispatchKey Composite>
void npu_kernel_scope(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto& scopes = thread_scopes();
  if (g_tracing.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_entered.insert(c10::toString(op.operator_name()));
  }
  scopes.push_back(op);
  g_scopes_running.fetch_add(1, std::memory_order_relaxed);
  struct Pop {
    std::vector<c10::OperatorHandle>& scopes;
    ~Pop() {
      g_scopes_running.fetch_sub(1, std::memory_order_relaxed);
      scopes.pop_back();
    }
  } pop{scopes};
  const auto& schema = op.schema();
  std::unordered_set<const torch::autograd::Node*> before;  // the inputs' nodes, when autograd records
  bool records = false;
  if (at::GradMode::is_enabled()) {
    const c10::IValue* args = stack->data() + stack->size() - schema.arguments().size();
    for_each_tensor(args, stack->data() + stack->size(), [&](const at::Tensor& t) {
      if (!t.defined() || !t.requires_grad()) return;
      records = true;
      before.insert(torch::autograd::impl::gradient_edge(t).function.get());
    });
  }
  op.callBoxedForDispatchKey(Composite, *stack);
  if (records) mark_new_nodes(*stack, schema.returns().size(), before);
}

void unregister_scopes() {
  delete g_scope_backend;
  delete g_scope_autograd;
  g_scope_backend = g_scope_autograd = nullptr;
}

// The aten operator named "aten::name.overload", if torch has it.
std::optional<c10::OperatorHandle> find_aten(const std::string& full) {
  if (full.rfind("aten::", 0) != 0) return std::nullopt;
  const auto dot = full.find('.');
  return c10::Dispatcher::singleton().findOp(c10::OperatorName(
      full.substr(0, dot), dot == std::string::npos ? "" : full.substr(dot + 1)));
}

// The composite kernel the emulator runs for `op` on the device (no PrivateUse1 kernel of its own), if any.
std::optional<c10::DispatchKey> decomposition_of(const c10::OperatorHandle& op) {
  if (op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return std::nullopt;
  for (const auto key : {c10::DispatchKey::CompositeImplicitAutograd, c10::DispatchKey::CompositeExplicitAutograd,
                         c10::DispatchKey::CompositeExplicitAutogradNonFunctional})
    if (op.hasKernelForDispatchKey(key)) return key;
  return std::nullopt;
}

// Kernels at PrivateUse1 (and AutogradPrivateUse1 for CompositeImplicitAutograd, whose autograd is its
// decomposition) for each named composite the emulator would decompose; returns the names registered.
std::vector<std::string> register_scopes(const std::vector<std::string>& names) {
  unregister_scopes();
  g_scope_backend = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                       __LINE__);
  g_scope_autograd = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradPrivateUse1,
                                        __FILE__, __LINE__);
  std::vector<std::string> registered;
  for (const std::string& raw : names) {
    const std::string full = qualified(raw);
    const auto op = find_aten(full);
    const auto key = op ? decomposition_of(*op) : std::nullopt;
    if (!key) continue;
    const char* local = full.c_str() + 6;
    using c10::DispatchKey;
    if (*key == DispatchKey::CompositeImplicitAutograd) {
      constexpr auto kernel = &npu_kernel_scope<DispatchKey::CompositeImplicitAutograd>;
      g_scope_backend->impl(local, torch::CppFunction::makeFromBoxedFunction<kernel>());
      g_scope_autograd->impl(local, torch::CppFunction::makeFromBoxedFunction<kernel>());
    } else if (*key == DispatchKey::CompositeExplicitAutograd) {
      g_scope_backend->impl(
          local, torch::CppFunction::makeFromBoxedFunction<&npu_kernel_scope<DispatchKey::CompositeExplicitAutograd>>());
    } else {
      g_scope_backend->impl(local, torch::CppFunction::makeFromBoxedFunction<
                                       &npu_kernel_scope<DispatchKey::CompositeExplicitAutogradNonFunctional>>());
    }
    registered.push_back(full);
  }
  return registered;
}

// The NPU kernels the emulator runs as a decomposition: listed operators whose PrivateUse1 slot is a composite.
std::vector<std::string> decomposed_kernels() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> out;
  for (const std::string& full : g_kernels) {
    const auto op = find_aten(full);
    if (op && decomposition_of(*op)) out.push_back(full);
  }
  return out;
}

void forget_decisions_locked() {
  g_decided.clear();  // the decisions stay in g_store: a reader may hold one
  for (auto& slot : g_slots) slot.store(nullptr, std::memory_order_release);
}

// Installs the kernel list; returns the composites given a scope. Forgets earlier decisions.
std::vector<std::string> install(const std::vector<std::string>& kernels, const std::vector<std::string>& scoped,
                                 py::object resolver) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_kernels.clear();
    for (const std::string& k : kernels) g_kernels.insert(qualified(k));
    forget_decisions_locked();
    g_warned.clear();
    g_fallbacks.clear();
    if (g_resolver == nullptr) g_resolver = new py::object();
    *g_resolver = std::move(resolver);
  }
  auto registered = register_scopes(scoped);
  g_active.store(true);
  return registered;
}

void uninstall() {
  g_active.store(false);
  unregister_scopes();
  std::lock_guard<std::mutex> lock(g_mutex);
  forget_decisions_locked();
}

}  // namespace

// torch_npu's OPS_ERROR(ErrCode::NOT_SUPPORT) suffix.
std::string ops_not_supported_suffix() {
  const char* compact = std::getenv("TORCH_NPU_COMPACT_ERROR_OUTPUT");
  if (compact != nullptr && std::strtol(compact, nullptr, 10) != 0) return "";
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  const char* rank = std::getenv("RANK");
  std::ostringstream out;
  out << "\n[ERROR] " << std::put_time(&local, "%Y-%m-%d-%H:%M:%S") << " (PID:" << getpid()
      << ", Device:" << static_cast<int>(current_device()) << ", RankID:" << (rank ? std::strtol(rank, nullptr, 10) : -1)
      << ") ERR01007 OPS feature not supported";
  return out.str();
}

// Called by the emulator's fallback before every operator it runs.
void check_op_coverage(const c10::OperatorHandle& op) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  if (g_scopes_running.load(std::memory_order_relaxed) != 0) {
    const auto& scopes = thread_scopes();
    if (!scopes.empty()) {
      if (g_tracing.load(std::memory_order_relaxed)) trace(op, scopes.back());
      return;
    }
  }
  if (g_marked_nodes.load(std::memory_order_relaxed) != 0 && in_marked_backward()) return;
  const Decision* d = published(op);
  if (d == nullptr) d = decide(op);
  if (d != nullptr && d->verdict == Verdict::kRefused) refuse(d->reported);
}

void bind_op_coverage(py::module_& m) {
  m.def("op_coverage_install", &install, py::arg("kernels"), py::arg("scoped"), py::arg("resolver"));
  m.def("op_coverage_uninstall", &uninstall);
  m.def("op_coverage_active", [] { return g_active.load(); });
  m.def("op_coverage_set_active", [](bool on) { g_active.store(on); });
  m.def("op_coverage_fallbacks", [] {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_fallbacks;
  });
  m.def("op_coverage_decomposed_kernels", &decomposed_kernels);
  m.def("op_coverage_set_tracing", [](bool on) { g_tracing.store(on); });
  m.def("op_coverage_traced", [] {
    std::lock_guard<std::mutex> lock(g_mutex);
    return std::make_pair(std::vector<std::pair<std::string, std::string>>(g_traced.begin(), g_traced.end()),
                          std::vector<std::string>(g_entered.begin(), g_entered.end()));
  });
}

}  // namespace ascend_sim
