/*
 * engine/math/kernels.c - scalar kernels (their run-time dispatch:
 * kernels_select.c).  The scalar code mirrors the SIMD lane structure so
 * results are identical.
 */
#include "kernels.h"
#include "block.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vecfs.h"

static inline float ldf(const void *p, size_t i)
{
	float f;
	memcpy(&f, (const char *)p + 4 * i, 4);
	return f;
}

/* Horizontal sum of 8 lanes in the order the AVX2 code uses. */
static float hsum8(const float l[8])
{
	float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
	float b0 = a0 + a2, b1 = a1 + a3;
	return b0 + b1;
}

/* Number i of y: floats, or (u8) bytes as floats */
static inline __attribute__((always_inline)) float y_at(const void *y, size_t i, int u8)
{
	return u8 ? (float)((const uint8_t *)y)[i] : ldf(y, i);
}

/* Eight accumulators of 8 lanes (w[j] takes numbers 8j..8j+7 of each
 * 64-number step), folded into two: what the SIMD kernels' accumulators of
 * 16 or 8 lanes hold, added in their order.  Four independent sums of 16
 * lanes instead of one chain: a 784-number distance waited on each add. */
static inline void fold8(float w[8][8], float acc0[8], float acc1[8])
{
	for (int l = 0; l < 8; l++) {
		acc0[l] = (w[0][l] + w[4][l]) + (w[2][l] + w[6][l]);
		acc1[l] = (w[1][l] + w[5][l]) + (w[3][l] + w[7][l]);
	}
}

/* Squared L2 distance of x and y, y floats or (u8) bytes: one sequence of
 * steps for both, so the bytes give the very float their floats would.
 * From 64 numbers on, eight accumulators of 8 lanes over 64-number steps
 * (fold8()); then two over 16-number steps, one 8-number step and a
 * lane-wise tail. */
static inline __attribute__((always_inline)) float l2sq_steps(const void *a, const void *b,
							      size_t d, int u8)
{
	float acc0[8] = {0}, acc1[8] = {0};
	size_t i = 0;
	if (d >= 64) {
		float w[8][8] = {{0}};
		for (; i + 64 <= d; i += 64)
			for (int j = 0; j < 8; j++)
				for (int l = 0; l < 8; l++) {
					size_t o = i + 8 * (size_t)j + (size_t)l;
					float x = ldf(a, o) - y_at(b, o, u8);
					w[j][l] = fmaf(x, x, w[j][l]);
				}
		fold8(w, acc0, acc1);
	}
	for (; i + 16 <= d; i += 16)
		for (int l = 0; l < 8; l++) {
			float x = ldf(a, i + l) - y_at(b, i + l, u8);
			float y = ldf(a, i + 8 + l) - y_at(b, i + 8 + l, u8);
			acc0[l] = fmaf(x, x, acc0[l]);
			acc1[l] = fmaf(y, y, acc1[l]);
		}
	if (i + 8 <= d) {
		for (int l = 0; l < 8; l++) {
			float x = ldf(a, i + l) - y_at(b, i + l, u8);
			acc0[l] = fmaf(x, x, acc0[l]);
		}
		i += 8;
	}
	for (int l = 0; i + l < d; l++) {
		float x = ldf(a, i + l) - y_at(b, i + l, u8);
		acc1[l] = fmaf(x, x, acc1[l]);
	}
	for (int l = 0; l < 8; l++)
		acc0[l] += acc1[l];
	return hsum8(acc0);
}

static float l2sq_scalar(const void *a, const void *b, size_t d)
{
	return l2sq_steps(a, b, d, 0);
}

static float l2sq_u8_scalar(const float *a, const uint8_t *b, size_t d)
{
	return l2sq_steps(a, b, d, 1);
}

