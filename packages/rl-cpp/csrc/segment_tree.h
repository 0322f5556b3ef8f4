// CPU segment tree (sum or min) over float or double priorities.
//
// Batched operations validate their whole input before touching the tree, so a
// bad batch raises and leaves the tree unchanged. Walks over the tree are
// interleaved across a small group of lanes, level by level: the lanes' loads
// are independent, so the CPU overlaps their cache misses on large trees.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "errors.h"
#include "segment_tree_core.h"

namespace rlcpp {

inline void prefetch(const void* address) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(address);
#else
    (void)address;
#endif
}

// Recomputes the ancestors of the leaves `indices` (already written) in the
// binary tree `a` (and, unless null, in `b`, a tree of the same shape): a tree
// of `size` leaves, `depth` levels. The paths climb together in groups of
// lanes, level by level, so that their misses overlap; each group recomputes
// its paths bottom-up after all leaves were written, and the last group
// touching a node recomputes it after its children, so shared ancestors end up
// exact. The top `cut` levels, which nearly every path of a large batch
// crosses, are rebuilt once from the level below them instead (2^cut - 1 nodes
// rather than n * cut).
template <typename OpA, typename OpB, typename T>
void refresh_paths(T* a, T* b, int64_t size, int64_t depth, const int64_t* indices, int64_t n) {
    constexpr int64_t kLanes = 64;
    int64_t cut = 0;
    while (cut < depth && (int64_t(2) << cut) <= n) ++cut;
    const int64_t climb = depth - cut;
    int64_t nodes[kLanes];
    for (int64_t base = 0; base < n; base += kLanes) {
        const int64_t lanes = std::min(kLanes, n - base);
        for (int64_t j = 0; j < lanes; ++j) nodes[j] = size + indices[base + j];
        for (int64_t level = 0; level < climb; ++level) {
            for (int64_t j = 0; j < lanes; ++j) {
                const int64_t node = nodes[j] >> 1;
                a[node] = OpA::apply(a[2 * node], a[2 * node + 1]);
                if (b) b[node] = OpB::apply(b[2 * node], b[2 * node + 1]);
                nodes[j] = node;
            }
        }
    }
    if (n == 0) return;
    for (int64_t node = (int64_t(1) << cut) - 1; node >= 1; --node) {
        a[node] = OpA::apply(a[2 * node], a[2 * node + 1]);
        if (b) b[node] = OpB::apply(b[2 * node], b[2 * node + 1]);
    }
}

template <typename T, typename Op>
class SegmentTree {
  public:
    static constexpr int64_t kLanes = 64;

    explicit SegmentTree(int64_t capacity) : capacity_(capacity) {
        check_capacity(capacity);
        size_ = leaf_count(capacity);
        depth_ = 0;
        while ((int64_t(1) << depth_) < size_) ++depth_;
        tree_.assign(static_cast<size_t>(2 * size_), Op::template identity<T>());
    }

    int64_t capacity() const { return capacity_; }

    // Sets leaves[indices[k]] = values[k] (or `fill` when values is null); with
    // repeated indices the last occurrence wins.
    void update(const int64_t* indices, const T* values, T fill, int64_t n) {
        // A broadcast value is checked first (as the CUDA tree does on the host),
        // then every index, then every value.
        if (values == nullptr && !Op::valid(fill)) throw_value_error(Op::name, 0, double(fill));
        check_indices(indices, n);
        if (values != nullptr) {
            for (int64_t k = 0; k < n; ++k) {
                if (!Op::valid(values[k])) throw_value_error(Op::name, k, double(values[k]));
            }
        }
        std::lock_guard<std::mutex> lock(mutex_);
        T* tree = tree_.data();
        // Ask for every leaf line first: the writes then overlap their misses.
        for (int64_t k = 0; k < n; ++k) prefetch(tree + size_ + indices[k]);
        for (int64_t k = 0; k < n; ++k) tree[size_ + indices[k]] = values ? values[k] : fill;
        refresh_paths<Op, Op>(tree, static_cast<T*>(nullptr), size_, depth_, indices, n);
    }

    void get(const int64_t* indices, T* out, int64_t n) const {
        check_indices(indices, n);
        std::lock_guard<std::mutex> lock(mutex_);
        for (int64_t k = 0; k < n; ++k) out[k] = tree_[size_ + indices[k]];
    }

    void query(const int64_t* starts, const int64_t* ends, T* out, int64_t n) const {
        for (int64_t k = 0; k < n; ++k) check_range(k, starts[k], ends[k]);
        std::lock_guard<std::mutex> lock(mutex_);
        for (int64_t k = 0; k < n; ++k) {
            out[k] = range_reduce<Op>(tree_.data(), size_, starts[k], ends[k]);
        }
    }

