/*
 * engine/math/kernels_avx2.c - AVX2 + FMA kernels (compiled with -mavx2 -mfma).
 * Lane structure and operation order match kernels.c exactly.
 */
#include "kernels.h"
#include "block.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline float hsum8(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
	__m128 a = _mm_add_ps(lo, hi);             /* a0..a3 = l[i] + l[i+4] */
	__m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a)); /* b0 = a0+a2, b1 = a1+a3 */
	__m128 c = _mm_add_ss(b, _mm_movehdup_ps(b));  /* b0 + b1 */
	return _mm_cvtss_f32(c);
}

static __m256 tail_load(const void *p, size_t n)
{
	float t[8] = {0};
	memcpy(t, p, 4 * n);
	return _mm256_loadu_ps(t);
}

/* 8 numbers of y from i on: floats, or bytes (u8) as floats */
static inline __attribute__((always_inline)) __m256 y_load8(const void *y, size_t i, int u8)
{
	if (!u8)
		return _mm256_loadu_ps((const float *)y + i);
	const uint8_t *p = (const uint8_t *)y + i;
	return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}

/* The last n < 8 numbers of y from i on, the other lanes 0 */
static inline __attribute__((always_inline)) __m256 y_tail(const void *y, size_t i, size_t n, int u8)
{
	if (!u8)
		return tail_load((const float *)y + i, n);
	float t[8] = {0};
	for (size_t l = 0; l < n; l++)
		t[l] = ((const uint8_t *)y)[i + l];
	return _mm256_loadu_ps(t);
}

/* Squared L2 distance of x and y, y floats or (u8) bytes: one sequence of
 * steps for both, so the bytes give the very float their floats would. */
static inline __attribute__((always_inline)) float l2sq_steps_avx2(const float *x, const void *y,
								   size_t d, int u8)
{
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	size_t i = 0;
	if (d >= 64) { /* eight accumulators, folded as kernels.c's fold8() */
		__m256 w[8];
		for (int j = 0; j < 8; j++)
			w[j] = _mm256_setzero_ps();
		for (; i + 64 <= d; i += 64)
			for (int j = 0; j < 8; j++) {
				__m256 t = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * j),
							 y_load8(y, i + 8 * (size_t)j, u8));
				w[j] = _mm256_fmadd_ps(t, t, w[j]);
			}
		acc0 = _mm256_add_ps(_mm256_add_ps(w[0], w[4]), _mm256_add_ps(w[2], w[6]));
		acc1 = _mm256_add_ps(_mm256_add_ps(w[1], w[5]), _mm256_add_ps(w[3], w[7]));
	}
	for (; i + 16 <= d; i += 16) {
		__m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), y_load8(y, i, u8));
		__m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), y_load8(y, i + 8, u8));
		acc0 = _mm256_fmadd_ps(d0, d0, acc0);
		acc1 = _mm256_fmadd_ps(d1, d1, acc1);
	}
	if (i + 8 <= d) {
		__m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), y_load8(y, i, u8));
		acc0 = _mm256_fmadd_ps(d0, d0, acc0);
		i += 8;
	}
	if (i < d) {
		__m256 d1 = _mm256_sub_ps(tail_load(x + i, d - i), y_tail(y, i, d - i, u8));
		acc1 = _mm256_fmadd_ps(d1, d1, acc1);
	}
	return hsum8(_mm256_add_ps(acc0, acc1));
}

static float l2sq_avx2(const void *a, const void *b, size_t d)
{
	return l2sq_steps_avx2(a, b, d, 0);
}

static float l2sq_u8_avx2(const float *a, const uint8_t *b, size_t d)
{
	return l2sq_steps_avx2(a, b, d, 1);
}

static float dot_avx2(const void *a, const void *b, size_t d)
{
	const float *x = a, *y = b;
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	size_t i = 0;
	if (d >= 64) { /* as l2sq_steps_avx2() */
		__m256 w[8];
		for (int j = 0; j < 8; j++)
			w[j] = _mm256_setzero_ps();
		for (; i + 64 <= d; i += 64)
			for (int j = 0; j < 8; j++)
				w[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j),
						       _mm256_loadu_ps(y + i + 8 * j), w[j]);
		acc0 = _mm256_add_ps(_mm256_add_ps(w[0], w[4]), _mm256_add_ps(w[2], w[6]));
		acc1 = _mm256_add_ps(_mm256_add_ps(w[1], w[5]), _mm256_add_ps(w[3], w[7]));
	}
	for (; i + 16 <= d; i += 16) {
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
	}
	if (i + 8 <= d) {
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
		i += 8;
	}
	if (i < d)
		acc1 = _mm256_fmadd_ps(tail_load(x + i, d - i), tail_load(y + i, d - i), acc1);
	return hsum8(_mm256_add_ps(acc0, acc1));
}

/* 4 points x 16 centroids per step: 8 accumulators. */
/* One panel: out[p*VF_PANEL + j]. */
static void panel_dots1_avx2(const float *pts, size_t npts, size_t d,
			     const float *panel, float *out)
{
	size_t p = 0;
	for (; p + 4 <= npts; p += 4) {
		const float *x0 = pts + p * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
		__m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0,
		       b2 = a0, a3 = a0, b3 = a0;
		for (size_t k = 0; k < d; k++) {
			__m256 c0 = _mm256_loadu_ps(panel + k * VF_PANEL);
			__m256 c1 = _mm256_loadu_ps(panel + k * VF_PANEL + 8);
			__m256 v = _mm256_broadcast_ss(x0 + k);
			a0 = _mm256_fmadd_ps(v, c0, a0);
			b0 = _mm256_fmadd_ps(v, c1, b0);
			v = _mm256_broadcast_ss(x1 + k);
			a1 = _mm256_fmadd_ps(v, c0, a1);
			b1 = _mm256_fmadd_ps(v, c1, b1);
			v = _mm256_broadcast_ss(x2 + k);
			a2 = _mm256_fmadd_ps(v, c0, a2);
			b2 = _mm256_fmadd_ps(v, c1, b2);
			v = _mm256_broadcast_ss(x3 + k);
			a3 = _mm256_fmadd_ps(v, c0, a3);
			b3 = _mm256_fmadd_ps(v, c1, b3);
		}
		float *o = out + p * VF_PANEL;
		_mm256_storeu_ps(o, a0);
		_mm256_storeu_ps(o + 8, b0);
		_mm256_storeu_ps(o + 16, a1);
		_mm256_storeu_ps(o + 24, b1);
		_mm256_storeu_ps(o + 32, a2);
		_mm256_storeu_ps(o + 40, b2);
		_mm256_storeu_ps(o + 48, a3);
		_mm256_storeu_ps(o + 56, b3);
	}
	for (; p < npts; p++) {
		const float *x = pts + p * d;
		__m256 a = _mm256_setzero_ps(), b = a;
		for (size_t k = 0; k < d; k++) {
			__m256 v = _mm256_broadcast_ss(x + k);
			a = _mm256_fmadd_ps(v, _mm256_loadu_ps(panel + k * VF_PANEL), a);
			b = _mm256_fmadd_ps(v, _mm256_loadu_ps(panel + k * VF_PANEL + 8), b);
		}
		_mm256_storeu_ps(out + p * VF_PANEL, a);
		_mm256_storeu_ps(out + p * VF_PANEL + 8, b);
	}
}

