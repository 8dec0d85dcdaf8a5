/*
 * engine/math/kernels_avx512.c - AVX-512 (F, BW, VL, DQ) kernels.  A 16-float
 * vector holds the two 8-lane accumulators of the AVX2 kernels side by side
 * or one panel of VF_PANEL centroids, so every lane performs the scalar
 * kernel's operations in its order.  The levels scan keeps its AVX2
 * kernel: its 8 lanes add in order, one vector of 8.
 */
#include "kernels.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline float hsum8(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
	__m128 a = _mm_add_ps(lo, hi);
	__m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
	__m128 c = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(c);
}

/* acc0 (lanes 0-7) + acc1 (lanes 8-15), then hsum8 */
static inline float hsum_pair(__m512 v)
{
	return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* The last d - i < 16 floats in the lanes the scalar kernel gives them:
 * 8 or more fill lanes 0-7 (acc0's step of 8) and the rest from lane 8
 * (acc1's tail); fewer go to lanes 8.. alone.  Returns the lanes used. */
static inline __mmask16 tail_lanes(size_t r)
{
	__mmask16 m = (__mmask16)((1u << r) - 1);
	return r >= 8 ? m : (__mmask16)(m << 8);
}

/* 16 numbers of y from i on: floats, or bytes (u8) as floats */
static inline __attribute__((always_inline)) __m512 y_load16(const void *y, size_t i, int u8)
{
	if (!u8)
		return _mm512_loadu_ps((const float *)y + i);
	return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
		_mm_loadu_si128((const __m128i *)(const void *)((const uint8_t *)y + i))));
}

/* One accumulator (four from 64 numbers on): lanes 0-7 are acc0 of the
 * scalar kernel, 8-15 acc1.
 * y floats or (u8) bytes: one sequence of steps for both, so the bytes
 * give the very float their floats would. */
static inline __attribute__((always_inline)) float l2sq_steps_avx512(const float *x, const void *y,
								     size_t d, int u8)
{
	__m512 acc = _mm512_setzero_ps();
	size_t i = 0;
	if (d >= 64) { /* eight accumulators of 8 lanes in four, folded as
			* kernels.c's fold8() */
		__m512 w1 = acc, w2 = acc, w3 = acc;
		for (; i + 64 <= d; i += 64) {
			__m512 t0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), y_load16(y, i, u8));
			__m512 t1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), y_load16(y, i + 16, u8));
			__m512 t2 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 32), y_load16(y, i + 32, u8));
			__m512 t3 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 48), y_load16(y, i + 48, u8));
			acc = _mm512_fmadd_ps(t0, t0, acc);
			w1 = _mm512_fmadd_ps(t1, t1, w1);
			w2 = _mm512_fmadd_ps(t2, t2, w2);
			w3 = _mm512_fmadd_ps(t3, t3, w3);
		}
		acc = _mm512_add_ps(_mm512_add_ps(acc, w2), _mm512_add_ps(w1, w3));
	}
	for (; i + 16 <= d; i += 16) {
		__m512 t = _mm512_sub_ps(_mm512_loadu_ps(x + i), y_load16(y, i, u8));
		acc = _mm512_fmadd_ps(t, t, acc);
	}
	if (i < d) {
		float f[16] = {0};
		for (size_t l = 0; u8 && i + l < d; l++)
			f[l] = ((const uint8_t *)y)[i + l];
		const float *yt = u8 ? f : (const float *)y + i;
		__mmask16 m = tail_lanes(d - i);
		__m512 t = _mm512_sub_ps(_mm512_maskz_expandloadu_ps(m, x + i),
					 _mm512_maskz_expandloadu_ps(m, yt));
		acc = _mm512_mask3_fmadd_ps(t, t, acc, m);
	}
	return hsum_pair(acc);
}

static float l2sq_avx512(const void *a, const void *b, size_t d)
{
	return l2sq_steps_avx512(a, b, d, 0);
}

static float l2sq_u8_avx512(const float *a, const uint8_t *b, size_t d)
{
	return l2sq_steps_avx512(a, b, d, 1);
}

static float dot_avx512(const void *a, const void *b, size_t d)
{
	const float *x = a, *y = b;
	__m512 acc = _mm512_setzero_ps();
	size_t i = 0;
	if (d >= 64) { /* as l2sq_steps_avx512() */
		__m512 w1 = acc, w2 = acc, w3 = acc;
		for (; i + 64 <= d; i += 64) {
			acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc);
			w1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), w1);
			w2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), w2);
			w3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), w3);
		}
		acc = _mm512_add_ps(_mm512_add_ps(acc, w2), _mm512_add_ps(w1, w3));
	}
	for (; i + 16 <= d; i += 16)
		acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc);
	if (i < d) {
		__mmask16 m = tail_lanes(d - i);
		acc = _mm512_mask3_fmadd_ps(_mm512_maskz_expandloadu_ps(m, x + i),
					    _mm512_maskz_expandloadu_ps(m, y + i), acc, m);
	}
	return hsum_pair(acc);
}

