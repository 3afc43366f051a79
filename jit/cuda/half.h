/* half.h — the f16 and bf16 storage conversions of generated CUDA code, as
 * one macro that expands to C. The renderer stringifies it (qualified
 * __device__) into every translation unit; tests expand it as host C and
 * check it against graph/dtype.c on every bit pattern, so the device code is
 * the text that was checked. The expansion needs the types kh_u16, kh_u32,
 * kh_i32 and the bit casts kh_fbits (float to kh_u32) and kh_bitsf (back)
 * from its includer; rounding is to nearest even, and NaN payloads follow
 * graph_f32_to_f16 and graph_f32_to_bf16. */
#ifndef KILN_JIT_CUDA_HALF_H
#define KILN_JIT_CUDA_HALF_H

#define JIT_CUDA_HALF_CODE(Q)                                                                     \
    Q float kh_h2f(kh_u16 h) {                                                                    \
        kh_u32 s = (kh_u32)(h & 0x8000u) << 16, e = ((kh_u32)h >> 10) & 0x1fu, m = h & 0x3ffu, u; \
        if (e == 0) {                                                                             \
            if (m == 0) {                                                                         \
                u = s;                                                                            \
            } else {                                                                              \
                e = 113;                                                                          \
                while (!(m & 0x400u)) {                                                           \
                    m <<= 1;                                                                      \
                    e--;                                                                          \
                }                                                                                 \
                u = s | (e << 23) | ((m & 0x3ffu) << 13);                                         \
            }                                                                                     \
        } else if (e == 31) {                                                                     \
            u = s | 0x7f800000u | (m << 13);                                                      \
        } else {                                                                                  \
            u = s | ((e + 112) << 23) | (m << 13);                                                \
        }                                                                                         \
        return kh_bitsf(u);                                                                       \
    }                                                                                             \
    Q kh_u16 kh_f2h(float f) {                                                                    \
        kh_u32 u = kh_fbits(f);                                                                   \
        kh_u32 s = (u >> 16) & 0x8000u, m = u & 0x7fffffu;                                        \
        kh_i32 e = (kh_i32)((u >> 23) & 0xffu);                                                   \
        if (e == 255) {                                                                           \
            kh_u32 nm = (u >> 13) & 0x3ffu;                                                       \
            return (kh_u16)(s | 0x7c00u | (m ? (nm ? nm : 0x200u) : 0u));                         \
        }                                                                                         \
        e -= 112;                                                                                 \
        if (e >= 31)                                                                              \
            return (kh_u16)(s | 0x7c00u);                                                         \
        if (e <= 0) {                                                                             \
            if (e < -10)                                                                          \
                return (kh_u16)s;                                                                 \
            m |= 0x800000u;                                                                       \
            kh_i32 sh = 14 - e;                                                                   \
            kh_u32 r = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);               \
            if (rem > half || (rem == half && (r & 1u)))                                          \
                r++;                                                                              \
            return (kh_u16)(s | r);                                                               \
        }                                                                                         \
        kh_u32 r = ((kh_u32)e << 10) | (m >> 13), rem = m & 0x1fffu;                              \
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))                                        \
            r++;                                                                                  \
        return (kh_u16)(s | r);                                                                   \
    }                                                                                             \
    Q float kh_b2f(kh_u16 h) { return kh_bitsf((kh_u32)h << 16); }                                \
    Q kh_u16 kh_f2b(float f) {                                                                    \
        kh_u32 u = kh_fbits(f);                                                                   \
        if ((u & 0x7fffffffu) > 0x7f800000u) {                                                    \
            kh_u32 h = u >> 16;                                                                   \
            return (kh_u16)((h & 0x7fu) ? h : h | 0x40u);                                         \
        }                                                                                         \
        u += 0x7fffu + ((u >> 16) & 1u);                                                          \
        return (kh_u16)(u >> 16);                                                                 \
    }

#define JIT_CUDA_STR_(...) #__VA_ARGS__
/* The expansion of a macro call as a string literal. */
#define JIT_CUDA_STR(...) JIT_CUDA_STR_(__VA_ARGS__)

#endif /* KILN_JIT_CUDA_HALF_H */
