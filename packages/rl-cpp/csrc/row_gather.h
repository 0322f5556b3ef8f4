// Gathering the same rows of several tables into fresh outputs in one pass.
//
// A replay buffer keeps each entry of its items (observation, action, reward,
// ...) in its own table; a batch reads one random row of every table per item.
// Each of those rows is a cache miss, and a loop over one table at a time
// waits for them one table at a time. Here every row of item k + kAhead is
// requested (software prefetch, all tables) before item k is copied, so the
// misses of several items and tables are in flight together.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "segment_tree.h"

namespace rlcpp {

// One table: row r holds `row_bytes` bytes from data + r * row_bytes.
struct RowTable {
    const char* data;
    int64_t rows;
    int64_t row_bytes;
};

inline void copy_row(char* dst, const char* src, int64_t bytes) {
    // Fixed sizes compile to single moves; most entries are one of these.
    switch (bytes) {
        case 1: std::memcpy(dst, src, 1); return;
        case 4: std::memcpy(dst, src, 4); return;
        case 8: std::memcpy(dst, src, 8); return;
        default: std::memcpy(dst, src, size_t(bytes));
    }
}

inline void prefetch_row(const char* p, int64_t bytes) {
    if (bytes <= 0) return;
    const uintptr_t first = uintptr_t(p) & ~uintptr_t(63);
    const uintptr_t last = (uintptr_t(p) + uintptr_t(bytes) - 1) & ~uintptr_t(63);
    for (uintptr_t line = first; line <= last; line += 64) {
        prefetch(reinterpret_cast<const void*>(line));
    }
}

// Raises IndexError unless every index lies in [0, rows) of every table.
inline void check_rows(const RowTable* tables, int64_t n_tables, const int64_t* index, int64_t n) {
    int64_t rows = INT64_MAX;
    for (int64_t t = 0; t < n_tables; ++t) rows = std::min(rows, tables[t].rows);
    for (int64_t k = 0; k < n; ++k) {
        if (static_cast<uint64_t>(index[k]) >= static_cast<uint64_t>(rows)) {
            throw std::out_of_range("row index " + std::to_string(index[k]) + " (at position " +
                                    std::to_string(k) + ") is out of range for tables of " +
                                    std::to_string(rows) + " rows; expected 0 <= index < " +
                                    std::to_string(rows));
        }
    }
}

// out[t] + k * row_bytes receives row index[k] of table t, for every k and t.
// The caller checks the indices (check_rows) and the outputs' sizes.
inline void gather_rows(const RowTable* tables, char* const* out, int64_t n_tables,
                        const int64_t* index, int64_t n) {
    constexpr int64_t kAhead = 8;
    for (int64_t k = 0; k < n + kAhead; ++k) {
        if (k < n) {
            for (int64_t t = 0; t < n_tables; ++t) {
                const int64_t bytes = tables[t].row_bytes;
                prefetch_row(tables[t].data + index[k] * bytes, bytes);
            }
        }
        const int64_t j = k - kAhead;
        if (j < 0) continue;
        for (int64_t t = 0; t < n_tables; ++t) {
            const int64_t bytes = tables[t].row_bytes;
            copy_row(out[t] + j * bytes, tables[t].data + index[j] * bytes, bytes);
        }
    }
}

}  // namespace rlcpp
