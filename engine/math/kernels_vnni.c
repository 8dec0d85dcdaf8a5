/*
 * engine/math/kernels_vnni.c - the AVX-512 table with the 8-bit centroid
 * kernels on AVX-512 VNNI: one vpdpbusd multiplies four unsigned bytes of
 * the point by four signed bytes of each of a panel's VF_PANEL centroids
 * and adds the four products into its 32-bit lane, where the AVX2 kernels
 * need two vectors and three instructions (vpmaddubsw, vpmaddwd, vpaddd).
 * The sums are exact integers either way: the table gives the same
 * results as the AVX-512 one, faster.
 */
#include "kernels.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>

/* One point: two accumulators, one for the even groups of four coordinates
 * and one for the odd ones, so that each vpdpbusd waits on the one before
 * last. */
static void point_panels_i8_vnni(const uint8_t *xu, size_t d4, const int8_t *panels,
				 size_t npanels, int32_t *out)
{
	for (size_t i = 0; i < npanels; i++) {
		const int8_t *pan = panels + i * d4 * VF_PANEL;
		__m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
		size_t g = 0;
		for (; g + 8 <= d4; g += 8, pan += 8 * VF_PANEL) {
			int32_t w0, w1;
			memcpy(&w0, xu + g, 4);
			memcpy(&w1, xu + g + 4, 4);
			a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(w0), _mm512_loadu_si512(pan));
			a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(w1),
						 _mm512_loadu_si512(pan + 4 * VF_PANEL));
		}
		if (g < d4) {
			int32_t w;
			memcpy(&w, xu + g, 4);
			a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(w), _mm512_loadu_si512(pan));
		}
		_mm512_storeu_si512(out + i * VF_PANEL, _mm512_add_epi32(a0, a1));
	}
}

/* Four points at once: each load of a panel's bytes serves four. */
static void points_panels_i8_vnni(const uint8_t *xu, size_t npts, size_t d4,
				  const int8_t *panels, size_t npanels, int32_t *out)
{
	const size_t os = npanels * VF_PANEL, full = npts / 4 * 4; /* a point's sums */
	for (size_t i = 0; i < npanels; i++) { /* a panel stays in L1 for all the points */
		for (size_t p = 0; p < full; p += 4) {
			const uint8_t *x0 = xu + p * d4, *x1 = x0 + d4, *x2 = x1 + d4, *x3 = x2 + d4;
			const int8_t *pan = panels + i * d4 * VF_PANEL;
			__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
			for (size_t g = 0; g < d4; g += 4, pan += 4 * VF_PANEL) {
				__m512i c = _mm512_loadu_si512(pan);
				int32_t w0, w1, w2, w3;
				memcpy(&w0, x0 + g, 4);
				memcpy(&w1, x1 + g, 4);
				memcpy(&w2, x2 + g, 4);
				memcpy(&w3, x3 + g, 4);
				a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(w0), c);
				a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(w1), c);
				a2 = _mm512_dpbusd_epi32(a2, _mm512_set1_epi32(w2), c);
				a3 = _mm512_dpbusd_epi32(a3, _mm512_set1_epi32(w3), c);
			}
			int32_t *o = out + p * os + i * VF_PANEL;
			_mm512_storeu_si512(o, a0);
			_mm512_storeu_si512(o + os, a1);
			_mm512_storeu_si512(o + 2 * os, a2);
			_mm512_storeu_si512(o + 3 * os, a3);
		}
	}
	for (size_t p = full; p < npts; p++)
		point_panels_i8_vnni(xu + p * d4, d4, panels, npanels, out + p * os);
}

static vf_kernels table;
static pthread_once_t made = PTHREAD_ONCE_INIT;

static void make(void)
{
	table = vf_kernels_avx512;
	table.name = "avx512vnni";
	table.point_panels_i8 = point_panels_i8_vnni;
	table.points_panels_i8 = points_panels_i8_vnni;
}

const vf_kernels *vf_kernels_avx512vnni(void)
{
	pthread_once(&made, make);
	return &table;
}
