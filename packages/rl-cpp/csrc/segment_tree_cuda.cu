// CUDA kernels of the segment trees; see segment_tree_cuda.h for the contract.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "errors.h"
#include "segment_tree_core.h"
#include "segment_tree_cuda.h"

namespace rlcpp {
namespace {

#define RLCPP_CUDA_CHECK(expr)                                                                   \
    do {                                                                                         \
        const cudaError_t rlcpp_err_ = (expr);                                                   \
        if (rlcpp_err_ != cudaSuccess) {                                                         \
            throw std::runtime_error(std::string("CUDA error in " #expr ": ") +                  \
                                     cudaGetErrorString(rlcpp_err_));                            \
        }                                                                                        \
    } while (0)

constexpr int kThreads = 256;
constexpr int kFusedThreads = 1024;
// Batches up to this size are updated by one block that walks all levels with
// block barriers (one launch); larger ones launch one kernel per level.
constexpr int64_t kFusedMaxBatch = 8192;

enum ErrorCode : int { kIndex = 1, kValue = 2, kScan = 3, kRange = 4, kEmpty = 5 };

// One slot per error kind, so that the host can raise the same error the CPU
// tree raises (index errors before value errors) whatever thread came first.
struct ErrorSlot {
    int set;
    int pad;
    long long position;
    long long first;   // offending index, or range start
    long long second;  // range end
    double value;      // offending priority or scan value
};

struct ErrorRecord {
    int any;
    int pad;
    ErrorSlot slots[6];  // indexed by ErrorCode
};

constexpr size_t kScratchBytes = 256;
static_assert(sizeof(ErrorRecord) <= kScratchBytes, "error record must fit the host scratch");

cudaStream_t as_stream(std::uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

int blocks_for(int64_t n) {
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    return static_cast<int>(blocks < 65535 ? blocks : 65535);
}

// Makes `device` current for the lifetime of the guard and restores the
// caller's device afterwards (torch and this runtime share the context).
class DeviceGuard {
  public:
    explicit DeviceGuard(int device) : device_(device) {
        RLCPP_CUDA_CHECK(cudaGetDevice(&previous_));
        if (previous_ != device_) RLCPP_CUDA_CHECK(cudaSetDevice(device_));
    }
    ~DeviceGuard() {
        if (previous_ != device_) cudaSetDevice(previous_);
    }

  private:
    int device_;
    int previous_ = 0;
};

__device__ void report(ErrorRecord* err, int code, int64_t position, int64_t first,
                       int64_t second, double value) {
    ErrorSlot& slot = err->slots[code];
    if (atomicCAS(&slot.set, 0, 1) == 0) {
        slot.position = position;
        slot.first = first;
        slot.second = second;
        slot.value = value;
    }
    atomicExch(&err->any, 1);
}

__device__ __forceinline__ bool failed(const ErrorRecord* err) {
    return *reinterpret_cast<const volatile int*>(&err->any) != 0;
}

template <typename T, typename Op>
__device__ bool check_update(int64_t k, const int64_t* indices, const T* values,
                             int64_t capacity, ErrorRecord* err) {
    const int64_t i = indices[k];
    if (static_cast<uint64_t>(i) >= static_cast<uint64_t>(capacity)) {
        report(err, kIndex, k, i, 0, 0.0);
        return false;
    }
    if (values != nullptr && !Op::valid(values[k])) {
        report(err, kValue, k, 0, 0, static_cast<double>(values[k]));
        return false;
    }
    return true;
}

template <typename T, typename Op>
__global__ void fused_update_kernel(T* tree, int32_t* owner, int64_t size, int64_t capacity,
                                    int depth, const int64_t* indices, const T* values, T fill,
                                    int64_t n, ErrorRecord* err) {
    int bad = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        if (!check_update<T, Op>(k, indices, values, capacity, err)) bad = 1;
    }
    if (__syncthreads_or(bad)) return;  // nothing written: the tree is unchanged
    // The largest batch position claiming a leaf wins, as in a sequential loop.
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        atomicMax(&owner[indices[k]], static_cast<int32_t>(k));
    }
    __syncthreads();
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        const int64_t i = indices[k];
        if (owner[i] == static_cast<int32_t>(k)) tree[size + i] = values ? values[k] : fill;
    }
    __syncthreads();
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) owner[indices[k]] = -1;
    for (int level = 1; level <= depth; ++level) {
        __syncthreads();
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            const int64_t node = (size + indices[k]) >> level;
            tree[node] = Op::apply(tree[2 * node], tree[2 * node + 1]);
        }
    }
}