static float dot_scalar(const void *a, const void *b, size_t d)
{
	float acc0[8] = {0}, acc1[8] = {0};
	size_t i = 0;
	if (d >= 64) { /* as l2sq_steps() */
		float w[8][8] = {{0}};
		for (; i + 64 <= d; i += 64)
			for (int j = 0; j < 8; j++)
				for (int l = 0; l < 8; l++) {
					size_t o = i + 8 * (size_t)j + (size_t)l;
					w[j][l] = fmaf(ldf(a, o), ldf(b, o), w[j][l]);
				}
		fold8(w, acc0, acc1);
	}
	for (; i + 16 <= d; i += 16)
		for (int l = 0; l < 8; l++) {
			acc0[l] = fmaf(ldf(a, i + l), ldf(b, i + l), acc0[l]);
			acc1[l] = fmaf(ldf(a, i + 8 + l), ldf(b, i + 8 + l), acc1[l]);
		}
	if (i + 8 <= d) {
		for (int l = 0; l < 8; l++)
			acc0[l] = fmaf(ldf(a, i + l), ldf(b, i + l), acc0[l]);
		i += 8;
	}
	for (int l = 0; i + l < d; l++)
		acc1[l] = fmaf(ldf(a, i + l), ldf(b, i + l), acc1[l]);
	for (int l = 0; l < 8; l++)
		acc0[l] += acc1[l];
	return hsum8(acc0);
}

static void panel_dots_scalar(const float *pts, size_t npts, size_t d,
			      const float *panels, size_t npanels, float *out)
{
	for (size_t i = 0; i < npanels; i++) {
		const float *panel = panels + i * d * VF_PANEL;
		for (size_t p = 0; p < npts; p++)
			for (int j = 0; j < VF_PANEL; j++) {
				float acc = 0;
				for (size_t k = 0; k < d; k++)
					acc = fmaf(pts[p * d + k], panel[k * VF_PANEL + j], acc);
				out[(i * npts + p) * VF_PANEL + j] = acc;
			}
	}
}

static void point_panels_scalar(const float *x, size_t d, const float *panels,
				size_t npanels, float *out)
{
	panel_dots_scalar(x, 1, d, panels, npanels, out);
}

static void point_panel_set_scalar(const float *x, size_t d, const float *const *pan, size_t m,
				   float *out)
{
	for (size_t i = 0; i < m; i++)
		panel_dots_scalar(x, 1, d, pan[i], 1, out + i * VF_PANEL);
}

static void point_panels_half_scalar(const float *x, size_t d, const uint16_t *panels,
				     size_t npanels, float *out)
{
	for (size_t i = 0; i < npanels; i++) {
		const uint16_t *panel = panels + i * d * VF_PANEL;
		for (int j = 0; j < VF_PANEL; j++) {
			float acc = 0;
			for (size_t k = 0; k < d; k++)
				acc = fmaf(x[k], vf_half_to_float(panel[k * VF_PANEL + j]), acc);
			out[i * VF_PANEL + j] = acc;
		}
	}
}

static void point_panels_i8_scalar(const uint8_t *xu, size_t d4, const int8_t *panels,
				   size_t npanels, int32_t *out)
{
	for (size_t i = 0; i < npanels; i++) {
		const int8_t *panel = panels + i * d4 * VF_PANEL;
		for (int j = 0; j < VF_PANEL; j++) {
			int32_t acc = 0;
			for (size_t k = 0; k < d4; k++)
				acc += (int32_t)xu[k] * panel[(k / 4 * VF_PANEL + j) * 4 + k % 4];
			out[i * VF_PANEL + j] = acc;
		}
	}
}

static void points_panels_i8_scalar(const uint8_t *xu, size_t npts, size_t d4,
				    const int8_t *panels, size_t npanels, int32_t *out)
{
	for (size_t p = 0; p < npts; p++)
		point_panels_i8_scalar(xu + p * d4, d4, panels, npanels, out + p * npanels * VF_PANEL);
}