    // Prefix-sum search (meaningful for the sum tree only); a tree whose leaves are
    // all zero has nothing to draw and raises.
    void scan(const T* values, int64_t* out, int64_t n) const {
        for (int64_t k = 0; k < n; ++k) {
            if (!valid_scan_value(values[k])) throw_scan_error(k, double(values[k]));
        }
        std::lock_guard<std::mutex> lock(mutex_);
        const T* tree = tree_.data();
        if (n > 0 && !(tree[1] > T(0))) throw_empty_scan_error();
        int64_t nodes[kLanes];
        T rest[kLanes];
        for (int64_t base = 0; base < n; base += kLanes) {
            const int64_t lanes = std::min(kLanes, n - base);
            for (int64_t j = 0; j < lanes; ++j) {
                nodes[j] = 1;
                rest[j] = values[base + j];
            }
            for (int64_t level = 0; level < depth_; ++level) {
                const bool more = level + 1 < depth_;
                for (int64_t j = 0; j < lanes; ++j) {
                    nodes[j] = descend_step(tree, nodes[j], rest[j]);
                    // The next step of this lane reads the children of its new
                    // node: ask for that line now, while the other lanes run.
                    if (more) prefetch(tree + 2 * nodes[j]);
                }
            }
            for (int64_t j = 0; j < lanes; ++j) out[base + j] = nodes[j] - size_;
        }
    }

    // The fused sampling step of a prioritized replay buffer: value k is
    // uniform[k] * scale, its leaf is clamped to at most `last` (a scan past the
    // valid items after rounding) and written to out with its priority.
    void scan_scaled(const T* uniform, T scale, int64_t last, int64_t* out, T* leaves,
                     int64_t n) const {
        for (int64_t k = 0; k < n; ++k) {
            if (!valid_scan_value(uniform[k])) throw_scan_error(k, double(uniform[k]));
        }
        std::lock_guard<std::mutex> lock(mutex_);
        const T* tree = tree_.data();
        int64_t nodes[kLanes];
        T rest[kLanes];
        for (int64_t base = 0; base < n; base += kLanes) {
            const int64_t lanes = std::min(kLanes, n - base);
            for (int64_t j = 0; j < lanes; ++j) {
                nodes[j] = 1;
                rest[j] = uniform[base + j] * scale;
            }
            for (int64_t level = 0; level < depth_; ++level) {
                const bool more = level + 1 < depth_;
                for (int64_t j = 0; j < lanes; ++j) {
                    nodes[j] = descend_step(tree, nodes[j], rest[j]);
                    if (more) prefetch(tree + 2 * nodes[j]);
                }
            }
            for (int64_t j = 0; j < lanes; ++j) {
                const int64_t leaf = std::min(nodes[j] - size_, last);
                out[base + j] = leaf;
                leaves[base + j] = tree[size_ + leaf];
            }
        }
    }

    // Raw access for operations fused over several trees (prioritized.h): the
    // caller validates its input and holds mutex() while it reads or writes.
    T* nodes() { return tree_.data(); }
    int64_t leaf_offset() const { return size_; }
    int64_t depth() const { return depth_; }
    std::mutex& mutex() const { return mutex_; }

    void check_indices(const int64_t* indices, int64_t n) const {
        for (int64_t k = 0; k < n; ++k) {
            // One unsigned comparison rejects negatives and indices >= capacity.
            if (static_cast<uint64_t>(indices[k]) >= static_cast<uint64_t>(capacity_)) {
                throw_index_error(k, indices[k], capacity_);
            }
        }
    }

    T root() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return tree_[1];
    }

    void copy_leaves(T* out) const {
        std::lock_guard<std::mutex> lock(mutex_);
        std::memcpy(out, tree_.data() + size_, sizeof(T) * size_t(capacity_));
    }

    // Replaces every leaf and rebuilds the inner nodes in O(capacity).
    void load_leaves(const T* values) {
        for (int64_t k = 0; k < capacity_; ++k) {
            if (!Op::valid(values[k])) throw_value_error(Op::name, k, double(values[k]));
        }
        std::lock_guard<std::mutex> lock(mutex_);
        std::memcpy(tree_.data() + size_, values, sizeof(T) * size_t(capacity_));
        for (int64_t node = size_ - 1; node >= 1; --node) {
            tree_[node] = Op::apply(tree_[2 * node], tree_[2 * node + 1]);
        }
    }

  private:
    void check_range(int64_t k, int64_t start, int64_t end) const {
        if (start < 0 || end < start || end > capacity_) throw_range_error(k, start, end, capacity_);
    }

    int64_t capacity_;
    int64_t size_;
    int64_t depth_;
    std::vector<T> tree_;
    mutable std::mutex mutex_;
};

}  // namespace rlcpp