/* One point against the M <= 4 panels at p[0..M) side by side (M constant
 * where inlined), from panels of floats or (half) of binary16 values
 * widened exactly as they are loaded (F16C): each lane adds its products in
 * dimension order either way. */
static inline __attribute__((always_inline)) void
panels_side_by_side(const float *x, size_t d, const char *const *p, int half, size_t M,
		    float *out)
{
#define LD(p, o)                                                                       \
	(half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((p) + 2 * (o)))) \
	      : _mm256_loadu_ps((const float *)((p) + 4 * (o))))
	__m256 a[4], b[4];
#pragma GCC unroll 4
	for (size_t j = 0; j < 4; j++)
		a[j] = b[j] = _mm256_setzero_ps();
	for (size_t k = 0; k < d; k++) {
		__m256 v = _mm256_broadcast_ss(x + k);
		size_t o = k * VF_PANEL;
#pragma GCC unroll 4
		for (size_t j = 0; j < 4; j++)
			if (j < M) {
				a[j] = _mm256_fmadd_ps(v, LD(p[j], o), a[j]);
				b[j] = _mm256_fmadd_ps(v, LD(p[j], o + 8), b[j]);
			}
	}
#undef LD
#pragma GCC unroll 4
	for (size_t j = 0; j < 4; j++)
		if (j < M) {
			_mm256_storeu_ps(out + j * VF_PANEL, a[j]);
			_mm256_storeu_ps(out + j * VF_PANEL + 8, b[j]);
		}
}

/* One point against the m <= 4 panels at p[0..m) (the chains of fewer
 * panels are as many FMAs, in fewer loads). */
static inline __attribute__((always_inline)) void
four_panels(const float *x, size_t d, const char *const *p, int half, size_t m, float *out)
{
	switch (m) {
	case 1: panels_side_by_side(x, d, p, half, 1, out); break;
	case 2: panels_side_by_side(x, d, p, half, 2, out); break;
	case 3: panels_side_by_side(x, d, p, half, 3, out); break;
	default: panels_side_by_side(x, d, p, half, 4, out); break;
	}
}

/* One point against 4 panels (64 centroids) per step; in the last step,
 * the 1-3 left side by side too (one after another, each would be two
 * chains of d dependent FMAs). */
static inline __attribute__((always_inline)) void
point_panels_any(const float *x, size_t d, const void *panels, int half, size_t npanels,
		 float *out)
{
	size_t ps = d * VF_PANEL * (half ? 2 : 4); /* bytes a panel */
	for (size_t i = 0; i < npanels; i += 4) {
		size_t m = npanels - i < 4 ? npanels - i : 4;
		const char *p[4];
		for (size_t j = 0; j < m; j++)
			p[j] = (const char *)panels + (i + j) * ps;
		four_panels(x, d, p, half, m, out + i * VF_PANEL);
	}
}

/* The same side by side from m <= 4 pointers. */
void vf_point_panel_set_avx2(const float *x, size_t d, const float *const *pan, size_t m,
			     float *out)
{
	const char *p[4];
	for (size_t j = 0; j < m && j < 4; j++)
		p[j] = (const char *)pan[j];
	four_panels(x, d, p, 0, m, out);
}

static void point_panels_avx2(const float *x, size_t d, const float *panels,
			      size_t npanels, float *out)
{
	point_panels_any(x, d, panels, 0, npanels, out);
}

static void point_panels_half_avx2(const float *x, size_t d, const uint16_t *panels,
				   size_t npanels, float *out)
{
	point_panels_any(x, d, panels, 1, npanels, out);
}

/* Four coordinates a step: the point's four bytes against each centroid's
 * four (vpmaddubsw: at most 2 * 127 * 127 a pair, no saturation), the
 * pairs added into 32 bits (vpmaddwd by ones); eight centroids a vector. */
void vf_point_panels_i8_avx2(const uint8_t *xu, size_t d4, const int8_t *panels,
			     size_t npanels, int32_t *out)
{
	const __m256i ones = _mm256_set1_epi16(1);
	for (size_t i = 0; i < npanels; i++) {
		const int8_t *pan = panels + i * d4 * VF_PANEL;
		__m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
		for (size_t g = 0; g < d4; g += 4, pan += 4 * VF_PANEL) {
			int32_t w;
			memcpy(&w, xu + g, 4);
			__m256i x = _mm256_set1_epi32(w);
			__m256i c0 = _mm256_loadu_si256((const __m256i *)pan);
			__m256i c1 = _mm256_loadu_si256((const __m256i *)(pan + 32));
			a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_maddubs_epi16(x, c0), ones));
			a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_maddubs_epi16(x, c1), ones));
		}
		_mm256_storeu_si256((__m256i *)(out + i * VF_PANEL), a0);
		_mm256_storeu_si256((__m256i *)(out + i * VF_PANEL + 8), a1);
	}
}