static void q8_scores_scalar(const int32_t *raw, const int32_t *sum, const float *scale,
			     const float *norms, size_t npanels, float t2, float *smin)
{
	for (size_t p = 0; p < npanels; p++) {
		float m = INFINITY;
		for (size_t j = p * VF_PANEL; j < (p + 1) * VF_PANEL; j++) {
			float v = norms[j] - ((float)(raw[j] - sum[j] * 64) * scale[j]) * t2;
			m = v < m ? v : m;
		}
		smin[p] = m;
	}
}

/* par: t, xn, dxn, slack */
static void q8_bounds_scalar(const int32_t *raw, const int32_t *sum, const float *scale,
			     const float *norm, const float *err, const float *norms,
			     size_t npanels, const float par[4], float *lo, float *hi, float *lmin,
			     float *hmin)
{
	for (size_t p = 0; p < npanels; p++) {
		float lm = INFINITY, hm = INFINITY;
		for (size_t j = p * VF_PANEL; j < (p + 1) * VF_PANEL; j++) {
			float a = (float)(raw[j] - sum[j] * 64) * (par[0] * scale[j]);
			float e = (par[1] * err[j] + par[2] * norm[j]) + par[3] * (norm[j] + err[j]);
			float l, h;
			if (norms) {
				float r = 0x1p-22f * (fabsf(norms[j]) + 2 * (fabsf(a) + e));
				l = (norms[j] - 2 * (a + e)) - r;
				h = (norms[j] - 2 * (a - e)) + r;
			} else {
				l = (0 - a) - e;
				h = (0 - a) + e;
			}
			lo[j] = l;
			hi[j] = h;
			lm = l < lm ? l : lm;
			hm = h < hm ? h : hm;
		}
		lmin[p] = lm;
		hmin[p] = hm;
	}
}

static void sum_maxabs_scalar(const float *x, uint32_t n, float *sum, float *maxabs)
{
	float acc[16] = {0}, mx[16] = {0}, m = 0;
	for (uint32_t i = 0; i < n; i += 16)
		for (int l = 0; l < 16; l++) {
			float a = x[i + l];
			acc[l] += a;
			mx[l] = fabsf(a) > mx[l] ? fabsf(a) : mx[l];
		}
	for (int l = 0; l < 16; l++)
		m = mx[l] > m ? mx[l] : m;
	*sum = vf_tree16(acc);
	*maxabs = m;
}

static float max_abs_scalar(const float *x, uint32_t n)
{
	float m = 0;
	for (uint32_t i = 0; i < n; i++)
		m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
	return m;
}

static void u8_floats_scalar(const uint8_t *x, uint32_t n, float *out)
{
	for (uint32_t i = 0; i < n; i++)
		out[i] = x[i];
}

static void q8_point_scalar(const float *x, uint32_t dim, uint32_t d4, float t, float inv,
			    uint8_t *xu, double *dx2, double *x2)
{
	double dx2l[8] = {0}, x2l[8] = {0};
	for (uint32_t i = 0; i < d4; i++)
		vf_q8_point_step(x, dim, i, t, inv, xu, dx2l, x2l);
	vf_q8_point_sums(dx2l, x2l, dx2, x2);
}

static void quant16_scalar(const float *rq, uint32_t n, float scf, float qm, int16_t *q16)
{
	for (uint32_t i = 0; i < n; i++) {
		float v = rq[i] * scf;
		v = v > qm ? qm : v < -qm ? -qm : v;
		q16[i] = (int16_t)(int32_t)(v + copysignf(0.5f, v));
	}
}

uint16_t vf_float_to_half(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
	uint32_t exp = u >> 23 & 0xff, man = u & 0x7fffff;
	if (exp == 0xff) /* infinity, NaN (kept quiet and non-zero) */
		return sign | 0x7c00 | (man ? 0x200 | (uint16_t)(man >> 13) : 0);
	int e = (int)exp - 127 + 15;
	if (e >= 31)
		return sign | 0x7c00;
	if (e <= 0) { /* subnormal or zero: 24-bit significand shifted right */
		if (e < -10)
			return sign;
		uint32_t sig = man | 0x800000, shift = (uint32_t)(14 - e);
		uint32_t h = sig >> shift, rest = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rest > half || (rest == half && (h & 1)))
			h++;
		return sign | (uint16_t)h;
	}
	uint32_t h = (uint32_t)e << 10 | man >> 13, rest = man & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++; /* may carry into the exponent, up to infinity: right */
	return sign | (uint16_t)h;
}

