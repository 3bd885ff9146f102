// gradviz's optional native accelerator for the recorder's hot paths (see __init__.py).
//
// Two things cost a recorded step most when done from Python, on small models whose whole
// step is half a millisecond:
//   * reading every parameter's gradient norm (one Python call per parameter), and
//   * the per-node norms of a sampled step (a walk, a structure key, and a Python autograd
//     hook per node, each acquiring the GIL and wrapping tensors).
// Here both are C++: `grad_sq` reads the gradients' squared norms in one call, and
// `NodeNorms` walks the graph, keys its structure and places C++ pre-hooks (no GIL, no
// Python objects) that reduce each incoming gradient to its squared norm as it passes.
//
// Semantics match the Python paths exactly (tests compare them, and torch):
//   * node order is that of gradviz.core.walk.walk (depth-first, next_functions order);
//   * a node's value is the L2 norm of all gradients it received (a multi-output node:
//     of all of them together); a node that never ran gets `missing`;
//   * parameter leaves are not hooked (their norms come from p.grad), other leaves are.
#include <pybind11/numpy.h>
#include <torch/python.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <typeinfo>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;
using torch::autograd::Node;
using torch::autograd::variable_list;
// shared_ptr in older torch, intrusive_ptr in newer: whatever grad_fn() hands out
using NodePtr = std::decay_t<decltype(std::declval<at::Tensor>().grad_fn())>;

namespace {

// Sum of squares in blocks: float lanes inside a block (vectorised), blocks summed in double,
// so a 10M-element float gradient keeps ~1e-7 relative accuracy.
template <typename T>
double sum_sq(const T* p, int64_t n) {
  constexpr int64_t kBlock = 4096;
  double total = 0.0;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    T a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = start;
    for (; i + 8 <= end; i += 8) {
      for (int j = 0; j < 8; ++j) a[j] += p[i + j] * p[i + j];
    }
    double s = 0.0;
    for (int j = 0; j < 8; ++j) s += static_cast<double>(a[j]);
    for (; i < end; ++i) s += static_cast<double>(p[i]) * static_cast<double>(p[i]);
    total += s;
  }
  return total;
}

// Squared norm of a CPU float/double strided tensor read in memory order (a norm ignores
// element order, so a transposed gradient is not copied). False when not applicable.
bool host_sq(const at::Tensor& g, double* out) {
  if (!g.defined() || !g.device().is_cpu() || g.layout() != at::kStrided || g.is_neg() || g.is_conj()) {
    return false;
  }
  const auto st = g.scalar_type();
  if (st != at::kFloat && st != at::kDouble) return false;
  const int64_t n = g.numel();
  if (n == 0) {
    *out = 0.0;
    return true;
  }
  if (!g.is_non_overlapping_and_dense()) {
    // a slice: copy it dense first (rare: gradients are produced dense)
    at::Tensor c = g.contiguous();
    return host_sq(c, out);
  }
  // non-overlapping and dense with non-negative strides: element 0 is the lowest address and
  // the numel elements are one contiguous span
  if (st == at::kFloat) {
    *out = sum_sq(g.const_data_ptr<float>(), n);
  } else {
    *out = sum_sq(g.const_data_ptr<double>(), n);
  }
  return true;
}

// One sampled backward's results, shared by its hooks (which outlive it, inert, until the
// graph dies).
struct NormState {
  explicit NormState(size_t n) : sq(n, 0.0), ran(n, 0), dev(n) {}
  std::vector<double> sq;          // squared norm per node (host-computed)
  std::vector<char> ran;           // 1: host value, 2: device value in dev
  std::vector<at::Tensor> dev;     // 0-d float norms computed where the gradient lives
  std::atomic<bool> live{true};
};

struct NormPreHook : public torch::autograd::FunctionPreHook {
  NormPreHook(std::shared_ptr<NormState> state, size_t k) : state_(std::move(state)), k_(k) {}

  variable_list operator()(const variable_list& grads) override {
    NormState& st = *state_;
    if (!st.live.load(std::memory_order_relaxed)) return grads;
    try {
      measure(st, grads);
    } catch (const std::exception&) {
      st.ran[k_] = 0;          // a gradient we cannot reduce: no value, and never the user's error
    }
    return grads;
  }

