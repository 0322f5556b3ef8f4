// Error messages shared by the CPU and CUDA back-ends. The exception types map
// to Python ones through nanobind: std::out_of_range -> IndexError,
// std::invalid_argument -> ValueError.
#pragma once

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

[[noreturn]] inline void throw_range_error(int64_t position, int64_t start, int64_t end,
                                           int64_t capacity) {
    throw std::out_of_range("query range [" + std::to_string(start) + ", " + std::to_string(end) +
                            ") (at position " + std::to_string(position) +
                            ") is invalid for a tree of capacity " + std::to_string(capacity) +
                            "; expected 0 <= start <= end <= " + std::to_string(capacity));
}

}  // namespace rlcpp
