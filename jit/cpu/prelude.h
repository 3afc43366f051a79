/* prelude.h — the C source every generated CPU translation unit starts with:
 * what printing primitives needs beyond C itself. Element semantics live in
 * lower/'s rules, not here; what stays is
 * - the bit casts of PRIM_BITCAST (memcpy, which compilers turn into moves);
 * - the half types' storage conversions (a load widens f16/bf16 bits to f32
 *   exactly; a store narrows an f32 that the rules have already rounded, so
 *   it is exact too) and kh_rh/kh_rb, which round a reduction's f32 result
 *   and a matmul's dot product to the half type, outside the IR.
 * It is a string, included by one file of jit/cpu only. */
#ifndef KILN_JIT_CPU_PRELUDE_H
#define KILN_JIT_CPU_PRELUDE_H

static const char jit_cpu_prelude[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <string.h>\n"
    "int omp_get_thread_num(void);\n"
    "int omp_get_num_threads(void);\n"
    "typedef uint8_t kb;\n"
    "static inline int32_t kh_fbits(float f) { int32_t u; memcpy(&u, &f, 4); return u; }\n"
    "static inline float kh_bitsf(int32_t u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static inline int64_t kh_dbits(double d) { int64_t u; memcpy(&u, &d, 8); return u; }\n"
    "static inline double kh_bitsd(int64_t u) { double d; memcpy(&d, &u, 8); return d; }\n"
    "static inline float kh_h2f(uint16_t h) {\n"
    "  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;\n"
    "  if (e == 0) { if (m == 0) u = s; else { e = 113; while (!(m & 0x400)) { m <<= 1; e--; }\n"
    "      m &= 0x3ff; u = s | (e << 23) | (m << 13); } }\n"
    "  else if (e == 31) u = s | 0x7f800000u | (m << 13);\n"
    "  else u = s | ((e + 112) << 23) | (m << 13);\n"
    "  float f; memcpy(&f, &u, 4); return f; }\n"
    "static inline uint16_t kh_f2h(float f) {\n"
    "  uint32_t u; memcpy(&u, &f, 4);\n"
    "  uint32_t s = (u >> 16) & 0x8000; int32_t e = (int32_t)((u >> 23) & 0xff); uint32_t m = u & 0x7fffff;\n"
    "  if (e == 255) return (uint16_t)(s | 0x7c00 | (m ? 0x200 | (m >> 13) : 0));\n"
    "  e -= 112;\n"
    "  if (e >= 31) return (uint16_t)(s | 0x7c00);\n"
    "  if (e <= 0) { if (e < -10) return (uint16_t)s; m |= 0x800000; int sh = 14 - e;\n"
    "    uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);\n"
    "    if (rem > half || (rem == half && (r & 1))) r++; return (uint16_t)(s | r); }\n"
    "  uint32_t r = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;\n"
    "  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;\n"
    "  return (uint16_t)(s | r); }\n"
    "static inline float kh_b2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f;\n"
    "  memcpy(&f, &u, 4); return f; }\n"
    "static inline uint16_t kh_f2b(float f) { uint32_t u; memcpy(&u, &f, 4);\n"
    "  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);\n"
    "  u += 0x7fff + ((u >> 16) & 1); return (uint16_t)(u >> 16); }\n"
    "static inline float kh_rh(float x) { return kh_h2f(kh_f2h(x)); }\n"
    "static inline float kh_rb(float x) { return kh_b2f(kh_f2b(x)); }\n";

#endif /* KILN_JIT_CPU_PRELUDE_H */