/* Four points at once: each load of a centroid's bytes serves four. */
void vf_points_panels_i8_avx2(const uint8_t *xu, size_t npts, size_t d4,
			      const int8_t *panels, size_t npanels, int32_t *out)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const size_t os = npanels * VF_PANEL, full = npts / 4 * 4; /* a point's sums */
	for (size_t i = 0; i < npanels; i++) { /* a panel stays in L1 for all the points */
		for (size_t p = 0; p < full; p += 4) {
			const uint8_t *x0 = xu + p * d4, *x1 = x0 + d4, *x2 = x1 + d4, *x3 = x2 + d4;
			const int8_t *pan = panels + i * d4 * VF_PANEL;
			__m256i a0 = _mm256_setzero_si256(), b0 = a0, a1 = a0, b1 = a0, a2 = a0,
				b2 = a0, a3 = a0, b3 = a0;
			for (size_t g = 0; g < d4; g += 4, pan += 4 * VF_PANEL) {
				__m256i c0 = _mm256_loadu_si256((const __m256i *)pan);
				__m256i c1 = _mm256_loadu_si256((const __m256i *)(pan + 32));
				int32_t w;
#define VF_I8_STEP(xp, a, b)                                                              \
	memcpy(&w, (xp) + g, 4);                                                          \
	a = _mm256_add_epi32(                                                             \
		a, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(w), c0), ones)); \
	b = _mm256_add_epi32(                                                             \
		b, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(w), c1), ones))
				VF_I8_STEP(x0, a0, b0);
				VF_I8_STEP(x1, a1, b1);
				VF_I8_STEP(x2, a2, b2);
				VF_I8_STEP(x3, a3, b3);
#undef VF_I8_STEP
			}
			int32_t *o = out + p * os + i * VF_PANEL;
			_mm256_storeu_si256((__m256i *)o, a0);
			_mm256_storeu_si256((__m256i *)(o + 8), b0);
			_mm256_storeu_si256((__m256i *)(o + os), a1);
			_mm256_storeu_si256((__m256i *)(o + os + 8), b1);
			_mm256_storeu_si256((__m256i *)(o + 2 * os), a2);
			_mm256_storeu_si256((__m256i *)(o + 2 * os + 8), b2);
			_mm256_storeu_si256((__m256i *)(o + 3 * os), a3);
			_mm256_storeu_si256((__m256i *)(o + 3 * os + 8), b3);
		}
	}
	for (size_t p = full; p < npts; p++)
		vf_point_panels_i8_avx2(xu + p * d4, d4, panels, npanels, out + p * os);
}

static inline float hmin8(__m256 v)
{
	__m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_min_ps(m, _mm_movehl_ps(m, m));
	m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
	return _mm_cvtss_f32(m);
}

/* Eight clusters a vector, in the scalar kernel's order of operations (a
 * NaN only from a NaN in the tables) */
void vf_q8_scores_avx2(const int32_t *raw, const int32_t *sum, const float *scale,
		       const float *norms, size_t npanels, float t2, float *smin)
{
	const __m256 tv = _mm256_set1_ps(t2);
	for (size_t p = 0; p < npanels; p++) {
		__m256 m = _mm256_set1_ps(INFINITY);
		for (size_t j = p * VF_PANEL; j < (p + 1) * VF_PANEL; j += 8) {
			__m256i ri = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(raw + j)),
						      _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(sum + j)), 6));
			__m256 a = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ri),
							       _mm256_loadu_ps(scale + j)),
						 tv);
			m = _mm256_min_ps(_mm256_sub_ps(_mm256_loadu_ps(norms + j), a), m);
		}
		smin[p] = hmin8(m);
	}
}

/* Eight clusters a vector, in the scalar kernel's order of operations (no
 * NaN: minima in any order) */
void vf_q8_bounds_avx2(const int32_t *raw, const int32_t *sum, const float *scale,
		       const float *norm, const float *err, const float *norms, size_t npanels,
		       const float par[4], float *lo, float *hi, float *lmin, float *hmin)
{
	const __m256 t = _mm256_set1_ps(par[0]), xn = _mm256_set1_ps(par[1]);
	const __m256 dxn = _mm256_set1_ps(par[2]), sl = _mm256_set1_ps(par[3]);
	const __m256 two = _mm256_set1_ps(2), ulp = _mm256_set1_ps(0x1p-22f);
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	for (size_t p = 0; p < npanels; p++) {
		__m256 lm = _mm256_set1_ps(INFINITY), hm = lm;
		for (size_t j = p * VF_PANEL; j < (p + 1) * VF_PANEL; j += 8) {
			__m256i ri = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(raw + j)),
						      _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(sum + j)), 6));
			__m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(ri),
						 _mm256_mul_ps(t, _mm256_loadu_ps(scale + j)));
			__m256 nr = _mm256_loadu_ps(norm + j), er = _mm256_loadu_ps(err + j);
			__m256 e = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(xn, er), _mm256_mul_ps(dxn, nr)),
						 _mm256_mul_ps(sl, _mm256_add_ps(nr, er)));
			__m256 l, h;
			if (norms) {
				__m256 n2 = _mm256_loadu_ps(norms + j);
				__m256 r = _mm256_mul_ps(ulp, _mm256_add_ps(_mm256_and_ps(n2, absm),
					_mm256_mul_ps(two, _mm256_add_ps(_mm256_and_ps(a, absm), e))));
				l = _mm256_sub_ps(_mm256_sub_ps(n2, _mm256_mul_ps(two, _mm256_add_ps(a, e))), r);
				h = _mm256_add_ps(_mm256_sub_ps(n2, _mm256_mul_ps(two, _mm256_sub_ps(a, e))), r);
			} else {
				__m256 na = _mm256_sub_ps(_mm256_setzero_ps(), a);
				l = _mm256_sub_ps(na, e);
				h = _mm256_add_ps(na, e);
			}
			_mm256_storeu_ps(lo + j, l);
			_mm256_storeu_ps(hi + j, h);
			lm = _mm256_min_ps(l, lm);
			hm = _mm256_min_ps(h, hm);
		}
		lmin[p] = hmin8(lm);
		hmin[p] = hmin8(hm);
	}
}