/* 4 points x one panel (one vector) per step. */
/* One panel: out[p*VF_PANEL + j]. */
static void panel_dots1_avx512(const float *pts, size_t npts, size_t d,
			       const float *panel, float *out)
{
	size_t p = 0;
	for (; p + 4 <= npts; p += 4) {
		const float *x0 = pts + p * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		for (size_t k = 0; k < d; k++) {
			__m512 c = _mm512_loadu_ps(panel + k * VF_PANEL);
			a0 = _mm512_fmadd_ps(_mm512_set1_ps(x0[k]), c, a0);
			a1 = _mm512_fmadd_ps(_mm512_set1_ps(x1[k]), c, a1);
			a2 = _mm512_fmadd_ps(_mm512_set1_ps(x2[k]), c, a2);
			a3 = _mm512_fmadd_ps(_mm512_set1_ps(x3[k]), c, a3);
		}
		float *o = out + p * VF_PANEL;
		_mm512_storeu_ps(o, a0);
		_mm512_storeu_ps(o + 16, a1);
		_mm512_storeu_ps(o + 32, a2);
		_mm512_storeu_ps(o + 48, a3);
	}
	for (; p < npts; p++) {
		const float *x = pts + p * d;
		__m512 a = _mm512_setzero_ps();
		for (size_t k = 0; k < d; k++)
			a = _mm512_fmadd_ps(_mm512_set1_ps(x[k]), _mm512_loadu_ps(panel + k * VF_PANEL), a);
		_mm512_storeu_ps(out + p * VF_PANEL, a);
	}
}

/* One point against M <= 8 panels side by side (M constant where inlined),
 * from panels of floats or (half) of binary16 values widened exactly as
 * they are loaded: each lane adds its products in dimension order either
 * way. */
static inline __attribute__((always_inline)) void
panels_side_by_side(const float *x, size_t d, const char *const *p, int half, size_t M,
		    float *out)
{
#define LD(p, o)                                                                          \
	(half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((p) + 2 * (o)))) \
	      : _mm512_loadu_ps((const float *)((p) + 4 * (o))))
	__m512 a[8];
#pragma GCC unroll 8
	for (size_t j = 0; j < 8; j++)
		a[j] = _mm512_setzero_ps();
	for (size_t k = 0, o = 0; k < d; k++, o += VF_PANEL) {
		__m512 v = _mm512_set1_ps(x[k]);
#pragma GCC unroll 8
		for (size_t j = 0; j < 8; j++)
			if (j < M)
				a[j] = _mm512_fmadd_ps(v, LD(p[j], o), a[j]);
	}
#undef LD
#pragma GCC unroll 8
	for (size_t j = 0; j < 8; j++)
		if (j < M)
			_mm512_storeu_ps(out + j * VF_PANEL, a[j]);
}

/* One point against 8 panels per step, then the 1-7 left side by side
 * (the chains of fewer panels are as many FMAs, in fewer loads). */
static inline __attribute__((always_inline)) void
point_panels_any(const float *x, size_t d, const void *panels, int half, size_t npanels,
		 float *out)
{
	size_t ps = d * VF_PANEL * (half ? 2 : 4); /* bytes a panel */
	for (size_t i = 0; i < npanels; i += 8) {
		size_t m = npanels - i < 8 ? npanels - i : 8;
		const char *p[8];
		for (size_t j = 0; j < m; j++)
			p[j] = (const char *)panels + (i + j) * ps;
		float *o = out + i * VF_PANEL;
		switch (m) {
		case 1: panels_side_by_side(x, d, p, half, 1, o); break;
		case 2: panels_side_by_side(x, d, p, half, 2, o); break;
		case 3: panels_side_by_side(x, d, p, half, 3, o); break;
		case 4: panels_side_by_side(x, d, p, half, 4, o); break;
		case 5: panels_side_by_side(x, d, p, half, 5, o); break;
		case 6: panels_side_by_side(x, d, p, half, 6, o); break;
		case 7: panels_side_by_side(x, d, p, half, 7, o); break;
		default: panels_side_by_side(x, d, p, half, 8, o); break;
		}
	}
}

static void point_panels_avx512(const float *x, size_t d, const float *panels,
				size_t npanels, float *out)
{
	point_panels_any(x, d, panels, 0, npanels, out);
}

static void point_panels_half_avx512(const float *x, size_t d, const uint16_t *panels,
				     size_t npanels, float *out)
{
	point_panels_any(x, d, panels, 1, npanels, out);
}

#define FMA4(a, v, c0, c1, c2, c3)                  \
	do {                                        \
		a[0] = _mm512_fmadd_ps(v, c0, a[0]); \
		a[1] = _mm512_fmadd_ps(v, c1, a[1]); \
		a[2] = _mm512_fmadd_ps(v, c2, a[2]); \
		a[3] = _mm512_fmadd_ps(v, c3, a[3]); \
	} while (0)

/* Four points against four panels per step: 8 loads feed 16 FMAs (one
 * panel at a time, 5 loads fed 4).  Each lane still adds its products in
 * dimension order, so the sums are those of one panel at a time. */