float vf_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1f, man = h & 0x3ff, u;
	if (exp == 0x1f)
		u = sign | 0x7f800000 | man << 13;
	else if (exp)
		u = sign | (exp - 15 + 127) << 23 | man << 13;
	else if (man) { /* subnormal: normalize */
		int e = -1;
		do {
			man <<= 1;
			e++;
		} while (!(man & 0x400));
		u = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
	} else
		u = sign;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t pass1_scalar(const uint8_t *codes, const uint8_t *lut,
			     uint32_t groups, const uint8_t *add, const uint8_t *r1,
			     const uint8_t *e1, const vf_pass1 *p, float *lo, float *hi)
{
	uint32_t mask = 0;
	for (int v = 0; v < 32; v++) {
		uint32_t acc = 0;
		int shift = v >= 16 ? 4 : 0;
		for (uint32_t g = 0; g < groups; g++) {
			uint8_t nib = (codes[g * 16 + (v & 15)] >> shift) & 15;
			acc += lut[g * 16 + nib];
		}
		float s1 = (float)acc * p->a + p->b;
		float r = ldf(r1, v);
		float est = (ldf(add, v) + p->qc) + r * s1;
		float bound = fabsf(r) * p->qerr + ldf(e1, v) * p->nq;
		lo[v] = est - bound;
		hi[v] = est + bound;
		if (!(lo[v] > p->thresh)) /* a NaN bound prunes nothing */
			mask |= 1u << v;
	}
	return mask;
}

static void lut4_scalar(const float *qr, uint32_t groups, const float *base,
			float inv, uint8_t *out)
{
	for (uint32_t g = 0; g < groups; g++)
		for (int e = 0; e < 16; e++) {
			float v = base[g];
			for (int b = 0; b < 4; b++)
				v = v + ((e >> b) & 1 ? qr[4 * g + b] : 0.0f);
			float t = v * inv + 0.5f;
			out[16 * g + e] = (uint8_t)(t <= 0 ? 0 : t >= 255 ? 255 : (int)t);
		}
}

static int32_t code_dot_scalar(const uint8_t *sign, const uint8_t *low, uint32_t bits,
			       const int16_t *q, uint32_t pdim)
{
	int32_t acc = 0;
	size_t pb = pdim / 8;
	for (uint32_t i = 0; i < pdim; i++) {
		uint32_t u = ((sign[i / 8] >> (i % 8)) & 1u) << (bits - 1);
		for (uint32_t p = 1; p < bits; p++)
			u += ((low[(p - 1) * pb + i / 8] >> (i % 8)) & 1u) << (bits - 1 - p);
		acc += (int32_t)u * q[i];
	}
	return acc;
}

static void levels_scan_scalar(const float *ax, uint32_t n, float t, float kmax,
			       float *num, float *den)
{
	float a[8] = {0}, b[8] = {0};
	for (uint32_t i = 0; i < n; i += 8)
		for (int l = 0; l < 8; l++) {
			float lv = t * ax[i + l];
			float y = (float)(int32_t)(lv < kmax ? lv : kmax) + 0.5f;
			a[l] += ax[i + l] * y;
			b[l] += y * y;
		}
	*num = hsum8(a);
	*den = hsum8(b);
}

