// Python bindings of the segment trees (the only file that knows about Python).
//
// Arrays cross the boundary as nb::ndarray (DLPack / buffer protocol), so numpy
// arrays and torch tensors are used in place; `noconvert` turns a wrong dtype
// or layout into an error instead of a silent copy. The Python wrapper in
// rl/cpp/_segment_tree.py gives the friendly errors and allocates outputs;
// these functions re-check everything that could touch memory out of bounds.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "prioritized.h"
#include "segment_tree.h"
#include "value_estimators.h"
#if defined(RL_CPP_WITH_CUDA)
#include "segment_tree_cuda.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <typename T, typename Device>
using In = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, Device>;
template <typename T, typename Device>
using Out = nb::ndarray<T, nb::ndim<1>, nb::c_contig, Device>;

using Release = nb::call_guard<nb::gil_scoped_release>;

void check_length(const char* name, size_t got, const char* reference, size_t expected) {
    if (got != expected) {
        throw std::invalid_argument(std::string(name) + " has " + std::to_string(got) +
                                    " elements, expected " + std::to_string(expected) +
                                    " (as many as " + reference + ")");
    }
}

template <typename T, typename Op>
void bind_cpu(nb::module_& m, const char* name) {
    using Tree = rlcpp::SegmentTree<T, Op>;
    using Dev = nb::device::cpu;
    auto cls = nb::class_<Tree>(m, name, "CPU segment tree (low level; use rl.cpp.*SegmentTree).");
    cls.def(nb::init<int64_t>(), "capacity"_a)
        .def_prop_ro("capacity", &Tree::capacity)
        .def(
            "update",
            [](Tree& t, In<int64_t, Dev> indices, In<T, Dev> values) {
                check_length("values", values.shape(0), "indices", indices.shape(0));
                t.update(indices.data(), values.data(), T(0), int64_t(indices.shape(0)));
            },
            "indices"_a.noconvert(), "values"_a.noconvert(), Release())
        .def(
            "update_fill",
            [](Tree& t, In<int64_t, Dev> indices, double value) {
                t.update(indices.data(), nullptr, T(value), int64_t(indices.shape(0)));
            },
            "indices"_a.noconvert(), "value"_a, Release())
        .def(
            "update_one",
            [](Tree& t, int64_t index, double value) { t.update(&index, nullptr, T(value), 1); },
            "index"_a, "value"_a)
        .def(
            "get",
            [](const Tree& t, In<int64_t, Dev> indices, Out<T, Dev> out) {
                check_length("out", out.shape(0), "indices", indices.shape(0));
                t.get(indices.data(), out.data(), int64_t(indices.shape(0)));
            },
            "indices"_a.noconvert(), "out"_a.noconvert(), Release())
        .def(
            "get_one",
            [](const Tree& t, int64_t index) {
                T out;
                t.get(&index, &out, 1);
                return double(out);
            },
            "index"_a)
        .def(
            "query",
            [](const Tree& t, In<int64_t, Dev> starts, In<int64_t, Dev> ends, Out<T, Dev> out) {
                check_length("end", ends.shape(0), "start", starts.shape(0));
                check_length("out", out.shape(0), "start", starts.shape(0));
                t.query(starts.data(), ends.data(), out.data(), int64_t(starts.shape(0)));
            },
            "starts"_a.noconvert(), "ends"_a.noconvert(), "out"_a.noconvert(), Release())
        .def(
            "query_one",
            [](const Tree& t, int64_t start, int64_t end) {
                T out;
                t.query(&start, &end, &out, 1);
                return double(out);
            },
            "start"_a, "end"_a)
        .def("root", [](const Tree& t) { return double(t.root()); })
        .def(
            "copy_leaves",
            [](const Tree& t, Out<T, Dev> out) {
                check_length("out", out.shape(0), "the capacity", size_t(t.capacity()));
                t.copy_leaves(out.data());
            },
            "out"_a.noconvert(), Release())
        .def(
            "load_leaves",
            [](Tree& t, In<T, Dev> values) {
                check_length("values", values.shape(0), "the capacity", size_t(t.capacity()));
                t.load_leaves(values.data());
            },
            "values"_a.noconvert(), Release());
    if constexpr (std::is_same_v<Op, rlcpp::SumOp>) {
        cls.def(
               "scan",
               [](const Tree& t, In<T, Dev> values, Out<int64_t, Dev> out) {
                   check_length("out", out.shape(0), "values", values.shape(0));
                   t.scan(values.data(), out.data(), int64_t(values.shape(0)));
               },
               "values"_a.noconvert(), "out"_a.noconvert(), Release())
            .def(
                "scan_one",
                [](const Tree& t, double value) {
                    const T v = T(value);
                    int64_t out = 0;
                    t.scan(&v, &out, 1);
                    return out;
                },
                "value"_a);
    }
}