static void panel_dots_avx512(const float *pts, size_t npts, size_t d,
			      const float *panels, size_t npanels, float *out)
{
	size_t ps = d * VF_PANEL, i = 0;
	for (; i + 4 <= npanels; i += 4) {
		const float *pan = panels + i * ps;
		size_t p = 0;
		for (; p + 4 <= npts; p += 4) {
			const float *x0 = pts + p * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
			__m512 a0[4], a1[4], a2[4], a3[4];
			for (int j = 0; j < 4; j++)
				a0[j] = a1[j] = a2[j] = a3[j] = _mm512_setzero_ps();
			const float *c = pan;
			for (size_t k = 0; k < d; k++, c += VF_PANEL) {
				__m512 c0 = _mm512_loadu_ps(c), c1 = _mm512_loadu_ps(c + ps),
				       c2 = _mm512_loadu_ps(c + 2 * ps), c3 = _mm512_loadu_ps(c + 3 * ps);
				FMA4(a0, _mm512_set1_ps(x0[k]), c0, c1, c2, c3);
				FMA4(a1, _mm512_set1_ps(x1[k]), c0, c1, c2, c3);
				FMA4(a2, _mm512_set1_ps(x2[k]), c0, c1, c2, c3);
				FMA4(a3, _mm512_set1_ps(x3[k]), c0, c1, c2, c3);
			}
			for (int j = 0; j < 4; j++) {
				float *o = out + ((i + j) * npts + p) * VF_PANEL;
				_mm512_storeu_ps(o, a0[j]);
				_mm512_storeu_ps(o + VF_PANEL, a1[j]);
				_mm512_storeu_ps(o + 2 * VF_PANEL, a2[j]);
				_mm512_storeu_ps(o + 3 * VF_PANEL, a3[j]);
			}
		}
		for (int j = 0; p < npts && j < 4; j++)
			panel_dots1_avx512(pts + p * d, npts - p, d, pan + j * ps,
					   out + ((i + j) * npts + p) * VF_PANEL);
	}
	for (; i < npanels; i++)
		panel_dots1_avx512(pts, npts, d, panels + i * ps, out + i * npts * VF_PANEL);
}

/* The u16 sums of 8 slots in each 128-bit lane of x, then of y: widened
 * and added over the lanes, x's slots in lanes 0-7, y's in 8-15. */
static inline __m512i fold_pair(__m512i x, __m512i y)
{
	__m512i sx = _mm512_add_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(x)),
				      _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(x, 1)));
	__m512i sy = _mm512_add_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(y)),
				      _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(y, 1)));
	/* lanes 0-7 + 8-15 of each */
	__m512i lo = _mm512_shuffle_i64x2(sx, sy, 0x44), hi = _mm512_shuffle_i64x2(sx, sy, 0xEE);
	return _mm512_add_epi32(lo, hi);
}

/* Four groups (one per 128-bit lane) per step.  The byte look-ups add
 * into u16 lanes without widening: a look-up vector added as it is puts
 * slot 2i + 256 * slot 2i+1 into lane i, shifted right by 8 slot 2i+1
 * alone; before either could overflow (256 steps of at most 255), the
 * even slots are the first sum less 256 times the second (mod 2^16, exact
 * as they are below 2^16), interleaved with the odd ones and folded into
 * u32 totals.  Integer sums are exact, so their order does not matter;
 * the float part runs on 16 slots a vector with the scalar kernel's
 * operations.  groups is a multiple of 4 (pdim / 4, pdim a multiple of
 * 32). */
static uint32_t pass1_avx512(const uint8_t *codes, const uint8_t *lut,
			     uint32_t groups, const uint8_t *add, const uint8_t *r1,
			     const uint8_t *e1, const vf_pass1 *p, float *lo, float *hi)
{
	const __m512i m4 = _mm512_set1_epi8(0x0F), z = _mm512_setzero_si512();
	__m512i t0 = z, t1 = z; /* u32 totals of slots 0-15 and 16-31 */
	uint32_t g = 0;
	while (g < groups) {
		/* 1024 groups: 256 look-ups of at most 255 per u16 lane */
		uint32_t end = g + 1024 < groups ? g + 1024 : groups;
		__m512i wl = z, ol = z, wh = z, oh = z; /* whole and odd sums, slots 0-15, 16-31 */
		for (; g < end; g += 4) {
			__m512i c = _mm512_loadu_si512(codes + g * 16);
			__m512i l = _mm512_loadu_si512(lut + g * 16);
			__m512i rlo = _mm512_shuffle_epi8(l, _mm512_and_si512(c, m4));
			__m512i rhi = _mm512_shuffle_epi8(l, _mm512_and_si512(_mm512_srli_epi16(c, 4), m4));
			wl = _mm512_add_epi16(wl, rlo);
			ol = _mm512_add_epi16(ol, _mm512_srli_epi16(rlo, 8));
			wh = _mm512_add_epi16(wh, rhi);
			oh = _mm512_add_epi16(oh, _mm512_srli_epi16(rhi, 8));
		}
		__m512i el = _mm512_sub_epi16(wl, _mm512_slli_epi16(ol, 8));
		__m512i eh = _mm512_sub_epi16(wh, _mm512_slli_epi16(oh, 8));
		t0 = _mm512_add_epi32(t0, fold_pair(_mm512_unpacklo_epi16(el, ol),
						    _mm512_unpackhi_epi16(el, ol)));
		t1 = _mm512_add_epi32(t1, fold_pair(_mm512_unpacklo_epi16(eh, oh),
						    _mm512_unpackhi_epi16(eh, oh)));
	}
	const __m512 va = _mm512_set1_ps(p->a), vb = _mm512_set1_ps(p->b);
	const __m512 vqc = _mm512_set1_ps(p->qc), vqe = _mm512_set1_ps(p->qerr);
	const __m512 vnq = _mm512_set1_ps(p->nq), vth = _mm512_set1_ps(p->thresh);
	__m512i tot[2] = {t0, t1};
	uint32_t mask = 0;
	for (int q = 0; q < 2; q++) {
		/* totals are < 2^24, so the conversion is exact */
		__m512 s1 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(tot[q]), va), vb);
		__m512 r = _mm512_loadu_ps((const float *)(r1 + 64 * q));
		__m512 u = _mm512_add_ps(_mm512_loadu_ps((const float *)(add + 64 * q)), vqc);
		__m512 est = _mm512_add_ps(u, _mm512_mul_ps(r, s1));
		__m512 bound = _mm512_add_ps(_mm512_mul_ps(_mm512_abs_ps(r), vqe),
					     _mm512_mul_ps(_mm512_loadu_ps((const float *)(e1 + 64 * q)), vnq));
		__m512 l = _mm512_sub_ps(est, bound);
		_mm512_storeu_ps(lo + 16 * q, l);
		_mm512_storeu_ps(hi + 16 * q, _mm512_add_ps(est, bound));
		/* not greater (a NaN bound prunes nothing) */
		mask |= (uint32_t)_mm512_cmp_ps_mask(l, vth, _CMP_NGT_UQ) << (16 * q);
	}
	return mask;
}