/* Lanes 0-7 and 8-15 in two vectors, as the scalar kernel's 16 */
void vf_sum_maxabs_avx2(const float *x, uint32_t n, float *sum, float *maxabs)
{
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, m0 = a0, m1 = a0;
	for (uint32_t i = 0; i < n; i += 16) {
		__m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
		a0 = _mm256_add_ps(a0, x0);
		a1 = _mm256_add_ps(a1, x1);
		m0 = _mm256_max_ps(_mm256_and_ps(x0, absm), m0);
		m1 = _mm256_max_ps(_mm256_and_ps(x1, absm), m1);
	}
	float acc[16], mx[16], m = 0;
	_mm256_storeu_ps(acc, a0);
	_mm256_storeu_ps(acc + 8, a1);
	_mm256_storeu_ps(mx, m0);
	_mm256_storeu_ps(mx + 8, m1);
	for (int l = 0; l < 16; l++)
		m = mx[l] > m ? mx[l] : m;
	*sum = vf_tree16(acc);
	*maxabs = m;
}

void vf_quant16_avx2(const float *rq, uint32_t n, float scf, float qm, int16_t *q16)
{
	const __m256 s = _mm256_set1_ps(scf), hi = _mm256_set1_ps(qm), lo = _mm256_set1_ps(-qm);
	const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f);
	for (uint32_t i = 0; i < n; i += 16) {
		__m256i w[2];
		for (int k = 0; k < 2; k++) {
			__m256 v = _mm256_mul_ps(_mm256_loadu_ps(rq + i + 8 * k), s);
			v = _mm256_max_ps(_mm256_min_ps(v, hi), lo);
			v = _mm256_add_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), half));
			w[k] = _mm256_cvttps_epi32(v);
		}
		__m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(w[0], w[1]), 0xD8);
		_mm256_storeu_si256((__m256i *)(q16 + i), p);
	}
}

static void panel_dots_avx2(const float *pts, size_t npts, size_t d,
			    const float *panels, size_t npanels, float *out)
{
	for (size_t i = 0; i < npanels; i++)
		panel_dots1_avx2(pts, npts, d, panels + i * d * VF_PANEL,
				 out + i * npts * VF_PANEL);
}

static uint32_t pass1_avx2(const uint8_t *codes, const uint8_t *lut,
			   uint32_t groups, const uint8_t *add, const uint8_t *r1,
			   const uint8_t *e1, const vf_pass1 *p, float *lo, float *hi)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F), z = _mm256_setzero_si256();
	__m256i t0 = z, t1 = z, t2 = z, t3 = z; /* u32 totals, 8 vectors each */
	uint32_t g = 0;
	/* Each look-up's bytes summed as 16-bit words (an even byte plus 256
	 * times the odd one after it, modulo 2^16) and its odd bytes apart:
	 * the even bytes' sums are the words' sums less 256 times the odd
	 * ones'.  Sums of at most 128 bytes stay below 2^16, so both are
	 * exact; two additions a look-up fewer than widening each byte. */
	while (g < groups) {
		uint32_t end = g + 256 < groups ? g + 256 : groups; /* u16 headroom */
		__m256i wl = z, ol = z, wh = z, oh = z;
		for (; g < end; g += 2) {
			__m256i c = _mm256_loadu_si256((const __m256i *)(codes + g * 16));
			__m256i l = _mm256_loadu_si256((const __m256i *)(lut + g * 16));
			__m256i clo = _mm256_and_si256(c, m4);
			__m256i chi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
			__m256i rlo = _mm256_shuffle_epi8(l, clo);
			__m256i rhi = _mm256_shuffle_epi8(l, chi);
			wl = _mm256_add_epi16(wl, rlo);
			ol = _mm256_add_epi16(ol, _mm256_srli_epi16(rlo, 8));
			wh = _mm256_add_epi16(wh, rhi);
			oh = _mm256_add_epi16(oh, _mm256_srli_epi16(rhi, 8));
		}
		/* even bytes' sums, then bytes 0-7 and 8-15 of each lane in
		 * order, then the two 128-bit lanes (even and odd groups)
		 * folded and widened */
		__m256i el = _mm256_sub_epi16(wl, _mm256_slli_epi16(ol, 8));
		__m256i eh = _mm256_sub_epi16(wh, _mm256_slli_epi16(oh, 8));
#define FOLD(acc, tot)                                                          \
	do {                                                                   \
		__m128i s = _mm_add_epi16(_mm256_castsi256_si128(acc),         \
					  _mm256_extracti128_si256(acc, 1));   \
		tot = _mm256_add_epi32(tot, _mm256_cvtepu16_epi32(s));         \
	} while (0)
		FOLD(_mm256_unpacklo_epi16(el, ol), t0);
		FOLD(_mm256_unpackhi_epi16(el, ol), t1);
		FOLD(_mm256_unpacklo_epi16(eh, oh), t2);
		FOLD(_mm256_unpackhi_epi16(eh, oh), t3);
#undef FOLD
	}
	const __m256 va = _mm256_set1_ps(p->a), vb = _mm256_set1_ps(p->b);
	const __m256 vqc = _mm256_set1_ps(p->qc), vqe = _mm256_set1_ps(p->qerr);
	const __m256 vnq = _mm256_set1_ps(p->nq), vth = _mm256_set1_ps(p->thresh);
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256i tot[4] = {t0, t1, t2, t3};
	uint32_t mask = 0;
	for (int q = 0; q < 4; q++) {
		/* totals are < 2^24, so the conversion is exact */
		__m256 s1 = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(tot[q]), va), vb);
		__m256 r = _mm256_loadu_ps((const float *)(r1 + 32 * q));
		__m256 u = _mm256_add_ps(_mm256_loadu_ps((const float *)(add + 32 * q)), vqc);
		__m256 est = _mm256_add_ps(u, _mm256_mul_ps(r, s1));
		__m256 bound = _mm256_add_ps(_mm256_mul_ps(_mm256_and_ps(r, absm), vqe),
					     _mm256_mul_ps(_mm256_loadu_ps((const float *)(e1 + 32 * q)), vnq));
		__m256 l = _mm256_sub_ps(est, bound);
		_mm256_storeu_ps(lo + 8 * q, l);
		_mm256_storeu_ps(hi + 8 * q, _mm256_add_ps(est, bound));
		/* not greater (a NaN bound prunes nothing), as in the scalar kernel */
		mask |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(l, vth, _CMP_NGT_UQ)) << (8 * q);
	}
	return mask;
}

