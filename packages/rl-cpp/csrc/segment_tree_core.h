// Segment-tree algorithms shared by the CPU and CUDA back-ends.
//
// The tree is an implicit binary heap over a power-of-two number of leaves:
// node 1 is the root, node n has children 2n and 2n+1, leaf i sits at node
// size + i. Leaves past the capacity hold the operation's identity (0 for the
// sum, +inf for the min), so they never change a reduction. Everything here is
// plain C++ on raw pointers (no Python, no CUDA runtime) so that the same code
// runs on the host and inside CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define RLCPP_HD __host__ __device__ __forceinline__
#else
#define RLCPP_HD inline
#endif

namespace rlcpp {

// Sum reduction; its identity is zero.
struct SumOp {
    static constexpr const char* name = "sum";
    template <typename T>
    static RLCPP_HD T identity() {
        return T(0);
    }
    template <typename T>
    static RLCPP_HD T apply(T a, T b) {
        return a + b;
    }
    // A sum tree only holds finite, non-negative priorities: an infinite leaf
    // would make every prefix sum infinite and sampling meaningless.
    template <typename T>
    static RLCPP_HD bool valid(T v) {
        return v >= T(0) && v <= std::numeric_limits<T>::max();
    }
};

// Min reduction; its identity is +inf (an empty range has minimum +inf).
struct MinOp {
    static constexpr const char* name = "min";
    template <typename T>
    static RLCPP_HD T identity() {
        return std::numeric_limits<T>::infinity();
    }
    template <typename T>
    static RLCPP_HD T apply(T a, T b) {
        return b < a ? b : a;
    }
    // +inf is the identity, so it is a legal way to clear a leaf.
    template <typename T>
    static RLCPP_HD bool valid(T v) {
        return v >= T(0);  // false for NaN and negatives
    }
};

// Smallest power of two that is >= capacity (capacity >= 1).
inline int64_t leaf_count(int64_t capacity) {
    int64_t size = 1;
    while (size < capacity) size <<= 1;
    return size;
}

// Reduction of the leaves [start, end) (half-open); the caller checks
// 0 <= start <= end <= capacity. An empty range gives the identity.
template <typename Op, typename T>
RLCPP_HD T range_reduce(const T* tree, int64_t size, int64_t start, int64_t end) {
    T left = Op::template identity<T>();
    T right = Op::template identity<T>();
    int64_t lo = start + size;
    int64_t hi = end + size;
    while (lo < hi) {
        if (lo & 1) left = Op::apply(left, tree[lo++]);
        if (hi & 1) right = Op::apply(tree[--hi], right);
        lo >>= 1;
        hi >>= 1;
    }
    return Op::apply(left, right);
}

// One step of the prefix-sum descent from `node` (an inner node) with the
// remaining mass `value`: go left while the left subtree holds more than
// `value`, otherwise subtract it and go right. When rounding left `value` at or
// above this subtree's sum, the right child is taken only if it holds mass, so
// the walk ends on the last leaf with a nonzero priority instead of on padding.
template <typename T>
RLCPP_HD int64_t descend_step(const T* tree, int64_t node, T& value) {
    // Branch-free: the direction is random, so a branch would mispredict half
    // the time and stall the interleaved walks of the CPU tree.
    const int64_t left = 2 * node;
    const T left_sum = tree[left];
    // Leaves are finite, so the product is exact (0 or left_sum).
    const int64_t right = int64_t(!(left_sum > value)) & int64_t(tree[left + 1] > T(0));
    value -= left_sum * T(right);
    return left + right;
}

// Smallest leaf i with prefix_sum(0..i] > value (see descend_step for values
// at or above the total).
template <typename T>
RLCPP_HD int64_t scan_lower_bound(const T* tree, int64_t size, T value) {
    int64_t node = 1;
    while (node < size) node = descend_step(tree, node, value);
    return node - size;
}

// Scan values must be non-negative numbers (NaN and negatives are rejected).
template <typename T>
RLCPP_HD bool valid_scan_value(T v) {
    return v >= T(0);
}

}  // namespace rlcpp