/* The residuals of sixteen groups (v: 64 floats, group g's four at 4g)
 * by position: q[b] holds element b of each group, group order (two
 * two-source permutes and a lane shuffle each). */
static inline void group_columns(const __m512 v[4], __m512 q[4])
{
	for (int b = 0; b < 4; b++) {
		/* lane j < 8: element 4j+b of a|b */
		const __m512i idx = _mm512_setr_epi32(b, 4 + b, 8 + b, 12 + b, 16 + b, 20 + b,
						      24 + b, 28 + b, b, 4 + b, 8 + b, 12 + b,
						      16 + b, 20 + b, 24 + b, 28 + b);
		q[b] = _mm512_shuffle_f32x4(_mm512_permutex2var_ps(v[0], idx, v[1]),
					    _mm512_permutex2var_ps(v[2], idx, v[3]), 0x44);
	}
}

/* One group: its 16 entries in one vector (the scalar's order of sums). */
static void lut4_one_avx512(const float *qr, float base, __m512 vinv, uint8_t *out)
{
	static const __mmask16 with[4] = { 0xAAAA, 0xCCCC, 0xF0F0, 0xFF00 }; /* entries with bit b */
	const __m512 half = _mm512_set1_ps(0.5f);
	const __m512 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.0f);
	__m512 v = _mm512_set1_ps(base);
	for (int b = 0; b < 4; b++) /* + qr where the bit is, + 0 elsewhere */
		v = _mm512_add_ps(v, _mm512_maskz_mov_ps(with[b], _mm512_set1_ps(qr[b])));
	v = _mm512_add_ps(_mm512_mul_ps(v, vinv), half);
	v = _mm512_min_ps(_mm512_max_ps(v, zero), top);
	_mm_storeu_si128((__m128i *)out, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
}

/* Sixteen groups a step, a vector an entry: the four residuals b of the
 * groups gathered into Q[b] (group_columns()), entry e = entry e - 2^b + Q[b]
 * for e's highest bit b, which adds in the scalar's order (its + 0 for a
 * missing bit changes nothing but the sign of a zero).  Each entry is
 * scaled, capped at 255 (min(top, v): NaN stays NaN) and truncated; the
 * unsigned saturating packs give 0 for negative values and NaN (whose
 * truncation is INT_MIN), as the scalar's clamp does.  The packs leave a
 * dword of one entry of four groups; a byte shuffle in each lane turns it
 * into four entries of one group, and two rounds of dword permutes put the
 * groups in order. */