template <typename T, typename Op>
__global__ void validate_update_kernel(const int64_t* indices, const T* values, int64_t capacity,
                                       int64_t n, ErrorRecord* err) {
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x) {
        check_update<T, Op>(k, indices, values, capacity, err);
    }
}

__global__ void claim_kernel(int32_t* owner, const int64_t* indices, int64_t n,
                             const ErrorRecord* err) {
    if (failed(err)) return;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x) {
        atomicMax(&owner[indices[k]], static_cast<int32_t>(k));
    }
}

template <typename T>
__global__ void write_kernel(T* tree, const int32_t* owner, int64_t size, const int64_t* indices,
                             const T* values, T fill, int64_t n, const ErrorRecord* err) {
    if (failed(err)) return;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = indices[k];
        if (owner[i] == static_cast<int32_t>(k)) tree[size + i] = values ? values[k] : fill;
    }
}

__global__ void release_kernel(int32_t* owner, const int64_t* indices, int64_t n,
                               const ErrorRecord* err) {
    if (failed(err)) return;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x) {
        owner[indices[k]] = -1;
    }
}

template <typename T, typename Op>
__global__ void level_update_kernel(T* tree, int64_t size, int level, const int64_t* indices,
                                    int64_t n, const ErrorRecord* err) {
    if (failed(err)) return;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t node = (size + indices[k]) >> level;
        tree[node] = Op::apply(tree[2 * node], tree[2 * node + 1]);
    }
}

template <typename T, typename Op>
__global__ void level_build_kernel(T* tree, int64_t begin, int64_t end) {
    for (int64_t node = begin + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; node < end;
         node += int64_t(gridDim.x) * blockDim.x) {
        tree[node] = Op::apply(tree[2 * node], tree[2 * node + 1]);
    }
}

template <typename T>
__global__ void fill_kernel(T* tree, int64_t count, T value) {
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < count;
         k += int64_t(gridDim.x) * blockDim.x) {
        tree[k] = value;
    }
}

template <typename T>
__global__ void get_kernel(const T* tree, int64_t size, int64_t capacity, const int64_t* indices,
                           T* out, int64_t n, ErrorRecord* err) {
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = indices[k];
        if (static_cast<uint64_t>(i) >= static_cast<uint64_t>(capacity)) {
            report(err, kIndex, k, i, 0, 0.0);
            out[k] = T(0);
        } else {
            out[k] = tree[size + i];
        }
    }
}

template <typename T, typename Op>
__global__ void query_kernel(const T* tree, int64_t size, int64_t capacity, const int64_t* starts,
                             const int64_t* ends, T* out, int64_t n, ErrorRecord* err) {
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t start = starts[k];
        const int64_t end = ends[k];
        if (start < 0 || end < start || end > capacity) {
            report(err, kRange, k, start, end, 0.0);
            out[k] = Op::template identity<T>();
        } else {
            out[k] = range_reduce<Op>(tree, size, start, end);
        }
    }
}

template <typename T>
__global__ void scan_kernel(const T* tree, int64_t size, int depth, const T* values,
                            int64_t* out, int64_t n, ErrorRecord* err) {
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x) {
        T value = values[k];
        if (!valid_scan_value(value)) {
            report(err, kScan, k, 0, 0, static_cast<double>(value));
            out[k] = 0;
            continue;
        }
        if (!(tree[1] > T(0))) {  // all leaves zero: nothing to draw
            report(err, kEmpty, k, 0, 0, 0.0);
            out[k] = 0;
            continue;
        }
        int64_t node = 1;
        for (int level = 0; level < depth; ++level) node = descend_step(tree, node, value);
        out[k] = node - size;
    }
}

