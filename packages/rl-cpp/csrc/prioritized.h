// The two steps of prioritized experience replay on a pair of CPU trees, each
// in one call: sampling (total and minimum, scan, priorities, importance
// weights) and updating (priority transform, both trees, largest priority).
// One call instead of a dozen array operations is what makes the replay
// buffer's step cost close to the trees' own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "errors.h"
#include "row_gather.h"
#include "segment_tree.h"

namespace rlcpp {

// Draws n leaves among the first `count` with probability p_i / sum_{j<count} p_j
// from uniform(0, 1) numbers, and their importance weights
// (p_i / min_{j<count} p_j) ** -beta; with a zero minimum the weights are
// normalised by the largest one of the batch. Returns the total mass of the
// range; nothing is written when it is not positive.
//
// With `tables` (n_tables of them), row index[k] of table t is also copied to
// out[t] + k * row_bytes (row_gather.h): the batch's data comes out of the
// same call. Every table must hold at least `count` rows.
template <typename T>
double prioritized_sample(const SegmentTree<T, SumOp>& sum, const SegmentTree<T, MinOp>& min,
                          int64_t count, const T* uniform, double beta, int64_t* index,
                          float* weight, int64_t n, const RowTable* tables = nullptr,
                          char* const* out = nullptr, int64_t n_tables = 0) {
    if (count < 1 || count > sum.capacity() || count > min.capacity()) {
        throw_range_error(0, 0, count, std::min(sum.capacity(), min.capacity()));
    }
    check_beta(beta);
    for (int64_t t = 0; t < n_tables; ++t) {
        if (tables[t].rows < count) {
            throw std::out_of_range("table " + std::to_string(t) + " holds " +
                                    std::to_string(tables[t].rows) + " rows, fewer than the " +
                                    std::to_string(count) + " leaves sampled from");
        }
    }
    const int64_t zero = 0;
    T total, lowest;
    sum.query(&zero, &count, &total, 1);
    min.query(&zero, &count, &lowest, 1);
    if (!(total > T(0))) return double(total);
    std::vector<T> leaves(static_cast<size_t>(n));
    sum.scan_scaled(uniform, total, count - 1, index, leaves.data(), n);
    const T exponent = T(-beta);
    if (lowest > T(0)) {
        for (int64_t k = 0; k < n; ++k) weight[k] = float(std::pow(leaves[k] / lowest, exponent));
    } else {
        T largest = T(0);
        for (int64_t k = 0; k < n; ++k) {
            leaves[k] = std::pow(leaves[k], exponent);
            largest = std::max(largest, leaves[k]);
        }
        for (int64_t k = 0; k < n; ++k) weight[k] = float(leaves[k] / largest);
    }
    if (n_tables > 0) gather_rows(tables, out, n_tables, index, n);
    return double(total);
}

// Writes (priority + eps) ** alpha at `indices` in both trees and returns the
// largest priority. Priorities must be finite and >= 0 and indices in range:
// otherwise it raises before either tree changes. Trees of the same capacity
// are walked together (one pass over the paths, both trees' misses in flight).
template <typename T>
double prioritized_update(SegmentTree<T, SumOp>& sum, SegmentTree<T, MinOp>& min,
                          const int64_t* indices, const T* priority, int64_t n, double eps,
                          double alpha) {
    check_eps_alpha(eps, alpha);
    std::vector<T> values(static_cast<size_t>(n));
    T largest = T(0);
    const T e = T(eps), a = T(alpha);
    for (int64_t k = 0; k < n; ++k) {
        const T p = priority[k];
        if (!SumOp::valid(p)) throw_value_error(SumOp::name, k, double(p));
        largest = std::max(largest, p);
        values[k] = alpha == 1.0 ? p + e : std::pow(p + e, a);
    }
    if (sum.capacity() != min.capacity()) {
        // both trees' checks before either changes (an index may fit one tree only)
        sum.check_indices(indices, n);
        min.check_indices(indices, n);
        sum.update(indices, values.data(), T(0), n);
        min.update(indices, values.data(), T(0), n);
        return double(largest);
    }
    sum.check_indices(indices, n);
    for (int64_t k = 0; k < n; ++k) {
        // (p + eps) ** alpha can overflow to +inf, which a sum tree refuses
        if (!SumOp::valid(values[k])) throw_value_error(SumOp::name, k, double(values[k]));
    }
    std::scoped_lock lock(sum.mutex(), min.mutex());
    T* s = sum.nodes();
    T* m = min.nodes();
    const int64_t size = sum.leaf_offset(), depth = sum.depth();
    for (int64_t k = 0; k < n; ++k) {
        prefetch(s + size + indices[k]);
        prefetch(m + size + indices[k]);
    }
    for (int64_t k = 0; k < n; ++k) {
        s[size + indices[k]] = values[k];
        m[size + indices[k]] = values[k];
    }
    refresh_paths<SumOp, MinOp>(s, m, size, depth, indices, n);
    return double(largest);
}

}  // namespace rlcpp