static void lut4_avx512(const float *qr, uint32_t groups, const float *base, float inv,
			uint8_t *out)
{
	const __m512 vinv = _mm512_set1_ps(inv), half = _mm512_set1_ps(0.5f);
	const __m512 top = _mm512_set1_ps(255.0f);
	/* in a lane of W[j] after the packs, byte 4i + gg is entry 4j+i of the
	 * lane's group gg; the shuffle makes it byte 4gg + i.  Then W[j] dword
	 * 4L + gg is group 4L+gg's entries 4j..4j+3.  Round 1: P[h] of the pair
	 * W[a], W[b] (0, 1 or 2, 3) holds lane 2h+m of W[a] at dword 8m and of
	 * W[b] at 8m + 4.  Round 2: output k's dword 4gg + j (group 4k+gg,
	 * entries 4j..) is dword 8(k%2) + 4(j%2) + gg of P[k/2] of W[j]'s pair. */
	static const uint8_t tr[64] = { /* [16L + 4gg + i] = 4i + gg */
		0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
		0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
		0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
		0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15 };
	static const uint32_t i1[2][16] = { /* [h][8m + 4src + gg] = 16src + 4(2h+m) + gg */
		{ 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23 },
		{ 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31 } };
	static const uint32_t i2[2][16] = { /* [m][4gg + j] = 16(j/2) + 8m + 4(j%2) + gg */
		{ 0, 4, 16, 20, 1, 5, 17, 21, 2, 6, 18, 22, 3, 7, 19, 23 },
		{ 8, 12, 24, 28, 9, 13, 25, 29, 10, 14, 26, 30, 11, 15, 27, 31 } };
	const __m512i shuf = _mm512_loadu_si512(tr);
	const __m512i p1[2] = { _mm512_loadu_si512(i1[0]), _mm512_loadu_si512(i1[1]) };
	const __m512i p2[2] = { _mm512_loadu_si512(i2[0]), _mm512_loadu_si512(i2[1]) };
	uint32_t g = 0;
	for (; g + 16 <= groups; g += 16) {
		__m512 v[4], q[4], e[16];
		for (int k = 0; k < 4; k++)
			v[k] = _mm512_loadu_ps(qr + 4 * g + 16 * k);
		group_columns(v, q);
		e[0] = _mm512_loadu_ps(base + g);
		for (int b = 0; b < 4; b++)
			for (int t = 0; t < 1 << b; t++)
				e[(1 << b) + t] = _mm512_add_ps(e[t], q[b]);
		__m512i w[4];
		for (int j = 0; j < 4; j++) {
			__m512i d[4];
			for (int i = 0; i < 4; i++) {
				__m512 t = _mm512_add_ps(_mm512_mul_ps(e[4 * j + i], vinv), half);
				d[i] = _mm512_cvttps_epi32(_mm512_min_ps(top, t));
			}
			w[j] = _mm512_shuffle_epi8(
				_mm512_packus_epi16(_mm512_packus_epi32(d[0], d[1]),
						    _mm512_packus_epi32(d[2], d[3])),
				shuf);
		}
		__m512i pa[2], pb[2];
		for (int h = 0; h < 2; h++) {
			pa[h] = _mm512_permutex2var_epi32(w[0], p1[h], w[1]);
			pb[h] = _mm512_permutex2var_epi32(w[2], p1[h], w[3]);
		}
		for (int k = 0; k < 4; k++)
			_mm512_storeu_si512(out + 16 * (g + 4 * k),
					    _mm512_permutex2var_epi32(pa[k / 2], p2[k % 2], pb[k / 2]));
	}
	for (; g < groups; g++)
		lut4_one_avx512(qr + 4 * g, base[g], vinv, out + 16 * g);
}

/* Sixteen groups a step: the 64 residuals, then the 16 values of each
 * position b of the groups in one vector (group_columns()), so lo and hi
 * add in the scalar's order. */
static void groups4_avx512(const float *rq, const float *rc, uint32_t groups, float *qr,
			   float *base, float *msum, float *maxrange)
{
	const __m512 zero = _mm512_setzero_ps(), sign = _mm512_set1_ps(-0.0f);
	__m512 ms = zero, mr = zero;
	for (uint32_t g = 0; g < groups; g += 16) {
		__m512 v[4];
		for (int k = 0; k < 4; k++) {
			v[k] = _mm512_sub_ps(_mm512_loadu_ps(rq + 4 * g + 16 * k),
					     _mm512_loadu_ps(rc + 4 * g + 16 * k));
			_mm512_storeu_ps(qr + 4 * g + 16 * k, v[k]);
		}
		__m512 lo = zero, hi = zero, x[4];
		group_columns(v, x);
		for (int b = 0; b < 4; b++) {
			/* min/max give their second operand for -0 and NaN: +0 */
			lo = _mm512_add_ps(lo, _mm512_min_ps(x[b], zero));
			hi = _mm512_add_ps(hi, _mm512_max_ps(x[b], zero));
		}
		_mm512_storeu_ps(base + g, _mm512_xor_ps(lo, sign));
		ms = _mm512_add_ps(ms, lo);
		mr = _mm512_max_ps(_mm512_sub_ps(hi, lo), mr);
	}
	float t[16], r[16], m = 0;
	_mm512_storeu_ps(t, ms);
	_mm512_storeu_ps(r, mr);
	for (int j = 0; j < 16; j++)
		if (r[j] > m)
			m = r[j];
	*msum = vf_tree16(t);
	*maxrange = m;
}

/* Sixteen groups a step: each 128-bit lane of a load is one group's row,
 * whose byte j%16 a shuffle spreads over the lane; four loads blended give
 * lane k the bytes of groups k, k+4, k+8, k+12 a dword each, which the
 * narrowing to bytes and a transposing shuffle put in group order; then
 * the nibbles, two a byte. */