static void lut4_avx2(const float *qr, uint32_t groups, const float *base, float inv,
		      uint8_t *out)
{
	/* lane e of the low/high vector is entry e / e + 8 */
	const __m256i idx_lo = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	const __m256i idx_hi = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
	__m256 mlo[4], mhi[4];
	for (int b = 0; b < 4; b++) {
		__m256i bit = _mm256_set1_epi32(1 << b);
		mlo[b] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(idx_lo, bit), bit));
		mhi[b] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(idx_hi, bit), bit));
	}
	const __m256 vinv = _mm256_set1_ps(inv), half = _mm256_set1_ps(0.5f);
	const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
	for (uint32_t g = 0; g < groups; g++) {
		__m256 lo = _mm256_set1_ps(base[g]), hi = lo;
		for (int b = 0; b < 4; b++) {
			__m256 r = _mm256_set1_ps(qr[4 * g + b]);
			lo = _mm256_add_ps(lo, _mm256_and_ps(r, mlo[b]));
			hi = _mm256_add_ps(hi, _mm256_and_ps(r, mhi[b]));
		}
		lo = _mm256_add_ps(_mm256_mul_ps(lo, vinv), half);
		hi = _mm256_add_ps(_mm256_mul_ps(hi, vinv), half);
		lo = _mm256_min_ps(_mm256_max_ps(lo, zero), top);
		hi = _mm256_min_ps(_mm256_max_ps(hi, zero), top);
		__m256i a = _mm256_cvttps_epi32(lo), c = _mm256_cvttps_epi32(hi);
		__m256i p16 = _mm256_packus_epi32(a, c);      /* lanes: a0-3 c0-3 | a4-7 c4-7 */
		p16 = _mm256_permute4x64_epi64(p16, 0xD8);   /* a0-3 a4-7 | c0-3 c4-7 */
		__m128i p8 = _mm_packus_epi16(_mm256_castsi256_si128(p16),
					      _mm256_extracti128_si256(p16, 1));
		_mm_storeu_si128((__m128i *)(out + 16 * g), p8);
	}
}

/* 32 dimensions per step: each plane's 4 bytes spread to one byte per
 * dimension (set where the bit is), weighted and summed into the codes
 * u_i, which are widened to 16 bits and multiplied with q in pairs
 * (vpmaddwd), summed in 32 bits.  The planes' addresses and weights are
 * set once; the usual 4 bits have a loop of their own, unrolled. */
static inline __attribute__((always_inline)) int32_t
code_dot_planes(const uint8_t *const *pl, const __m256i *wt, uint32_t bits, const int16_t *q,
		uint32_t pdim)
{
	const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
						2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
	__m256i acc = _mm256_setzero_si256();
	for (uint32_t c = 0; c < pdim; c += 32) {
		__m256i u = _mm256_setzero_si256();
		for (uint32_t p = 0; p < bits; p++) {
			int32_t w4;
			memcpy(&w4, pl[p] + c / 8, 4);
			__m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32(w4), spread);
			x = _mm256_cmpeq_epi8(_mm256_and_si256(x, bit), bit);
			u = _mm256_add_epi8(u, _mm256_and_si256(x, wt[p]));
		}
		__m256i u0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(u));
		__m256i u1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(u, 1));
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(u0, _mm256_loadu_si256((const __m256i *)(q + c))));
		acc = _mm256_add_epi32(acc, _mm256_madd_epi16(u1, _mm256_loadu_si256((const __m256i *)(q + c + 16))));
	}
	__m128i t = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
	t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
	t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
	return _mm_cvtsi128_si32(t);
}

static int32_t code_dot_avx2(const uint8_t *sign, const uint8_t *low, uint32_t bits,
			     const int16_t *q, uint32_t pdim)
{
	const uint8_t *pl[8];
	__m256i wt[8];
	size_t pb = pdim / 8;
	for (uint32_t p = 0; p < bits; p++) {
		pl[p] = p ? low + (p - 1) * pb : sign;
		wt[p] = _mm256_set1_epi8((char)(1u << (bits - 1 - p)));
	}
	if (bits == 4)
		return code_dot_planes(pl, wt, 4, q, pdim);
	return code_dot_planes(pl, wt, bits, q, pdim);
}

/* Eight groups a step: each 128-bit lane of a load is one group's row
 * (groups g + 2m and g + 2m + 1 in the two lanes of load m), whose byte
 * j%16 a shuffle spreads over the lane; four loads blended give dword m
 * of the low lane group g + 2m and of the high lane group g + 2m + 1;
 * their nibbles, the high lane's shifted up, make the four output bytes. */
static void sign_gather_avx2(const uint8_t *batch, uint32_t groups, uint32_t j, uint8_t *out)
{
	const __m256i idx = _mm256_set1_epi8((char)(j & 15));
	const __m128i low = _mm_set1_epi8(0x0F);
	const __m128i first = _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
					    -1, -1);
	const __m128i sh = _mm_cvtsi32_si128(j >= 16 ? 4 : 0);
	for (uint32_t g = 0; g < groups; g += 8) {
		const uint8_t *p = batch + (size_t)g * 16;
		__m256i r = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)p), idx);
		r = _mm256_blend_epi32(
			r, _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p + 32)), idx), 0x22);
		r = _mm256_blend_epi32(
			r, _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p + 64)), idx), 0x44);
		r = _mm256_blend_epi32(
			r, _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p + 96)), idx), 0x88);
		__m128i a = _mm_and_si128(_mm_srl_epi16(_mm256_castsi256_si128(r), sh), low);
		__m128i b = _mm_and_si128(_mm_srl_epi16(_mm256_extracti128_si256(r, 1), sh), low);
		__m128i y = _mm_shuffle_epi8(_mm_or_si128(a, _mm_slli_epi16(b, 4)), first);
		int32_t w = _mm_cvtsi128_si32(y);
		memcpy(out + g / 2, &w, 4);
	}
}