static void encode_residual_scalar(const float *v, const float *c, uint32_t dim, float *ax,
				   double n4[4], double c4[4])
{
	for (int l = 0; l < 4; l++)
		n4[l] = c4[l] = 0;
	uint32_t i = 0;
	for (; i + 4 <= dim; i += 4)
		for (int l = 0; l < 4; l++) {
			double r = (double)v[i + l] - c[i + l];
			n4[l] += r * r;
			c4[l] += (double)c[i + l] * r;
			ax[i + l] = (float)r;
		}
	for (; i < dim; i++) {
		double r = (double)v[i] - c[i];
		n4[0] += r * r;
		c4[0] += (double)c[i] * r;
		ax[i] = (float)r;
	}
}

/* v if cond, else +0, without a branch (the signs of a query's residual
 * are a coin toss each: a branch on them mispredicts half the time). */
static inline float keep_if(int cond, float v)
{
	uint32_t b;
	memcpy(&b, &v, sizeof b);
	b &= -(uint32_t)(cond != 0);
	memcpy(&v, &b, sizeof v);
	return v;
}

/* the same for a double */
static inline double keep_if_d(int cond, double v)
{
	uint64_t b;
	memcpy(&b, &v, sizeof b);
	b &= -(uint64_t)(cond != 0);
	memcpy(&v, &b, sizeof v);
	return v;
}

static void encode_codes_scalar(const float *x, const float *ax, uint32_t n, float t, float kmax,
				uint32_t half, const float *rc, const float *rmu, uint8_t *u,
				double sums[5][4])
{
	/* local sums: the stores through u could alias the caller's */
	double sa[4] = {0}, yx[4] = {0}, yy[4] = {0}, cd[4] = {0}, sc[4] = {0};
	for (uint32_t i = 0; i < n; i += 4)
		for (int l = 0; l < 4; l++) {
			float lv = t * ax[i + l];
			uint32_t k = (uint32_t)(int32_t)(lv < kmax ? lv : kmax);
			float y = (float)k + 0.5f;
			uint32_t code = x[i + l] >= 0 ? half + k : half - 1 - k;
			u[i + l] = (uint8_t)code;
			sa[l] += ax[i + l];
			yx[l] += ax[i + l] * y;
			yy[l] += y * y;
			cd[l] += (double)code * rc[i + l];
			if (rmu)
				sc[l] += keep_if_d(x[i + l] >= 0, (double)rc[i + l] - rmu[i + l]);
		}
	memcpy(sums[0], sa, sizeof sa);
	memcpy(sums[1], yx, sizeof yx);
	memcpy(sums[2], yy, sizeof yy);
	memcpy(sums[3], cd, sizeof cd);
	memcpy(sums[4], sc, sizeof sc);
}

static void rotate_rounds_scalar(float *x, uint32_t n, const float *signs, int rounds,
				 float scale)
{
	for (int k = 0; k < rounds; k++) {
		const float *sg = signs + (size_t)k * n;
		for (uint32_t i = 0; i < n; i++)
			x[i] *= sg[i];
		for (uint32_t h = 1; h < n; h *= 2)
			for (uint32_t i = 0; i < n; i += 2 * h)
				for (uint32_t j = i; j < i + h; j++) {
					float a = x[j], b = x[j + h];
					x[j] = a + b;
					x[j + h] = a - b;
				}
		for (uint32_t i = 0; i < n; i++)
			x[i] *= scale;
	}
}

static void panel_min_scalar(const float *dots, size_t npts, const float *norms,
			     uint32_t base, float *best, uint32_t *arg)
{
	for (size_t p = 0; p < npts; p++)
		for (uint32_t j = 0; j < VF_PANEL; j++) {
			float v = norms[j] - 2 * dots[p * VF_PANEL + j];
			if (v < best[p * VF_PANEL + j]) {
				best[p * VF_PANEL + j] = v;
				arg[p * VF_PANEL + j] = base + j;
			}
		}
}

static void best_rest_scalar(const float *score, uint32_t from, uint32_t n, uint32_t np,
			     float *pd, uint32_t *pc)
{
	for (uint32_t c = from; c < n; c++)
		vf_best_offer(score, c, np, pd, pc);
}