static void sign_gather_avx512(const uint8_t *batch, uint32_t groups, uint32_t j, uint8_t *out)
{
	const __m512i idx = _mm512_set1_epi8((char)(j & 15));
	const __m128i order = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
	const __m128i low = _mm_set1_epi8(0x0F), pair = _mm_set1_epi16(0x1001);
	int sh = j >= 16 ? 4 : 0;
	for (uint32_t g = 0; g < groups; g += 16) {
		const uint8_t *p = batch + (size_t)g * 16;
		__m512i r = _mm512_shuffle_epi8(_mm512_loadu_si512(p), idx);
		r = _mm512_mask_blend_epi8(0x00F000F000F000F0ULL, r,
					   _mm512_shuffle_epi8(_mm512_loadu_si512(p + 64), idx));
		r = _mm512_mask_blend_epi8(0x0F000F000F000F00ULL, r,
					   _mm512_shuffle_epi8(_mm512_loadu_si512(p + 128), idx));
		r = _mm512_mask_blend_epi8(0xF000F000F000F000ULL, r,
					   _mm512_shuffle_epi8(_mm512_loadu_si512(p + 192), idx));
		__m128i x = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(r), order);
		x = _mm_and_si128(_mm_srli_epi16(x, sh), low);
		/* byte 2i + 16 * byte 2i+1 */
		__m128i y = _mm_packus_epi16(_mm_maddubs_epi16(x, pair), _mm_setzero_si128());
		_mm_storel_epi64((__m128i *)(void *)(out + g / 2), y);
	}
}

/* The codes of nb*8 dimensions from offset off (bytes) of each plane, one
 * byte lane each: each plane's bits are a mask over the lanes, adding the
 * plane's weight where the bit is (the sign plane at `sign`, the others
 * one after the other at `low`). */
static inline __m512i codes_at(const uint8_t *sign, const uint8_t *low, size_t pb,
			       uint32_t bits, size_t off, size_t nb)
{
	uint64_t w = 0;
	memcpy(&w, sign + off, nb);
	__m512i u = _mm512_maskz_mov_epi8(_cvtu64_mask64(w),
					  _mm512_set1_epi8((char)(1u << (bits - 1))));
	for (uint32_t p = 1; p < bits; p++) {
		w = 0;
		memcpy(&w, low + (p - 1) * pb + off, nb);
		u = _mm512_mask_add_epi8(u, _cvtu64_mask64(w), u,
					 _mm512_set1_epi8((char)(1u << (bits - 1 - p))));
	}
	return u;
}

/* 64 dimensions per step (then 32): the codes widened to 16 bits and
 * multiplied with q in pairs (vpmaddwd), summed in 32 bits. */
static int32_t code_dot_avx512(const uint8_t *sign, const uint8_t *low, uint32_t bits,
			       const int16_t *q, uint32_t pdim)
{
	__m512i acc = _mm512_setzero_si512();
	size_t pb = pdim / 8;
	uint32_t c = 0;
	for (; c + 64 <= pdim; c += 64) {
		__m512i u = codes_at(sign, low, pb, bits, c / 8, 8);
		__m512i u0 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(u));
		__m512i u1 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(u, 1));
		acc = _mm512_add_epi32(acc, _mm512_madd_epi16(u0, _mm512_loadu_si512(q + c)));
		acc = _mm512_add_epi32(acc, _mm512_madd_epi16(u1, _mm512_loadu_si512(q + c + 32)));
	}
	if (c < pdim) { /* the last 32 */
		__m512i u = codes_at(sign, low, pb, bits, c / 8, 4);
		__m512i u0 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(u));
		acc = _mm512_add_epi32(acc, _mm512_madd_epi16(u0, _mm512_loadu_si512(q + c)));
	}
	return _mm512_reduce_add_epi32(acc);
}

/* The stages inside one vector of 16 values after their signs: h = 1, 2, 4
 * and (all16) 8.  Each lane is its partner plus or minus itself in one
 * rounding (partner + v where the lane takes a + b, partner - v where it
 * takes a - b, the partner being the lower one there): the same floats as
 * an add and a subtract. */
static inline __m512 fwht16(__m512 v, int all16)
{
	const __m512 s1 = _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
	const __m512 s2 = _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1);
	const __m512 s4 = _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1);
	const __m512 s8 = _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
	v = _mm512_fmadd_ps(v, s1, _mm512_permute_ps(v, 0xB1));        /* h = 1 */
	v = _mm512_fmadd_ps(v, s2, _mm512_permute_ps(v, 0x4E));        /* h = 2 */
	v = _mm512_fmadd_ps(v, s4, _mm512_shuffle_f32x4(v, v, 0xB1));  /* h = 4 */
	return all16 ? _mm512_fmadd_ps(v, s8, _mm512_shuffle_f32x4(v, v, 0x4E)) : v; /* h = 8 */
}

/* 16 * R values of x (R <= 16, a power of two, constant where inlined) in
 * registers: signs, every stage up to 8 R (the stages between vectors pair
 * register j with j + h / 16), stored scaled when `last`.  The stages run
 * in the scalar kernel's order on the same pairs, so every value is the
 * same float. */
static inline __attribute__((always_inline)) void fwht_regs(float *x, const float *sg, uint32_t R,
							    int last, __m512 vs)
{
	__m512 v[16];
#pragma GCC unroll 16
	for (uint32_t r = 0; r < 16; r++)
		if (r < R)
			v[r] = fwht16(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * r),
						    _mm512_loadu_ps(sg + 16 * r)), 1);