/* Eight groups a step: their 32 residuals transposed in 128-bit lanes, so
 * that vector b holds position b of groups 0, 2, 4, 6 | 1, 3, 5, 7 and lo
 * and hi add in the scalar's order; lo then put in group order for base
 * and the sums (g % 16 < 8 and >= 8 alternate steps). */
static void groups4_avx2(const float *rq, const float *rc, uint32_t groups, float *qr,
			 float *base, float *msum, float *maxrange)
{
	const __m256 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	__m256 ms[2] = {zero, zero}, mr = zero;
	for (uint32_t g = 0; g < groups; g += 8) {
		__m256 v[4];
		for (int k = 0; k < 4; k++) {
			v[k] = _mm256_sub_ps(_mm256_loadu_ps(rq + 4 * g + 8 * k),
					     _mm256_loadu_ps(rc + 4 * g + 8 * k));
			_mm256_storeu_ps(qr + 4 * g + 8 * k, v[k]);
		}
		__m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
		__m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
		__m256 x[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
			       _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
		__m256 lo = zero, hi = zero;
		for (int b = 0; b < 4; b++) {
			/* min/max give their second operand for -0 and NaN: +0 */
			lo = _mm256_add_ps(lo, _mm256_min_ps(x[b], zero));
			hi = _mm256_add_ps(hi, _mm256_max_ps(x[b], zero));
		}
		mr = _mm256_max_ps(_mm256_sub_ps(hi, lo), mr);
		lo = _mm256_permutevar8x32_ps(lo, order);
		_mm256_storeu_ps(base + g, _mm256_xor_ps(lo, sign));
		ms[(g / 8) & 1] = _mm256_add_ps(ms[(g / 8) & 1], lo);
	}
	float t[16], r[8], m = 0;
	_mm256_storeu_ps(t, ms[0]);
	_mm256_storeu_ps(t + 8, ms[1]);
	_mm256_storeu_ps(r, mr);
	for (int j = 0; j < 8; j++)
		if (r[j] > m)
			m = r[j];
	*msum = vf_tree16(t);
	*maxrange = m;
}

/* min_ps(lv, kmax) is (lv < kmax ? lv : kmax), as in the scalar kernel */
void vf_levels_scan_avx2(const float *ax, uint32_t n, float t, float kmax, float *num,
			 float *den)
{
	__m256 vt = _mm256_set1_ps(t), vk = _mm256_set1_ps(kmax), half = _mm256_set1_ps(0.5f);
	__m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
	for (uint32_t i = 0; i < n; i += 8) {
		__m256 x = _mm256_loadu_ps(ax + i);
		__m256 lv = _mm256_mul_ps(vt, x);
		__m256 y = _mm256_add_ps(
			_mm256_cvtepi32_ps(_mm256_cvttps_epi32(_mm256_min_ps(lv, vk))), half);
		a = _mm256_add_ps(a, _mm256_mul_ps(x, y));
		b = _mm256_add_ps(b, _mm256_mul_ps(y, y));
	}
	*num = hsum8(a);
	*den = hsum8(b);
}

/* Four coordinates a step, a double lane each, as the scalar kernel */
void vf_encode_residual_avx2(const float *v, const float *c, uint32_t dim, float *ax,
			     double n4[4], double c4[4])
{
	__m256d n = _mm256_setzero_pd(), cc = _mm256_setzero_pd();
	uint32_t i = 0;
	for (; i + 4 <= dim; i += 4) {
		__m256d cv = _mm256_cvtps_pd(_mm_loadu_ps(c + i));
		__m256d r = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(v + i)), cv);
		n = _mm256_add_pd(n, _mm256_mul_pd(r, r));
		cc = _mm256_add_pd(cc, _mm256_mul_pd(cv, r));
		_mm_storeu_ps(ax + i, _mm256_cvtpd_ps(r));
	}
	_mm256_storeu_pd(n4, n);
	_mm256_storeu_pd(c4, cc);
	for (; i < dim; i++) {
		double r = (double)v[i] - c[i];
		n4[0] += r * r;
		c4[0] += (double)c[i] * r;
		ax[i] = (float)r;
	}
}

/* min_ps(lv, kmax) is (lv < kmax ? lv : kmax); the signs' compare is
 * x >= 0 as in C (true for -0, false for NaN); x < 0 adds +0 to sums[4]
 * (a mask), as the scalar kernel's 0.0 */
static inline void encode_codes4(const float *x, const float *ax, uint32_t n, __m128 vt,
				 __m128 vk, uint32_t half, const float *rc, const float *rmu,
				 uint8_t *u, double sums[5][4], int with_mu)
{
	const __m128 h5 = _mm_set1_ps(0.5f), zero = _mm_setzero_ps();
	const __m128i vh = _mm_set1_epi32((int)half), vh1 = _mm_set1_epi32((int)half - 1);
	const __m128i bytes = _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
					    -1, -1);
	__m256d sa = _mm256_setzero_pd(), yx = sa, yy = sa, cd = sa, sc = sa;
	for (uint32_t i = 0; i < n; i += 4) {
		__m128 a = _mm_loadu_ps(ax + i);
		__m128i k = _mm_cvttps_epi32(_mm_min_ps(_mm_mul_ps(vt, a), vk));
		__m128 y = _mm_add_ps(_mm_cvtepi32_ps(k), h5);
		sa = _mm256_add_pd(sa, _mm256_cvtps_pd(a));
		yx = _mm256_add_pd(yx, _mm256_cvtps_pd(_mm_mul_ps(a, y)));
		yy = _mm256_add_pd(yy, _mm256_cvtps_pd(_mm_mul_ps(y, y)));
		__m128i pos = _mm_castps_si128(_mm_cmp_ps(_mm_loadu_ps(x + i), zero, _CMP_GE_OQ));
		__m128i code = _mm_blendv_epi8(_mm_sub_epi32(vh1, k), _mm_add_epi32(vh, k), pos);
		int32_t w = _mm_cvtsi128_si32(_mm_shuffle_epi8(code, bytes));
		memcpy(u + i, &w, 4);
		__m256d r = _mm256_cvtps_pd(_mm_loadu_ps(rc + i));
		cd = _mm256_add_pd(cd, _mm256_mul_pd(_mm256_cvtepi32_pd(code), r));
		if (with_mu) {
			__m256d d = _mm256_sub_pd(r, _mm256_cvtps_pd(_mm_loadu_ps(rmu + i)));
			__m256d m = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(pos));
			sc = _mm256_add_pd(sc, _mm256_and_pd(d, m));
		}
	}
	_mm256_storeu_pd(sums[0], sa);
	_mm256_storeu_pd(sums[1], yx);
	_mm256_storeu_pd(sums[2], yy);
	_mm256_storeu_pd(sums[3], cd);
	_mm256_storeu_pd(sums[4], sc);
}