static void groups4_scalar(const float *rq, const float *rc, uint32_t groups, float *qr,
			  float *base, float *msum, float *maxrange)
{
	float ms[16] = {0}, m = 0;
	for (uint32_t g = 0; g < groups; g++) {
		float lo = 0, hi = 0;
		for (int b = 0; b < 4; b++) {
			float v = rq[4 * g + b] - rc[4 * g + b];
			qr[4 * g + b] = v;
			lo += keep_if(v < 0, v);
			hi += keep_if(v > 0, v);
		}
		base[g] = -lo;
		ms[g % 16] += lo;
		if (hi - lo > m)
			m = hi - lo;
	}
	*msum = vf_tree16(ms);
	*maxrange = m;
}

/* A float32 sum of squares or products at least this large (and finite)
 * lost nothing to underflow: each term that underflowed is off by at most
 * 2^-149, d <= 2^14 of them, far below half an ulp of 2^-80.  A finite
 * sum had no overflow on the way (an overflow stays infinite or turns
 * NaN).  Outside, the sums are taken again in double, where no product of
 * two floats overflows or underflows. */
#define VF_SAFE_LO 0x1p-80f

static inline int float_ok(float r)
{
	float a = fabsf(r);
	return a >= VF_SAFE_LO && a <= FLT_MAX;
}

/* In double, b floats or (u8) bytes: the same value for both */
static double l2sq_double(const void *a, const void *b, size_t d, int u8)
{
	double s = 0;
	for (size_t i = 0; i < d; i++) {
		double x = (double)ldf(a, i) - y_at(b, i, u8);
		s += x * x;
	}
	return s;
}

static double dot_double(const void *a, const void *b, size_t d)
{
	double s = 0;
	for (size_t i = 0; i < d; i++)
		s += (double)ldf(a, i) * ldf(b, i);
	return s;
}

double vf_l2sq_exact(const vf_kernels *kn, const void *a, const void *b, size_t d)
{
	float r = kn->l2sq(a, b, d);
	return float_ok(r) ? r : l2sq_double(a, b, d, 0);
}

double vf_l2sq_exact_u8(const vf_kernels *kn, const float *a, const uint8_t *b, size_t d)
{
	float r = kn->l2sq_u8(a, b, d);
	return float_ok(r) ? r : l2sq_double(a, b, d, 1);
}

double vf_dot_exact(const vf_kernels *kn, const void *a, const void *b, size_t d)
{
	float r = kn->dot(a, b, d);
	return float_ok(r) ? r : dot_double(a, b, d);
}

double vf_cosine_exact(const vf_kernels *kn, const void *q, const void *x, size_t d)
{
	/* q is a unit vector: |q.x| <= |x|, so a safe |x|^2 makes q.x safe too
	 * (its underflowed terms are as small against |x|) */
	float dv = kn->dot(x, x, d);
	double c;
	if (float_ok(dv)) {
		c = kn->dot(q, x, d) / sqrtf(dv);
	} else {
		double n2 = dot_double(x, x, d);
		c = n2 > 0 ? dot_double(q, x, d) / sqrt(n2) : 0;
	}
	double e = 1 - c;
	return 2 * (e < 0 ? 0 : e > 2 ? 2 : e);
}

const vf_kernels vf_kernels_scalar = {
	"scalar", l2sq_scalar, dot_scalar, panel_dots_scalar, point_panels_scalar,
	point_panel_set_scalar,
	point_panels_half_scalar, lut4_scalar, groups4_scalar, vf_sign_gather, pass1_scalar,
	code_dot_scalar, levels_scan_scalar, encode_residual_scalar, encode_codes_scalar,
	rotate_rounds_scalar, panel_min_scalar, best_rest_scalar, point_panels_i8_scalar,
	points_panels_i8_scalar, q8_scores_scalar, q8_bounds_scalar, sum_maxabs_scalar, quant16_scalar,
	max_abs_scalar, q8_point_scalar, u8_floats_scalar, l2sq_u8_scalar,
};