#if defined(RL_CPP_WITH_CUDA)
template <typename Array>
void check_device(const char* name, const Array& a, int device) {
    if (a.device_id() != device) {
        throw std::invalid_argument(std::string(name) + " is on cuda:" +
                                    std::to_string(a.device_id()) + ", expected cuda:" +
                                    std::to_string(device) + " (the tree's device)");
    }
}

template <typename T, typename Op>
void bind_cuda(nb::module_& m, const char* name) {
    using Tree = rlcpp::CudaSegmentTree<T, Op>;
    using Dev = nb::device::cuda;
    using Host = nb::device::cpu;
    auto cls =
        nb::class_<Tree>(m, name, "CUDA segment tree (low level; use rl.cpp.*SegmentTree).");
    cls.def(nb::init<int64_t, int, std::uintptr_t>(), "capacity"_a, "device"_a, "stream"_a,
            Release())
        .def_prop_ro("capacity", &Tree::capacity)
        .def_prop_ro("device", &Tree::device)
        .def(
            "update",
            [](Tree& t, In<int64_t, Dev> indices, In<T, Dev> values, std::uintptr_t stream) {
                check_device("indices", indices, t.device());
                check_device("values", values, t.device());
                check_length("values", values.shape(0), "indices", indices.shape(0));
                t.update(indices.data(), values.data(), T(0), int64_t(indices.shape(0)), stream);
            },
            "indices"_a.noconvert(), "values"_a.noconvert(), "stream"_a, Release())
        .def(
            "update_fill",
            [](Tree& t, In<int64_t, Dev> indices, double value, std::uintptr_t stream) {
                check_device("indices", indices, t.device());
                t.update(indices.data(), nullptr, T(value), int64_t(indices.shape(0)), stream);
            },
            "indices"_a.noconvert(), "value"_a, "stream"_a, Release())
        .def("update_one", &Tree::update_one, "index"_a, "value"_a, "stream"_a, Release())
        .def(
            "get",
            [](Tree& t, In<int64_t, Dev> indices, Out<T, Dev> out, std::uintptr_t stream) {
                check_device("indices", indices, t.device());
                check_device("out", out, t.device());
                check_length("out", out.shape(0), "indices", indices.shape(0));
                t.get(indices.data(), out.data(), int64_t(indices.shape(0)), stream);
            },
            "indices"_a.noconvert(), "out"_a.noconvert(), "stream"_a, Release())
        .def("get_one", &Tree::get_one, "index"_a, "stream"_a, Release())
        .def(
            "query",
            [](Tree& t, In<int64_t, Dev> starts, In<int64_t, Dev> ends, Out<T, Dev> out,
               std::uintptr_t stream) {
                check_device("start", starts, t.device());
                check_device("end", ends, t.device());
                check_device("out", out, t.device());
                check_length("end", ends.shape(0), "start", starts.shape(0));
                check_length("out", out.shape(0), "start", starts.shape(0));
                t.query(starts.data(), ends.data(), out.data(), int64_t(starts.shape(0)), stream);
            },
            "starts"_a.noconvert(), "ends"_a.noconvert(), "out"_a.noconvert(), "stream"_a,
            Release())
        .def("query_one", &Tree::query_one, "start"_a, "end"_a, "stream"_a, Release())
        .def("root", &Tree::root, "stream"_a, Release())
        .def(
            "copy_leaves",
            [](Tree& t, Out<T, Host> out, std::uintptr_t stream) {
                check_length("out", out.shape(0), "the capacity", size_t(t.capacity()));
                t.copy_leaves(out.data(), stream);
            },
            "out"_a.noconvert(), "stream"_a, Release())
        .def(
            "load_leaves",
            [](Tree& t, In<T, Host> values, std::uintptr_t stream) {
                check_length("values", values.shape(0), "the capacity", size_t(t.capacity()));
                t.load_leaves(values.data(), stream);
            },
            "values"_a.noconvert(), "stream"_a, Release());
    if constexpr (std::is_same_v<Op, rlcpp::SumOp>) {
        cls.def(
               "scan",
               [](Tree& t, In<T, Dev> values, Out<int64_t, Dev> out, std::uintptr_t stream) {
                   check_device("values", values, t.device());
                   check_device("out", out, t.device());
                   check_length("out", out.shape(0), "values", values.shape(0));
                   t.scan(values.data(), out.data(), int64_t(values.shape(0)), stream);
               },
               "values"_a.noconvert(), "out"_a.noconvert(), "stream"_a, Release())
            .def("scan_one", &Tree::scan_one, "value"_a, "stream"_a, Release());
    }
}
#endif