void vf_encode_codes_avx2(const float *x, const float *ax, uint32_t n, float t, float kmax,
			  uint32_t half, const float *rc, const float *rmu, uint8_t *u,
			  double sums[5][4])
{
	__m128 vt = _mm_set1_ps(t), vk = _mm_set1_ps(kmax);
	if (rmu)
		encode_codes4(x, ax, n, vt, vk, half, rc, rmu, u, sums, 1);
	else
		encode_codes4(x, ax, n, vt, vk, half, rc, NULL, u, sums, 0);
}

/* The three stages inside one vector (h = 1, 2, 4) of 8 values after their
 * signs: each lane is its partner plus or minus itself in one rounding
 * (partner + v where the lane takes a + b, partner - v where it takes a - b,
 * the partner being the lower one there), the same floats as an add and a
 * subtract. */
static inline __m256 fwht8(__m256 v)
{
	const __m256 s1 = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
	const __m256 s2 = _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1);
	const __m256 s4 = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
	v = _mm256_fmadd_ps(v, s1, _mm256_permute_ps(v, 0xB1));
	v = _mm256_fmadd_ps(v, s2, _mm256_permute_ps(v, 0x4E));
	return _mm256_fmadd_ps(v, s4, _mm256_permute2f128_ps(v, v, 1));
}

/* 8 * R values of x (R <= 8, a power of two, constant where inlined) in
 * registers: signs, every stage up to 4 R, stored scaled when `last`; the
 * stages in the scalar kernel's order on the same pairs. */
static inline __attribute__((always_inline)) void fwht_regs(float *x, const float *sg, uint32_t R,
							    int last, __m256 vs)
{
	__m256 v[8];
#pragma GCC unroll 8
	for (uint32_t r = 0; r < 8; r++)
		if (r < R)
			v[r] = fwht8(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * r),
						   _mm256_loadu_ps(sg + 8 * r)));
#pragma GCC unroll 3
	for (uint32_t hr = 1; hr < 8; hr *= 2)
#pragma GCC unroll 8
		for (uint32_t j = 0; j < 8; j++)
			if (hr < R && j < R && !(j & hr)) {
				__m256 a = v[j], b = v[j + hr];
				v[j] = _mm256_add_ps(a, b);
				v[j + hr] = _mm256_sub_ps(a, b);
			}
#pragma GCC unroll 8
	for (uint32_t r = 0; r < 8; r++)
		if (r < R)
			_mm256_storeu_ps(x + 8 * r, last ? _mm256_mul_ps(v[r], vs) : v[r]);
}

static void rotate_rounds_avx2(float *x, uint32_t n, const float *signs, int rounds,
			       float scale)
{
	__m256 vs = _mm256_set1_ps(scale);
	for (int k = 0; k < rounds; k++) {
		const float *sg = signs + (size_t)k * n;
		switch (n) { /* up to 64 values: the whole transform in registers */
		case 8: fwht_regs(x, sg, 1, 1, vs); continue;
		case 16: fwht_regs(x, sg, 2, 1, vs); continue;
		case 32: fwht_regs(x, sg, 4, 1, vs); continue;
		case 64: fwht_regs(x, sg, 8, 1, vs); continue;
		}
		/* blocks of 64 in registers, then the stages between them two
		 * at a time in memory (each value from the same two as stage by
		 * stage), the last one scaled as it is stored: half the passes */
		for (uint32_t i = 0; i < n; i += 64)
			fwht_regs(x + i, sg + i, 8, 0, vs);
		uint32_t h = 64;
		for (; 4 * h <= n; h *= 4) {
			int last = 4 * h == n;
			for (uint32_t i = 0; i < n; i += 4 * h)
				for (uint32_t j = i; j < i + h; j += 8) {
					__m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
					__m256 c = _mm256_loadu_ps(x + j + 2 * h);
					__m256 d = _mm256_loadu_ps(x + j + 3 * h);
					__m256 ab = _mm256_add_ps(a, b), amb = _mm256_sub_ps(a, b);
					__m256 cd = _mm256_add_ps(c, d), cmd = _mm256_sub_ps(c, d);
					__m256 y0 = _mm256_add_ps(ab, cd), y1 = _mm256_add_ps(amb, cmd);
					__m256 y2 = _mm256_sub_ps(ab, cd), y3 = _mm256_sub_ps(amb, cmd);
					if (last) {
						y0 = _mm256_mul_ps(y0, vs);
						y1 = _mm256_mul_ps(y1, vs);
						y2 = _mm256_mul_ps(y2, vs);
						y3 = _mm256_mul_ps(y3, vs);
					}
					_mm256_storeu_ps(x + j, y0);
					_mm256_storeu_ps(x + j + h, y1);
					_mm256_storeu_ps(x + j + 2 * h, y2);
					_mm256_storeu_ps(x + j + 3 * h, y3);
				}
		}
		if (h < n) /* one stage left, scaled */
			for (uint32_t j = 0; j < h; j += 8) {
				__m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
				_mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_add_ps(a, b), vs));
				_mm256_storeu_ps(x + j + h, _mm256_mul_ps(_mm256_sub_ps(a, b), vs));
			}
	}
}