#pragma GCC unroll 4
	for (uint32_t hr = 1; hr < 16; hr *= 2)
#pragma GCC unroll 16
		for (uint32_t j = 0; j < 16; j++)
			if (hr < R && j < R && !(j & hr)) {
				__m512 a = v[j], b = v[j + hr];
				v[j] = _mm512_add_ps(a, b);
				v[j + hr] = _mm512_sub_ps(a, b);
			}
#pragma GCC unroll 16
	for (uint32_t r = 0; r < 16; r++)
		if (r < R)
			_mm512_storeu_ps(x + 16 * r, last ? _mm512_mul_ps(v[r], vs) : v[r]);
}

static void rotate_rounds_avx512(float *x, uint32_t n, const float *signs, int rounds,
				 float scale)
{
	__m512 vs = _mm512_set1_ps(scale);
	for (int k = 0; k < rounds; k++) {
		const float *sg = signs + (size_t)k * n;
		switch (n) { /* up to 256 values: the whole transform in registers */
		case 8: { /* the lower half of one vector */
			__m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(0xFF, x),
						 _mm512_maskz_loadu_ps(0xFF, sg));
			_mm512_mask_storeu_ps(x, 0xFF, _mm512_mul_ps(fwht16(v, 0), vs));
			continue;
		}
		case 16: fwht_regs(x, sg, 1, 1, vs); continue;
		case 32: fwht_regs(x, sg, 2, 1, vs); continue;
		case 64: fwht_regs(x, sg, 4, 1, vs); continue;
		case 128: fwht_regs(x, sg, 8, 1, vs); continue;
		case 256: fwht_regs(x, sg, 16, 1, vs); continue;
		}
		/* blocks of 256 in registers, then the stages between them
		 * two at a time in memory (each value from the same two as stage
		 * by stage), the last one scaled as it is stored */
		for (uint32_t i = 0; i < n; i += 256)
			fwht_regs(x + i, sg + i, 16, 0, vs);
		uint32_t h = 256;
		for (; 4 * h <= n; h *= 4) {
			int last = 4 * h == n;
			for (uint32_t i = 0; i < n; i += 4 * h)
				for (uint32_t j = i; j < i + h; j += 16) {
					__m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
					__m512 c = _mm512_loadu_ps(x + j + 2 * h);
					__m512 d = _mm512_loadu_ps(x + j + 3 * h);
					__m512 ab = _mm512_add_ps(a, b), amb = _mm512_sub_ps(a, b);
					__m512 cd = _mm512_add_ps(c, d), cmd = _mm512_sub_ps(c, d);
					__m512 y0 = _mm512_add_ps(ab, cd), y1 = _mm512_add_ps(amb, cmd);
					__m512 y2 = _mm512_sub_ps(ab, cd), y3 = _mm512_sub_ps(amb, cmd);
					if (last) {
						y0 = _mm512_mul_ps(y0, vs);
						y1 = _mm512_mul_ps(y1, vs);
						y2 = _mm512_mul_ps(y2, vs);
						y3 = _mm512_mul_ps(y3, vs);
					}
					_mm512_storeu_ps(x + j, y0);
					_mm512_storeu_ps(x + j + h, y1);
					_mm512_storeu_ps(x + j + 2 * h, y2);
					_mm512_storeu_ps(x + j + 3 * h, y3);
				}
		}
		if (h < n) /* one stage left, scaled */
			for (uint32_t j = 0; j < h; j += 16) {
				__m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
				_mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_add_ps(a, b), vs));
				_mm512_storeu_ps(x + j + h, _mm512_mul_ps(_mm512_sub_ps(a, b), vs));
			}
	}
}

static void panel_min_avx512(const float *dots, size_t npts, const float *norms,
			     uint32_t base, float *best, uint32_t *arg)
{
	__m512 nv = _mm512_loadu_ps(norms), two = _mm512_set1_ps(2.0f);
	__m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)base),
				       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
							 13, 14, 15));
	for (size_t p = 0; p < npts; p++) {
		float *b = best + p * VF_PANEL;
		uint32_t *a = arg + p * VF_PANEL;
		__m512 v = _mm512_sub_ps(nv, _mm512_mul_ps(two, _mm512_loadu_ps(dots + p * VF_PANEL)));
		__mmask16 lt = _mm512_cmp_ps_mask(v, _mm512_loadu_ps(b), _CMP_LT_OQ);
		_mm512_mask_storeu_ps(b, lt, v);
		_mm512_mask_storeu_epi32(a, lt, idx);
	}
}

/* The lanes of a vector from index b that hold one of the np kept. */
static inline __mmask16 kept_lanes(uint32_t np, uint32_t b)
{
	return b >= np ? 0 : np - b >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (np - b)) - 1);
}

/* best_rest with the np kept (np <= 16 * NR) in NR vectors of scores and
 * NR of indices: lanes [0, np) sorted, the lanes after them +inf at first
 * (so the lanes greater than a new score are always a suffix of all of
 * them, and what passes lane np - 1 is dropped at the end).  A score goes
 * in by shifting that suffix one lane up (lane 0 of a vector from the last
 * lane of the one before) and writing it where the suffix began: no branch
 * on where.  A score at or above the worst kept changes nothing, so those
 * the block's mask flagged are put in without checking again.  (pd must
 * hold no NaN: the suffix would not be one.) */
