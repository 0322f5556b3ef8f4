// CUDA segment tree (sum or min) whose nodes live in device memory.
//
// This header has no CUDA types in it, so the bindings compile with the plain
// C++ compiler; the kernels and the explicit instantiations are in
// segment_tree_cuda.cu. Streams are passed as integers (a cudaStream_t, e.g.
// torch.cuda.current_stream().cuda_stream; 0 is the legacy default stream).
//
// Batched operations validate on the device: a kernel records the first bad
// element in a small error record, the kernels that would write skip their
// work once it is set (so a bad batch leaves the tree unchanged), and the host
// reads the record back after the launch and raises. That read-back
// synchronizes the stream once per batched call.
#pragma once

#include <cstdint>
#include <mutex>

namespace rlcpp {

// Number of CUDA devices visible to this process; 0 when there is no driver or
// no device (never throws).
int cuda_device_count();

template <typename T, typename Op>
class CudaSegmentTree {
  public:
    CudaSegmentTree(int64_t capacity, int device, std::uintptr_t stream);
    ~CudaSegmentTree();
    CudaSegmentTree(const CudaSegmentTree&) = delete;
    CudaSegmentTree& operator=(const CudaSegmentTree&) = delete;

    int64_t capacity() const { return capacity_; }
    int device() const { return device_; }

    // Device pointers; values == nullptr broadcasts `fill`.
    void update(const int64_t* indices, const T* values, T fill, int64_t n, std::uintptr_t stream);
    void get(const int64_t* indices, T* out, int64_t n, std::uintptr_t stream);
    void query(const int64_t* starts, const int64_t* ends, T* out, int64_t n, std::uintptr_t stream);
    void scan(const T* values, int64_t* out, int64_t n, std::uintptr_t stream);

    // Scalar operations; they validate on the host and synchronize the stream.
    void update_one(int64_t index, T value, std::uintptr_t stream);
    T get_one(int64_t index, std::uintptr_t stream);
    T query_one(int64_t start, int64_t end, std::uintptr_t stream);
    int64_t scan_one(T value, std::uintptr_t stream);
    T root(std::uintptr_t stream);

    // Host pointers to `capacity` values.
    void copy_leaves(T* host_out, std::uintptr_t stream);
    void load_leaves(const T* host_values, std::uintptr_t stream);

  private:
    void raise_if_error(std::uintptr_t stream);
    void rebuild_levels(std::uintptr_t stream);

    int64_t capacity_;
    int64_t size_;
    int depth_;
    int device_;
    T* tree_ = nullptr;             // 2 * size_ nodes
    int32_t* owner_ = nullptr;      // per leaf: last batch position writing it, or -1
    void* error_ = nullptr;         // device error record
    void* host_scratch_ = nullptr;  // pinned host memory for read-backs
    void* dev_scratch_ = nullptr;   // device memory for scalar results
    std::mutex mutex_;
};

}  // namespace rlcpp