static void panel_min_avx2(const float *dots, size_t npts, const float *norms,
			   uint32_t base, float *best, uint32_t *arg)
{
	__m256 n0 = _mm256_loadu_ps(norms), n1 = _mm256_loadu_ps(norms + 8);
	__m256 two = _mm256_set1_ps(2.0f);
	__m256i i0 = _mm256_add_epi32(_mm256_set1_epi32((int)base),
				      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	__m256i i1 = _mm256_add_epi32(i0, _mm256_set1_epi32(8));
	for (size_t p = 0; p < npts; p++) {
		float *b = best + p * VF_PANEL;
		uint32_t *a = arg + p * VF_PANEL;
		__m256 v0 = _mm256_sub_ps(n0, _mm256_mul_ps(two, _mm256_loadu_ps(dots + p * VF_PANEL)));
		__m256 v1 = _mm256_sub_ps(n1, _mm256_mul_ps(two, _mm256_loadu_ps(dots + p * VF_PANEL + 8)));
		__m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
		__m256 lt0 = _mm256_cmp_ps(v0, b0, _CMP_LT_OQ), lt1 = _mm256_cmp_ps(v1, b1, _CMP_LT_OQ);
		_mm256_storeu_ps(b, _mm256_blendv_ps(b0, v0, lt0));
		_mm256_storeu_ps(b + 8, _mm256_blendv_ps(b1, v1, lt1));
		__m256i a0 = _mm256_loadu_si256((const __m256i *)a);
		__m256i a1 = _mm256_loadu_si256((const __m256i *)(a + 8));
		_mm256_storeu_si256((__m256i *)a, _mm256_blendv_epi8(a0, i0, _mm256_castps_si256(lt0)));
		_mm256_storeu_si256((__m256i *)(a + 8),
				    _mm256_blendv_epi8(a1, i1, _mm256_castps_si256(lt1)));
	}
}

static void best_rest_avx2(const float *score, uint32_t from, uint32_t n, uint32_t np,
			   float *pd, uint32_t *pc)
{
	uint32_t c = from;
	for (; c + 8 <= n; c += 8) {
		__m256 v = _mm256_loadu_ps(score + c);
		uint32_t m = (uint32_t)_mm256_movemask_ps(
			_mm256_cmp_ps(v, _mm256_set1_ps(pd[np - 1]), _CMP_LT_OQ));
		for (; m; m &= m - 1)
			vf_best_offer(score, c + (uint32_t)__builtin_ctz(m), np, pd, pc);
	}
	for (; c < n; c++)
		vf_best_offer(score, c, np, pd, pc);
}

float vf_max_abs_avx2(const float *x, uint32_t n)
{
	const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 m = _mm256_setzero_ps();
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) /* (a NaN: max_ps gives its second operand) */
		m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), mag), m);
	float l[8], r = 0;
	_mm256_storeu_ps(l, m);
	for (int k = 0; k < 8; k++)
		r = l[k] > r ? l[k] : r;
	for (; i < n; i++)
		r = fabsf(x[i]) > r ? fabsf(x[i]) : r;
	return r;
}

void vf_q8_point_avx2(const float *x, uint32_t dim, uint32_t d4, float t, float inv,
		      uint8_t *xu, double *dx2, double *x2)
{
	const __m256 vinv = _mm256_set1_ps(inv), big = _mm256_set1_ps(0x1.8p23f),
		     lo = _mm256_set1_ps(-63), hi = _mm256_set1_ps(63), off = _mm256_set1_ps(64);
	const __m256d td = _mm256_set1_pd((double)t);
	__m256d e0 = _mm256_setzero_pd(), e1 = e0, s0 = e0, s1 = e0;
	uint32_t i = 0;
	for (; i + 8 <= dim; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		__m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(v, vinv), big), big);
		r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
		__m256i b = _mm256_cvttps_epi32(_mm256_add_ps(r, off));
		__m128i w = _mm_packs_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
		_mm_storel_epi64((__m128i *)(void *)(xu + i), _mm_packus_epi16(w, w));
		__m256d v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
		__m256d v1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
		__m256d d0 = _mm256_sub_pd(v0, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(r)), td));
		__m256d d1 = _mm256_sub_pd(v1, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(r, 1)), td));
		e0 = _mm256_add_pd(e0, _mm256_mul_pd(d0, d0));
		e1 = _mm256_add_pd(e1, _mm256_mul_pd(d1, d1));
		s0 = _mm256_add_pd(s0, _mm256_mul_pd(v0, v0));
		s1 = _mm256_add_pd(s1, _mm256_mul_pd(v1, v1));
	}
	double dx2l[8], x2l[8];
	_mm256_storeu_pd(dx2l, e0);
	_mm256_storeu_pd(dx2l + 4, e1);
	_mm256_storeu_pd(x2l, s0);
	_mm256_storeu_pd(x2l + 4, s1);
	for (; i < d4; i++) /* (i % 8 continues the lanes: i is a multiple of 8 here) */
		vf_q8_point_step(x, dim, i, t, inv, xu, dx2l, x2l);
	vf_q8_point_sums(dx2l, x2l, dx2, x2);
}

void vf_u8_floats_avx2(const uint8_t *x, uint32_t n, float *out)
{
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
						  _mm_loadl_epi64((const __m128i *)(const void *)(x + i)))));
	for (; i < n; i++)
		out[i] = x[i];
}

const vf_kernels vf_kernels_avx2 = {
	"avx2", l2sq_avx2, dot_avx2, panel_dots_avx2, point_panels_avx2,
	vf_point_panel_set_avx2,
	point_panels_half_avx2, lut4_avx2,
	groups4_avx2, sign_gather_avx2,
	pass1_avx2, code_dot_avx2, vf_levels_scan_avx2, vf_encode_residual_avx2,
	vf_encode_codes_avx2, rotate_rounds_avx2, panel_min_avx2,
	best_rest_avx2, vf_point_panels_i8_avx2, vf_points_panels_i8_avx2, vf_q8_scores_avx2, vf_q8_bounds_avx2, vf_sum_maxabs_avx2,
	vf_quant16_avx2, vf_max_abs_avx2, vf_q8_point_avx2, vf_u8_floats_avx2,
	l2sq_u8_avx2,
};