// ---------------------------------------------------------------- value estimators
template <typename T>
using Arr3 = nb::ndarray<T, nb::ndim<3>, nb::device::cpu>;

std::string shape_str(size_t a, size_t b, size_t c) {
    return "(" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + ")";
}

template <typename A>
rlcpp::View3<typename std::remove_pointer_t<decltype(std::declval<A>().data())>> view3(
    const char* name, const A& a, const rlcpp::Dims3& d) {
    if (int64_t(a.shape(0)) != d.n || int64_t(a.shape(1)) != d.t || int64_t(a.shape(2)) != d.f) {
        throw std::invalid_argument(std::string(name) + " has shape " +
                                    shape_str(a.shape(0), a.shape(1), a.shape(2)) +
                                    ", expected " + shape_str(d.n, d.t, d.f) +
                                    " (the shape of reward, as [N, T, F])");
    }
    return {a.data(), a.stride(0), a.stride(1), a.stride(2)};
}

template <typename T>
void bind_value(nb::module_& m) {
    m.def(
        "gae",
        [](double gamma, double lmbda, Arr3<const T> value, Arr3<const T> next_value,
           Arr3<const T> reward, Arr3<const bool> done, Arr3<const bool> terminated,
           Arr3<T> advantage, Arr3<T> value_target) {
            const rlcpp::Dims3 d{int64_t(reward.shape(0)), int64_t(reward.shape(1)),
                                 int64_t(reward.shape(2))};
            auto v = view3("state_value", value, d);
            auto nv = view3("next_state_value", next_value, d);
            auto r = view3("reward", reward, d);
            auto dn = view3("done", done, d);
            auto tm = view3("terminated", terminated, d);
            auto adv = view3("advantage", advantage, d);
            auto tgt = view3("value_target", value_target, d);
            nb::gil_scoped_release release;
            rlcpp::gae<T>(d, T(gamma), T(lmbda), v, nv, r, dn, tm, adv, tgt);
        },
        "gamma"_a, "lmbda"_a, "state_value"_a.noconvert(), "next_state_value"_a.noconvert(),
        "reward"_a.noconvert(), "done"_a.noconvert(), "terminated"_a.noconvert(),
        "advantage"_a.noconvert(), "value_target"_a.noconvert(),
        "Generalized advantage estimate over [N, T, F] arrays (any strides), written into "
        "advantage and value_target.");
    m.def(
        "td_lambda_return",
        [](double gamma, double lmbda, Arr3<const T> next_value, Arr3<const T> reward,
           Arr3<const bool> done, Arr3<const bool> terminated, Arr3<T> out) {
            const rlcpp::Dims3 d{int64_t(reward.shape(0)), int64_t(reward.shape(1)),
                                 int64_t(reward.shape(2))};
            auto nv = view3("next_state_value", next_value, d);
            auto r = view3("reward", reward, d);
            auto dn = view3("done", done, d);
            auto tm = view3("terminated", terminated, d);
            auto o = view3("out", out, d);
            nb::gil_scoped_release release;
            rlcpp::td_lambda_return<T>(d, T(gamma), T(lmbda), nv, r, dn, tm, o);
        },
        "gamma"_a, "lmbda"_a, "next_state_value"_a.noconvert(), "reward"_a.noconvert(),
        "done"_a.noconvert(), "terminated"_a.noconvert(), "out"_a.noconvert(),
        "TD(lambda) return over [N, T, F] arrays (any strides), written into out.");
}

// ---------------------------------------------------------------- row gather
using AnyIn = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using AnyOut = nb::ndarray<nb::c_contig, nb::device::cpu>;

// The tables of a RowGather: checked once, kept alive by the arrays held here.
struct RowTables {
    std::vector<AnyIn> arrays;
    std::vector<rlcpp::RowTable> tables;

