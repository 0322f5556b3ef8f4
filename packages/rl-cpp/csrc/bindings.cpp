#include <nanobind/nanobind.h>

namespace nb = nanobind;

NB_MODULE(_C, m) {
    m.doc() = "rl.cpp compiled core";
    m.def("cuda_available_at_build", []() { return false; });
}