 private:
  void measure(NormState& st, const variable_list& grads) {
    double total = 0.0;
    bool any = false;
    bool on_device = false;
    for (const auto& g : grads) {
      if (!g.defined()) continue;
      double s = 0.0;
      if (host_sq(g, &s)) {
        total += s;
        any = true;
      } else {
        on_device = true;
      }
    }
    if (on_device) {
      // another device or dtype: norms on that device (no sync), squared and summed there
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> parts;
      for (const auto& g : grads) {
        if (!g.defined()) continue;
        double s = 0.0;
        if (host_sq(g, &s)) continue;
        // a sparse gradient (an embedding's): the norm of its coalesced values
        const at::Tensor v = g.layout() == at::kSparse ? g.coalesce()._values()
                             : (g.layout() == at::kStrided ? g : g.to_dense());
        at::Tensor nrm = at::linalg_vector_norm(v, 2, c10::nullopt, false, at::kFloat);
        parts.push_back(nrm * nrm);
      }
      at::Tensor sq = parts.size() == 1 ? parts[0] : at::stack(parts).sum();
      if (any) sq = sq + total;
      st.dev[k_] = sq;
      st.ran[k_] = 2;
      return;
    }
    if (any) {
      st.sq[k_] = total;
      st.ran[k_] = 1;
    }
  }

  std::shared_ptr<NormState> state_;
  size_t k_;
};

inline uint64_t mix(uint64_t h, uint64_t v) {
  // FNV-1a over the 8 bytes of v (the key only has to tell structures apart within a process)
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t hash_string(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Parameters' gradients' squared norms, in the order given at construction.
class GradNorms {
 public:
  explicit GradNorms(std::vector<at::Tensor> params) : params_(std::move(params)) {}

  // A list of floats, or None when some gradient is missing or not a CPU float tensor (the
  // caller then takes its general path).
  py::object sq() const {
    py::list out(params_.size());
    size_t i = 0;
    for (const auto& p : params_) {
      const at::Tensor& g = p.grad();
      double s = 0.0;
      if (!host_sq(g, &s)) return py::none();
      out[i++] = py::float_(s);
    }
    return std::move(out);
  }

 private:
  std::vector<at::Tensor> params_;
};

// Open addressing from node address to walk index: a step's walk inserts every node once, and
// a node-based std::unordered_map would allocate per node.
class NodeIndex {
 public:
  void reset(size_t expected) {
    size_t cap = 64;
    while (cap < 2 * expected + 2) cap <<= 1;
    if (slots_.size() != cap) slots_.assign(cap, Slot{});
    else std::fill(slots_.begin(), slots_.end(), Slot{});
    mask_ = cap - 1;
    size_ = 0;
  }
  // index of `key`, or -1
  int64_t find(const Node* key) const {
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == nullptr) return -1;
    }
  }
  void insert(const Node* key, int64_t value) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == nullptr) {
        s.key = key;
        s.value = value;
        ++size_;
        return;
      }
    }
  }

 private:
  struct Slot {
    const Node* key = nullptr;
    int64_t value = -1;
  };
  static size_t hash(const Node* p) {
    uint64_t x = reinterpret_cast<uintptr_t>(p);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return static_cast<size_t>(x);
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != nullptr) insert(s.key, s.value);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// begin(root, arm_if_known=True) -> (key, n, armed): walk the root's graph and key its
// structure (keeping the nodes alive); when the key is one `learn` was told about, place the
// norm hooks at once. arm(): place them now. finish(missing) -> numpy float64 norms in walk
// order (drops the nodes). cancel(): drop the nodes without hooking.
class NodeNorms {
 public:
  explicit NodeNorms(const std::vector<at::Tensor>& params) {
    for (size_t i = 0; i < params.size(); ++i) param_index_[params[i].unsafeGetTensorImpl()] = static_cast<int64_t>(i);
  }

  py::tuple begin(const at::Tensor& root, bool arm_if_known) {
    cancel();
    const NodePtr& fn = root.grad_fn();
    if (!fn) return py::make_tuple(py::none(), 0, false);
    index_.reset(last_size_);
    stack_.clear();
    edges_.clear();
    nodes_.reserve(last_size_);
    stack_.push_back(fn.get());
    uint64_t h = 1469598103934665603ull;
    // the same order as gradviz.core.walk.walk: depth first, next_functions in order
    while (!stack_.empty()) {
      Node* raw = stack_.back();
      stack_.pop_back();
      if (index_.find(raw) >= 0) continue;
      const int64_t k = static_cast<int64_t>(nodes_.size());
      index_.insert(raw, k);
      h = mix(h, node_kind(raw));
      nodes_.push_back(raw->getptr());
      const auto& next = raw->next_edges();
      for (const auto& e : next) {
        if (e.function) edges_.push_back(Edge{e.function.get(), k, e.input_nr});
      }
      for (auto it = next.rbegin(); it != next.rend(); ++it) {
        if (it->function && index_.find(it->function.get()) < 0) stack_.push_back(it->function.get());
      }
    }
    h = mix(h, nodes_.size());
    for (const Edge& e : edges_) {
      h = mix(h, static_cast<uint64_t>(index_.find(e.producer)));
      h = mix(h, static_cast<uint64_t>(e.consumer));
      h = mix(h, e.input_nr);
    }
    last_size_ = nodes_.size();
    bool armed = false;
    if (arm_if_known && known_.count(h)) {
      arm();
      armed = true;
    }
    return py::make_tuple(py::int_(h), nodes_.size(), armed);
  }