    explicit RowTables(const std::vector<AnyIn>& sources) : arrays(sources) {
        for (size_t t = 0; t < arrays.size(); ++t) {
            const AnyIn& a = arrays[t];
            if (a.ndim() < 1) {
                throw std::invalid_argument("table " + std::to_string(t) +
                                            " has no rows (a 0-dim array)");
            }
            int64_t row_bytes = a.itemsize();
            for (size_t d = 1; d < a.ndim(); ++d) row_bytes *= int64_t(a.shape(d));
            tables.push_back({static_cast<const char*>(a.data()), int64_t(a.shape(0)), row_bytes});
        }
    }

    int64_t rows() const {
        int64_t rows = tables.empty() ? 0 : INT64_MAX;
        for (const auto& t : tables) rows = std::min(rows, t.rows);
        return rows;
    }

    // The outputs' data pointers, after checking each against its table.
    std::vector<char*> outputs(const std::vector<AnyOut>& out, size_t n) const {
        check_length("out", out.size(), "the tables", tables.size());
        std::vector<char*> ptrs(out.size());
        for (size_t t = 0; t < out.size(); ++t) {
            const AnyOut& o = out[t];
            const AnyIn& a = arrays[t];
            int64_t row_bytes = o.itemsize();
            for (size_t d = 1; d < o.ndim(); ++d) row_bytes *= int64_t(o.shape(d));
            if (o.ndim() < 1 || o.shape(0) != n || o.dtype() != a.dtype() ||
                row_bytes != tables[t].row_bytes) {
                throw std::invalid_argument(
                    "out[" + std::to_string(t) + "] must hold " + std::to_string(n) +
                    " rows of " + std::to_string(tables[t].row_bytes) +
                    " bytes with the dtype of table " + std::to_string(t));
            }
            ptrs[t] = static_cast<char*>(o.data());
        }
        return ptrs;
    }
};

void bind_row_gather(nb::module_& m) {
    nb::class_<RowTables>(m, "RowTables", "Tables gathered by row (low level; use rl.cpp.RowGather).")
        .def(nb::init<const std::vector<AnyIn>&>(), "tables"_a)
        .def_prop_ro("rows", &RowTables::rows)
        .def("__len__", [](const RowTables& t) { return t.tables.size(); })
        .def(
            "gather",
            [](const RowTables& t, In<int64_t, nb::device::cpu> index,
               const std::vector<AnyOut>& out) {
                const std::vector<char*> ptrs = t.outputs(out, index.shape(0));
                const int64_t n = int64_t(index.shape(0));
                nb::gil_scoped_release release;
                rlcpp::check_rows(t.tables.data(), int64_t(t.tables.size()), index.data(), n);
                rlcpp::gather_rows(t.tables.data(), ptrs.data(), int64_t(t.tables.size()),
                                   index.data(), n);
            },
            "index"_a.noconvert(), "out"_a,
            "Copies row index[k] of table t to out[t][k] for every k and t.");
}