template <typename T, typename Op>
__global__ void update_one_kernel(T* tree, int64_t size, int depth, int64_t index, T value) {
    int64_t node = size + index;
    tree[node] = value;
    for (int level = 0; level < depth; ++level) {
        node >>= 1;
        tree[node] = Op::apply(tree[2 * node], tree[2 * node + 1]);
    }
}

template <typename T, typename Op>
__global__ void query_one_kernel(const T* tree, int64_t size, int64_t start, int64_t end,
                                 T* out) {
    *out = range_reduce<Op>(tree, size, start, end);
}

template <typename T>
__global__ void scan_one_kernel(const T* tree, int64_t size, T value, int64_t* out) {
    // -1: every leaf is zero (the host raises)
    *out = tree[1] > T(0) ? scan_lower_bound(tree, size, value) : int64_t(-1);
}

}  // namespace

int cuda_device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" / "no device" status
        return 0;
    }
    return count;
}

template <typename T, typename Op>
CudaSegmentTree<T, Op>::CudaSegmentTree(int64_t capacity, int device, std::uintptr_t stream)
    : capacity_(capacity), device_(device) {
    check_capacity(capacity);
    const int count = cuda_device_count();
    if (device < 0 || device >= count) {
        throw std::invalid_argument("device cuda:" + std::to_string(device) +
                                    " is not available; this process sees " +
                                    std::to_string(count) + " CUDA device(s)");
    }
    size_ = leaf_count(capacity);
    depth_ = 0;
    while ((int64_t(1) << depth_) < size_) ++depth_;
    DeviceGuard guard(device_);
    const cudaStream_t s = as_stream(stream);
    try {
        RLCPP_CUDA_CHECK(cudaMalloc(&tree_, sizeof(T) * size_t(2 * size_)));
        RLCPP_CUDA_CHECK(cudaMalloc(&owner_, sizeof(int32_t) * size_t(capacity_)));
        RLCPP_CUDA_CHECK(cudaMalloc(&error_, sizeof(ErrorRecord)));
        RLCPP_CUDA_CHECK(cudaMalloc(&dev_scratch_, kScratchBytes));
        RLCPP_CUDA_CHECK(cudaMallocHost(&host_scratch_, kScratchBytes));
        RLCPP_CUDA_CHECK(cudaMemsetAsync(owner_, 0xFF, sizeof(int32_t) * size_t(capacity_), s));
        RLCPP_CUDA_CHECK(cudaMemsetAsync(error_, 0, sizeof(ErrorRecord), s));
        fill_kernel<T><<<blocks_for(2 * size_), kThreads, 0, s>>>(tree_, 2 * size_,
                                                                  Op::template identity<T>());
        RLCPP_CUDA_CHECK(cudaGetLastError());
        RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
    } catch (...) {
        cudaFree(tree_);
        cudaFree(owner_);
        cudaFree(error_);
        cudaFree(dev_scratch_);
        cudaFreeHost(host_scratch_);
        throw;
    }
}