  // structures that begin() may arm at once
  void learn(uint64_t key) { known_.insert(key); }
  void forget() { known_.clear(); }

  void arm() {
    const size_t n = nodes_.size();
    state_ = std::make_shared<NormState>(n);
    for (size_t k = 0; k < n; ++k) {
      Node* raw = nodes_[k].get();
      if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(raw)) {
        if (param_index_.count(acc->variable.unsafeGetTensorImpl())) continue;   // a parameter
      }
      raw->add_pre_hook(std::make_unique<NormPreHook>(state_, k));
    }
    ++hooks_placed_;
  }

  py::array_t<double> finish(double missing) {
    const size_t n = nodes_.size();
    py::array_t<double> out(static_cast<py::ssize_t>(n));
    double* v = out.mutable_data();
    std::shared_ptr<NormState> st = std::move(state_);
    nodes_.clear();
    if (!st) {
      for (size_t k = 0; k < n; ++k) v[k] = missing;
      return out;
    }
    st->live.store(false);
    std::vector<at::Tensor> dev;
    std::vector<size_t> at_k;
    for (size_t k = 0; k < n; ++k) {
      if (st->ran[k] == 1) {
        v[k] = std::sqrt(st->sq[k]);
      } else if (st->ran[k] == 2) {
        dev.push_back(st->dev[k]);
        at_k.push_back(k);
        v[k] = missing;
      } else {
        v[k] = missing;
      }
    }
    if (!dev.empty()) {
      at::Tensor host;
      {
        py::gil_scoped_release no_gil;       // one device sync for all device norms
        at::NoGradGuard no_grad;
        std::vector<at::Tensor> same;
        same.reserve(dev.size());
        for (const auto& t : dev) same.push_back(t.to(dev[0].device()).reshape({}));
        host = at::stack(same).to(at::kCPU, at::kDouble).contiguous();
      }
      const double* hv = host.const_data_ptr<double>();
      for (size_t i = 0; i < at_k.size(); ++i) v[at_k[i]] = std::sqrt(hv[i]);
    }
    return out;
  }

  void cancel() {
    nodes_.clear();
    state_.reset();
  }

  int64_t hooks_placed() const { return hooks_placed_; }

  // names of the nodes begin() walked, in walk order (tests check the order against
  // gradviz.core.walk; the GIL is held: a custom Function's name() is Python's)
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(nodes_.size());
    for (const auto& n : nodes_) out.push_back(n->name());
    return out;
  }

 private:
  struct Edge {
    const Node* producer;
    int64_t consumer;
    uint32_t input_nr;
  };

  // What identifies a node in the structure key: its C++ type, the Python class behind a
  // custom autograd.Function, and, for a leaf, which parameter it accumulates into.
  uint64_t node_kind(Node* raw) {
    uint64_t h = static_cast<uint64_t>(typeid(*raw).hash_code());
    if (std::strstr(typeid(*raw).name(), "PyNode") != nullptr) {   // PyNode's typeinfo is not exported
      h = mix(h, hash_string(raw->name()));          // (GIL held: called from Python)
    } else if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(raw)) {
      auto it = param_index_.find(acc->variable.unsafeGetTensorImpl());
      h = mix(h, it == param_index_.end() ? ~0ull : static_cast<uint64_t>(it->second));
    }
    return h;
  }

  std::unordered_map<const c10::TensorImpl*, int64_t> param_index_;
  std::unordered_set<uint64_t> known_;
  std::vector<NodePtr> nodes_;
  std::vector<Node*> stack_;
  std::vector<Edge> edges_;
  NodeIndex index_;
  size_t last_size_ = 16;
  std::shared_ptr<NormState> state_;
  int64_t hooks_placed_ = 0;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gradviz native accelerator: gradient norms and per-node norm hooks in C++";
  m.attr("ABI") = 1;
  py::class_<GradNorms>(m, "GradNorms")
      .def(py::init<std::vector<at::Tensor>>())
      .def("sq", &GradNorms::sq);
  py::class_<NodeNorms>(m, "NodeNorms")
      .def(py::init<const std::vector<at::Tensor>&>())
      .def("begin", &NodeNorms::begin, py::arg("root"), py::arg("arm_if_known") = true)
      .def("learn", &NodeNorms::learn)
      .def("forget", &NodeNorms::forget)
      .def("arm", &NodeNorms::arm)
      .def("finish", &NodeNorms::finish, py::arg("missing"))
      .def("cancel", &NodeNorms::cancel)
      .def("names", &NodeNorms::names)
      .def_property_readonly("hooks_placed", &NodeNorms::hooks_placed);
}
