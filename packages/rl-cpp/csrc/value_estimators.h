// Backward recurrences of the value estimators: GAE and the TD(lambda) return.
//
// Arrays are viewed as [N, T, F] with arbitrary element strides (time is the middle
// dimension), so transposed and expanded torch tensors are read in place. Each (n, f)
// pair is an independent chain run backwards over t in a single pass over memory
// (the bound for this computation).
#pragma once

#include <cstdint>
#include <type_traits>

namespace rlcpp {

template <typename T>
struct View3 {
    T* data;
    int64_t s0, s1, s2;  // element strides of the [N, T, F] view

    T* chain(int64_t n, int64_t f) const { return data + n * s0 + f * s2; }
};

struct Dims3 {
    int64_t n, t, f;
};

// The recurrence y[t] = x[t] + c[t] * y[t + 1] runs backwards over each chain. One
// chain alone is bound by the latency of its multiply-add (each step waits for the
// previous one); kGroup chains are interleaved so that their steps overlap, which brings
// the loop to the speed of memory. Two is the measured optimum: more chains mean more
// concurrent memory streams (seven per chain) than the prefetchers follow.
constexpr int kGroup = 2;

// Element access of one chain (element (n, f) of every array) at step t. When all
// arrays share one layout (the common case: contiguous arrays of one shape), a chain is
// one offset into every base pointer, so the loop keeps few registers; otherwise each
// array has its own pointer and time stride.
template <bool Shared>
struct Chain;

template <>
struct Chain<true> {
    int64_t offset, stride;
    template <typename T>
    T& at(const View3<T>& a, int64_t t) const {
        return a.data[offset + t * stride];
    }
};

template <>
struct Chain<false> {
    int64_t n, f;
    template <typename T>
    T& at(const View3<T>& a, int64_t t) const {
        return a.data[n * a.s0 + f * a.s2 + t * a.s1];
    }
};

template <bool Shared, typename T>
Chain<Shared> chain_of(const View3<T>& layout, int64_t index, int64_t f_size) {
    const int64_t n = index / f_size, f = index % f_size;
    if constexpr (Shared) {
        return {n * layout.s0 + f * layout.s2, layout.s1};
    } else {
        return {n, f};
    }
}

template <typename V, typename... Views>
bool same_layout(const V& first, const Views&... views) {
    return ((views.s0 == first.s0 && views.s1 == first.s1 && views.s2 == first.s2) && ...);
}

// advantage[t] = delta[t] + gamma * lmbda * (1 - done[t]) * advantage[t + 1], with
// delta[t] = reward[t] + gamma * (1 - terminated[t]) * next_value[t] - value[t];
// value_target = advantage + value.
template <typename T, int K, bool Shared>
void gae_group(const Dims3& d, int64_t first, T gamma, T lmbda, const View3<const T>& value,
               const View3<const T>& next_value, const View3<const T>& reward,
               const View3<const bool>& done, const View3<const bool>& terminated,
               const View3<T>& advantage, const View3<T>& value_target) {
    Chain<Shared> ch[K];
    T carry[K];
    for (int k = 0; k < K; ++k) {
        ch[k] = chain_of<Shared>(value, first + k, d.f);
        carry[k] = T(0);
    }
    const T gl = gamma * lmbda;
    for (int64_t t = d.t - 1; t >= 0; --t) {
        for (int k = 0; k < K; ++k) {
            // selects, not bool-to-float conversions: cvtsi2ss would chain every
            // step on its destination register
            const T v = ch[k].at(value, t);
            const T x = ch[k].at(reward, t) + (ch[k].at(terminated, t) ? T(0) : gamma * ch[k].at(next_value, t)) - v;
            carry[k] = x + (ch[k].at(done, t) ? T(0) : gl) * carry[k];
            ch[k].at(advantage, t) = carry[k];
            ch[k].at(value_target, t) = carry[k] + v;
        }
    }
}

template <typename T>
void gae(const Dims3& d, T gamma, T lmbda, const View3<const T>& value,
         const View3<const T>& next_value, const View3<const T>& reward,
         const View3<const bool>& done, const View3<const bool>& terminated,
         const View3<T>& advantage, const View3<T>& value_target) {
    auto run = [&](auto shared) {
        constexpr bool Shared = decltype(shared)::value;
        const int64_t chains = d.n * d.f;
        int64_t c = 0;
        for (; c + kGroup <= chains; c += kGroup) {
            gae_group<T, kGroup, Shared>(d, c, gamma, lmbda, value, next_value, reward,
                                         done, terminated, advantage, value_target);
        }
        for (; c < chains; ++c) {
            gae_group<T, 1, Shared>(d, c, gamma, lmbda, value, next_value, reward, done,
                                    terminated, advantage, value_target);
        }
    };
    if (same_layout(value, next_value, reward, done, terminated, advantage, value_target)) {
        run(std::true_type{});
    } else {
        run(std::false_type{});
    }
}

// G[t] = reward[t] + gamma * V[t] * (1 - lmbda * (1 - end[t])) + gamma * lmbda * (1 - end[t]) * G[t + 1]
// with V = (1 - terminated) * next_value and end = done, forced at the last step: a
// done step (and the end of the batch) bootstraps from its next value.
template <typename T, int K, bool Shared>
void td_lambda_group(const Dims3& d, int64_t first, T gamma, T lmbda,
                     const View3<const T>& next_value, const View3<const T>& reward,
                     const View3<const bool>& done, const View3<const bool>& terminated,
                     const View3<T>& out) {
    Chain<Shared> ch[K];
    T carry[K];
    for (int k = 0; k < K; ++k) {
        ch[k] = chain_of<Shared>(reward, first + k, d.f);
        carry[k] = T(0);
    }
    const T gl = gamma * lmbda, one_minus_lmbda = T(1) - lmbda;
    for (int64_t t = d.t - 1; t >= 0; --t) {
        const bool last = t == d.t - 1;
        for (int k = 0; k < K; ++k) {
            const bool end = last || ch[k].at(done, t);
            const T value = ch[k].at(terminated, t) ? T(0) : gamma * ch[k].at(next_value, t);
            carry[k] = ch[k].at(reward, t) + (end ? value : value * one_minus_lmbda) +
                       (end ? T(0) : gl) * carry[k];
            ch[k].at(out, t) = carry[k];
        }
    }
}

template <typename T>
void td_lambda_return(const Dims3& d, T gamma, T lmbda, const View3<const T>& next_value,
                      const View3<const T>& reward, const View3<const bool>& done,
                      const View3<const bool>& terminated, const View3<T>& out) {
    auto run = [&](auto shared) {
        constexpr bool Shared = decltype(shared)::value;
        const int64_t chains = d.n * d.f;
        int64_t c = 0;
        for (; c + kGroup <= chains; c += kGroup) {
            td_lambda_group<T, kGroup, Shared>(d, c, gamma, lmbda, next_value, reward,
                                               done, terminated, out);
        }
        for (; c < chains; ++c) {
            td_lambda_group<T, 1, Shared>(d, c, gamma, lmbda, next_value, reward, done,
                                          terminated, out);
        }
    };
    if (same_layout(next_value, reward, done, terminated, out)) {
        run(std::true_type{});
    } else {
        run(std::false_type{});
    }
}

}  // namespace rlcpp