template <typename T, typename Op>
CudaSegmentTree<T, Op>::~CudaSegmentTree() {
    // Errors are ignored: at interpreter exit the driver may already be gone.
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    cudaSetDevice(device_);
    cudaFree(tree_);
    cudaFree(owner_);
    cudaFree(error_);
    cudaFree(dev_scratch_);
    cudaFreeHost(host_scratch_);
    cudaSetDevice(previous);
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::raise_if_error(std::uintptr_t stream) {
    const cudaStream_t s = as_stream(stream);
    RLCPP_CUDA_CHECK(cudaGetLastError());
    auto* host = static_cast<ErrorRecord*>(host_scratch_);
    RLCPP_CUDA_CHECK(cudaMemcpyAsync(host, error_, sizeof(ErrorRecord), cudaMemcpyDeviceToHost, s));
    RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
    if (host->any == 0) return;
    const ErrorRecord record = *host;
    RLCPP_CUDA_CHECK(cudaMemsetAsync(error_, 0, sizeof(ErrorRecord), s));
    RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
    const ErrorSlot* slots = record.slots;
    if (slots[kIndex].set) throw_index_error(slots[kIndex].position, slots[kIndex].first, capacity_);
    if (slots[kRange].set) {
        throw_range_error(slots[kRange].position, slots[kRange].first, slots[kRange].second,
                          capacity_);
    }
    if (slots[kValue].set) throw_value_error(Op::name, slots[kValue].position, slots[kValue].value);
    if (slots[kScan].set) throw_scan_error(slots[kScan].position, slots[kScan].value);
    throw_empty_scan_error();
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::update(const int64_t* indices, const T* values, T fill, int64_t n,
                                    std::uintptr_t stream) {
    if (values == nullptr && !Op::valid(fill)) throw_value_error(Op::name, 0, double(fill));
    if (n > INT32_MAX) {
        throw std::invalid_argument("a CUDA update takes at most 2**31 - 1 elements, got " +
                                    std::to_string(n));
    }
    if (n == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    const cudaStream_t s = as_stream(stream);
    auto* err = static_cast<ErrorRecord*>(error_);
    if (n <= kFusedMaxBatch) {
        fused_update_kernel<T, Op><<<1, kFusedThreads, 0, s>>>(tree_, owner_, size_, capacity_,
                                                               depth_, indices, values, fill, n,
                                                               err);
    } else {
        const int blocks = blocks_for(n);
        validate_update_kernel<T, Op><<<blocks, kThreads, 0, s>>>(indices, values, capacity_, n,
                                                                  err);
        claim_kernel<<<blocks, kThreads, 0, s>>>(owner_, indices, n, err);
        write_kernel<T><<<blocks, kThreads, 0, s>>>(tree_, owner_, size_, indices, values, fill,
                                                    n, err);
        release_kernel<<<blocks, kThreads, 0, s>>>(owner_, indices, n, err);
        for (int level = 1; level <= depth_; ++level) {
            level_update_kernel<T, Op><<<blocks, kThreads, 0, s>>>(tree_, size_, level, indices,
                                                                   n, err);
        }
    }
    raise_if_error(stream);
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::get(const int64_t* indices, T* out, int64_t n,
                                 std::uintptr_t stream) {
    if (n == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    get_kernel<T><<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(
        tree_, size_, capacity_, indices, out, n, static_cast<ErrorRecord*>(error_));
    raise_if_error(stream);
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::query(const int64_t* starts, const int64_t* ends, T* out, int64_t n,
                                   std::uintptr_t stream) {
    if (n == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    query_kernel<T, Op><<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(
        tree_, size_, capacity_, starts, ends, out, n, static_cast<ErrorRecord*>(error_));
    raise_if_error(stream);
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::scan(const T* values, int64_t* out, int64_t n,
                                  std::uintptr_t stream) {
    if (n == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    scan_kernel<T><<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(
        tree_, size_, depth_, values, out, n, static_cast<ErrorRecord*>(error_));
    raise_if_error(stream);
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::update_one(int64_t index, T value, std::uintptr_t stream) {
    if (static_cast<uint64_t>(index) >= static_cast<uint64_t>(capacity_)) {
        throw_index_error(0, index, capacity_);
    }
    if (!Op::valid(value)) throw_value_error(Op::name, 0, double(value));
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    update_one_kernel<T, Op><<<1, 1, 0, as_stream(stream)>>>(tree_, size_, depth_, index, value);
    RLCPP_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename Op>
T CudaSegmentTree<T, Op>::get_one(int64_t index, std::uintptr_t stream) {
    if (static_cast<uint64_t>(index) >= static_cast<uint64_t>(capacity_)) {
        throw_index_error(0, index, capacity_);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    const cudaStream_t s = as_stream(stream);
    T* host = static_cast<T*>(host_scratch_);
    RLCPP_CUDA_CHECK(
        cudaMemcpyAsync(host, tree_ + size_ + index, sizeof(T), cudaMemcpyDeviceToHost, s));
    RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
    return *host;
}

template <typename T, typename Op>
T CudaSegmentTree<T, Op>::query_one(int64_t start, int64_t end, std::uintptr_t stream) {
    if (start < 0 || end < start || end > capacity_) throw_range_error(0, start, end, capacity_);
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    const cudaStream_t s = as_stream(stream);
    T* result = static_cast<T*>(dev_scratch_);
    query_one_kernel<T, Op><<<1, 1, 0, s>>>(tree_, size_, start, end, result);
    RLCPP_CUDA_CHECK(cudaGetLastError());
    T* host = static_cast<T*>(host_scratch_);
    RLCPP_CUDA_CHECK(cudaMemcpyAsync(host, result, sizeof(T), cudaMemcpyDeviceToHost, s));
    RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
    return *host;
}

template <typename T, typename Op>
int64_t CudaSegmentTree<T, Op>::scan_one(T value, std::uintptr_t stream) {
    if (!valid_scan_value(value)) throw_scan_error(0, double(value));
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    const cudaStream_t s = as_stream(stream);
    auto* result = static_cast<int64_t*>(dev_scratch_);
    scan_one_kernel<T><<<1, 1, 0, s>>>(tree_, size_, value, result);
    RLCPP_CUDA_CHECK(cudaGetLastError());
    auto* host = static_cast<int64_t*>(host_scratch_);
    RLCPP_CUDA_CHECK(cudaMemcpyAsync(host, result, sizeof(int64_t), cudaMemcpyDeviceToHost, s));
    RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
    if (*host < 0) throw_empty_scan_error();
    return *host;
}

template <typename T, typename Op>
T CudaSegmentTree<T, Op>::root(std::uintptr_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    const cudaStream_t s = as_stream(stream);
    T* host = static_cast<T*>(host_scratch_);
    RLCPP_CUDA_CHECK(cudaMemcpyAsync(host, tree_ + 1, sizeof(T), cudaMemcpyDeviceToHost, s));
    RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
    return *host;
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::copy_leaves(T* host_out, std::uintptr_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    const cudaStream_t s = as_stream(stream);
    RLCPP_CUDA_CHECK(cudaMemcpyAsync(host_out, tree_ + size_, sizeof(T) * size_t(capacity_),
                                     cudaMemcpyDeviceToHost, s));
    RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::rebuild_levels(std::uintptr_t stream) {
    const cudaStream_t s = as_stream(stream);
    for (int64_t begin = size_ / 2; begin >= 1; begin /= 2) {
        level_build_kernel<T, Op><<<blocks_for(begin), kThreads, 0, s>>>(tree_, begin, 2 * begin);
    }
    RLCPP_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename Op>
void CudaSegmentTree<T, Op>::load_leaves(const T* host_values, std::uintptr_t stream) {
    for (int64_t k = 0; k < capacity_; ++k) {
        if (!Op::valid(host_values[k])) throw_value_error(Op::name, k, double(host_values[k]));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(device_);
    const cudaStream_t s = as_stream(stream);
    RLCPP_CUDA_CHECK(cudaMemcpyAsync(tree_ + size_, host_values, sizeof(T) * size_t(capacity_),
                                     cudaMemcpyHostToDevice, s));
    rebuild_levels(stream);
    RLCPP_CUDA_CHECK(cudaStreamSynchronize(s));
}

template class CudaSegmentTree<float, SumOp>;
template class CudaSegmentTree<double, SumOp>;
template class CudaSegmentTree<float, MinOp>;
template class CudaSegmentTree<double, MinOp>;

}  // namespace rlcpp