static inline __attribute__((always_inline)) void
best_rest_regs(const float *score, uint32_t from, uint32_t n, uint32_t np, float *pd,
	       uint32_t *pc, const int NR)
{
	__m512 d[8];
	__m512i x[8];
	for (int j = 0; j < NR; j++) {
		uint32_t b = 16 * (uint32_t)j;
		__mmask16 live = kept_lanes(np, b);
		d[j] = _mm512_mask_loadu_ps(_mm512_set1_ps(INFINITY), live, pd + b);
		x[j] = _mm512_maskz_loadu_epi32(live, pc + b);
	}
	const int wj = (int)((np - 1) / 16);
	const __m512i wl = _mm512_set1_epi32((int)((np - 1) % 16));
	__m512 worst = _mm512_permutexvar_ps(wl, d[wj]);
	for (uint32_t c = from; c < n; c += 16) {
		__mmask16 live = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
		__m512 v = _mm512_maskz_loadu_ps(live, score + c);
		uint32_t m = _mm512_mask_cmp_ps_mask(live, v, worst, _CMP_LT_OQ);
		for (; m; m &= m - 1) {
			uint32_t i = c + (uint32_t)__builtin_ctz(m);
			const __m512 X = _mm512_set1_ps(score[i]);
			const __m512i C = _mm512_set1_epi32((int)i);
			uint32_t gt[8];
			for (int j = 0; j < NR; j++)
				gt[j] = _mm512_cmp_ps_mask(d[j], X, _CMP_GT_OQ);
			for (int j = NR - 1; j >= 0; j--) { /* (d[j - 1] still as it was) */
				__m512i pd_ = j ? _mm512_castps_si512(d[j - 1]) : _mm512_setzero_si512();
				__m512i px = j ? x[j - 1] : _mm512_setzero_si512();
				__m512 sd = _mm512_castsi512_ps(
					_mm512_alignr_epi32(_mm512_castps_si512(d[j]), pd_, 15));
				__m512i sx = _mm512_alignr_epi32(x[j], px, 15);
				uint32_t carry = j ? gt[j - 1] >> 15 & 1 : 0;
				__mmask16 up = (__mmask16)gt[j];
				__mmask16 at = (__mmask16)(gt[j] & ~(gt[j] << 1 | carry));
				d[j] = _mm512_mask_mov_ps(_mm512_mask_mov_ps(d[j], up, sd), at, X);
				x[j] = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(x[j], up, sx), at, C);
			}
			worst = _mm512_permutexvar_ps(wl, d[wj]);
		}
	}
	for (int j = 0; j < NR; j++) {
		uint32_t b = 16 * (uint32_t)j;
		__mmask16 live = kept_lanes(np, b);
		_mm512_mask_storeu_ps(pd + b, live, d[j]);
		_mm512_mask_storeu_epi32(pc + b, live, x[j]);
	}
}

static void best_rest_avx512(const float *score, uint32_t from, uint32_t n, uint32_t np,
			     float *pd, uint32_t *pc)
{
	int nan = 0;
	for (uint32_t i = 0; i < np; i++)
		nan |= pd[i] != pd[i];
	if (np > 8 && np <= 128 && !nan) {
		if (np <= 16)
			best_rest_regs(score, from, n, np, pd, pc, 1);
		else if (np <= 32)
			best_rest_regs(score, from, n, np, pd, pc, 2);
		else if (np <= 64)
			best_rest_regs(score, from, n, np, pd, pc, 4);
		else
			best_rest_regs(score, from, n, np, pd, pc, 8);
		return;
	}
	for (uint32_t c = from; c < n; c += 16) {
		__mmask16 live = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
		__m512 v = _mm512_maskz_loadu_ps(live, score + c);
		uint32_t m = _mm512_mask_cmp_ps_mask(live, v, _mm512_set1_ps(pd[np - 1]), _CMP_LT_OQ);
		for (; m; m &= m - 1) /* checked again: pd[np - 1] falls as scores are kept */
			vf_best_offer(score, c + (uint32_t)__builtin_ctz(m), np, pd, pc);
	}
}

const vf_kernels vf_kernels_avx512 = {
	"avx512", l2sq_avx512, dot_avx512, panel_dots_avx512, point_panels_avx512,
	vf_point_panel_set_avx2,
	point_panels_half_avx512, lut4_avx512, groups4_avx512, sign_gather_avx512, pass1_avx512,
	code_dot_avx512, vf_levels_scan_avx2, vf_encode_residual_avx2, vf_encode_codes_avx2,
	rotate_rounds_avx512, panel_min_avx512,
	best_rest_avx512, vf_point_panels_i8_avx2, vf_points_panels_i8_avx2,
	vf_q8_scores_avx2, vf_q8_bounds_avx2, vf_sum_maxabs_avx2,
	vf_quant16_avx2, vf_max_abs_avx2, vf_q8_point_avx2, vf_u8_floats_avx2,
	l2sq_u8_avx512,
};
