// Error messages shared by the CPU and CUDA back-ends. The exception types map
// to Python ones through nanobind: std::out_of_range -> IndexError,
// std::invalid_argument -> ValueError.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace rlcpp {

inline std::string format_number(double v) {
    std::ostringstream s;
    s.precision(9);
    s << v;
    return s.str();
}

inline void check_capacity(int64_t capacity) {
    // 2**40 leaves is already 16 TiB of float64 nodes; the bound keeps the
    // power-of-two rounding and 2 * size node count far from overflow.
    if (capacity < 1 || capacity > (int64_t(1) << 40)) {
        throw std::invalid_argument("capacity must be an integer in [1, 2**40], got " +
                                    std::to_string(capacity));
    }
}

[[noreturn]] inline void throw_index_error(int64_t position, int64_t index, int64_t capacity) {
    throw std::out_of_range("index " + std::to_string(index) + " (at position " +
                            std::to_string(position) + ") is out of range for a tree of capacity " +
                            std::to_string(capacity) + "; expected 0 <= index < " +
                            std::to_string(capacity));
}

[[noreturn]] inline void throw_value_error(const char* op, int64_t position, double value) {
    const std::string expected = std::string(op) == "sum" ? "a finite value >= 0"
                                                          : "a value >= 0 (+inf clears a leaf)";
    throw std::invalid_argument("priority " + format_number(value) + " (at position " +
                                std::to_string(position) + ") is invalid for a " + op +
                                " tree; expected " + expected);
}

[[noreturn]] inline void throw_scan_error(int64_t position, double value) {
    throw std::invalid_argument("scan value " + format_number(value) + " (at position " +
                                std::to_string(position) +
                                ") is invalid; expected a value >= 0, such as uniform(0, 1) * total()");
}

// Every priority is zero: no leaf can be drawn (a scan would silently return 0).
[[noreturn]] inline void throw_empty_scan_error() {
    throw std::invalid_argument(
        "cannot scan a sum tree whose priorities are all zero (total 0); expected at least one "
        "priority > 0");
}

// The importance-sampling exponent of a prioritized draw.
inline void check_beta(double beta) {
    if (!(std::isfinite(beta) && beta >= 0.0)) {
        throw std::invalid_argument("beta must be a finite number >= 0, got " + format_number(beta));
    }
}

// The priority transform (priority + eps) ** alpha of a prioritized update.
inline void check_eps_alpha(double eps, double alpha) {
    if (!std::isfinite(eps)) {
        throw std::invalid_argument("eps must be a finite number, got " + format_number(eps));
    }
    if (!(std::isfinite(alpha) && alpha >= 0.0)) {
        throw std::invalid_argument("alpha must be a finite number >= 0, got " +
                                    format_number(alpha));
    }
}

[[noreturn]] inline void throw_range_error(int64_t position, int64_t start, int64_t end,
                                           int64_t capacity) {
    throw std::out_of_range("query range [" + std::to_string(start) + ", " + std::to_string(end) +
                            ") (at position " + std::to_string(position) +
                            ") is invalid for a tree of capacity " + std::to_string(capacity) +
                            "; expected 0 <= start <= end <= " + std::to_string(capacity));
}

}  // namespace rlcpp