// ---------------------------------------------------------------- prioritized replay
template <typename T>
void bind_prioritized(nb::module_& m) {
    using Sum = rlcpp::SegmentTree<T, rlcpp::SumOp>;
    using Min = rlcpp::SegmentTree<T, rlcpp::MinOp>;
    using Dev = nb::device::cpu;
    m.def(
        "prioritized_sample",
        [](const Sum& sum, const Min& min, int64_t count, In<T, Dev> uniform, double beta,
           Out<int64_t, Dev> index, Out<float, Dev> weight) {
            check_length("index", index.shape(0), "uniform", uniform.shape(0));
            check_length("weight", weight.shape(0), "uniform", uniform.shape(0));
            return rlcpp::prioritized_sample<T>(sum, min, count, uniform.data(), beta,
                                                index.data(), weight.data(),
                                                int64_t(uniform.shape(0)));
        },
        "sum"_a, "min"_a, "count"_a, "uniform"_a.noconvert(), "beta"_a, "index"_a.noconvert(),
        "weight"_a.noconvert(), Release(),
        "Samples leaves among the first `count` from uniform(0, 1) numbers and writes their "
        "index and importance weight; returns the range's total (nothing written if <= 0).");
    m.def(
        "prioritized_sample_rows",
        [](const Sum& sum, const Min& min, int64_t count, In<T, Dev> uniform, double beta,
           Out<int64_t, Dev> index, Out<float, Dev> weight, const RowTables& tables,
           const std::vector<AnyOut>& out) {
            const size_t n = uniform.shape(0);
            check_length("index", index.shape(0), "uniform", n);
            check_length("weight", weight.shape(0), "uniform", n);
            const std::vector<char*> ptrs = tables.outputs(out, n);
            nb::gil_scoped_release release;
            return rlcpp::prioritized_sample<T>(sum, min, count, uniform.data(), beta,
                                                index.data(), weight.data(), int64_t(n),
                                                tables.tables.data(), ptrs.data(),
                                                int64_t(tables.tables.size()));
        },
        "sum"_a, "min"_a, "count"_a, "uniform"_a.noconvert(), "beta"_a, "index"_a.noconvert(),
        "weight"_a.noconvert(), "tables"_a, "out"_a,
        "prioritized_sample, then row index[k] of every table copied to out[t][k].");
    m.def(
        "prioritized_update",
        [](Sum& sum, Min& min, In<int64_t, Dev> indices, In<T, Dev> priority, double eps,
           double alpha) {
            check_length("priority", priority.shape(0), "indices", indices.shape(0));
            return rlcpp::prioritized_update<T>(sum, min, indices.data(), priority.data(),
                                                int64_t(indices.shape(0)), eps, alpha);
        },
        "sum"_a, "min"_a, "indices"_a.noconvert(), "priority"_a.noconvert(), "eps"_a, "alpha"_a,
        Release(),
        "Writes (priority + eps) ** alpha at indices in both trees; returns the largest "
        "priority.");
    // For callers that hold CPU tensors (torch's data_ptr() is ten times cheaper than a
    // numpy view or a DLPack import): the addresses of n contiguous int64 indices and n
    // priorities of the trees' dtype, which the caller guarantees. The GIL stays held,
    // so that no Python code can free or resize those arrays during the call; indices
    // and priorities are still checked before either tree changes.
    m.def(
        "prioritized_update_at",
        [](Sum& sum, Min& min, std::uintptr_t indices, std::uintptr_t priority, int64_t n,
           double eps, double alpha) {
            if (n < 0) throw std::invalid_argument("n must be >= 0, got " + std::to_string(n));
            if (n > 0 && (indices == 0 || priority == 0)) {
                throw std::invalid_argument("null address for a non-empty update");
            }
            return rlcpp::prioritized_update<T>(sum, min, reinterpret_cast<const int64_t*>(indices),
                                                reinterpret_cast<const T*>(priority), n, eps,
                                                alpha);
        },
        "sum"_a, "min"_a, "indices"_a, "priority"_a, "n"_a, "eps"_a, "alpha"_a,
        "prioritized_update on raw addresses of n contiguous int64 indices and n priorities "
        "of the trees' dtype (the caller guarantees them).");
}

}  // namespace

NB_MODULE(_C, m) {
    m.doc() = "rl.cpp compiled core: sum and min segment trees (CPU and, when built, CUDA).";
#if defined(RL_CPP_WITH_CUDA)
    m.def("cuda_compiled", []() { return true; }, "Whether the CUDA kernels were compiled in.");
    m.def("cuda_device_count", &rlcpp::cuda_device_count,
          "CUDA devices visible to this process (0 without a driver or device).");
    bind_cuda<float, rlcpp::SumOp>(m, "CudaSumTreeF32");
    bind_cuda<double, rlcpp::SumOp>(m, "CudaSumTreeF64");
    bind_cuda<float, rlcpp::MinOp>(m, "CudaMinTreeF32");
    bind_cuda<double, rlcpp::MinOp>(m, "CudaMinTreeF64");
#else
    m.def("cuda_compiled", []() { return false; }, "Whether the CUDA kernels were compiled in.");
    m.def("cuda_device_count", []() { return 0; },
          "CUDA devices visible to this process (0 without a driver or device).");
#endif
    bind_cpu<float, rlcpp::SumOp>(m, "SumTreeF32");
    bind_cpu<double, rlcpp::SumOp>(m, "SumTreeF64");
    bind_cpu<float, rlcpp::MinOp>(m, "MinTreeF32");
    bind_cpu<double, rlcpp::MinOp>(m, "MinTreeF64");
    bind_value<float>(m);
    bind_value<double>(m);
    bind_row_gather(m);
    bind_prioritized<float>(m);
    bind_prioritized<double>(m);
}
