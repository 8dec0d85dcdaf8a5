/*
 * engine/math/kernels.h - the hot numeric loops, with a scalar, an AVX2 and an
 * AVX-512 implementation chosen at run time.  All give bit-identical
 * results: the scalar code performs the same operations (fused
 * multiply-adds, integer sums) in the same order as the SIMD lanes.
 */
#ifndef VF_KERNELS_H
#define VF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define VF_PANEL 16 /* centroids per panel */

/* Constants of the first pass for one (query, cluster). */
typedef struct vf_pass1 {
	float a, b;      /* S1 = a*acc + b (sign-plane inner product) */
	float qc;        /* per-cluster distance term */
	float qerr;      /* worst-case look-up quantization error of S1 */
	float nq;        /* |q - c| */
	float thresh;    /* prune when lower bound > thresh */
} vf_pass1;

typedef struct vf_kernels {
	const char *name;
	/* squared L2 distance and dot product of unaligned float arrays */
	float (*l2sq)(const void *a, const void *b, size_t d);
	float (*dot)(const void *a, const void *b, size_t d);
	/* dots of npts points (row-major, d floats each) with npanels
	 * consecutive panels of VF_PANEL centroids, each laid out
	 * [d][VF_PANEL]; out[(i*npts + p)*VF_PANEL + j] for panel i */
	void (*panel_dots)(const float *pts, size_t npts, size_t d,
			   const float *panels, size_t npanels, float *out);
	/* one point against npanels consecutive panels; out[VF_PANEL*i + j] */
	void (*point_panels)(const float *x, size_t d, const float *panels,
			     size_t npanels, float *out);
	/* the same against m <= 4 panels anywhere: out[VF_PANEL*i + j] for
	 * panel pan[i] */
	void (*point_panel_set)(const float *x, size_t d, const float *const *pan, size_t m,
				float *out);
	/* the same against panels of binary16 values (vf_half_to_float()
	 * of each, which is exact): lane j adds fmaf(x[k], c[k], acc) for
	 * k = 0..d-1 in order, as the scalar panel_dots does */
	void (*point_panels_half)(const float *x, size_t d, const uint16_t *panels,
				  size_t npanels, float *out);
	/* First-pass tables: for group g and subset e of its 4 dimensions,
	 * v = base[g] + the qr values of e's dimensions (added in dimension
	 * order, +0 for absent ones), out[16g + e] = trunc(clamp(v*inv + .5,
	 * 0, 255)). */
	void (*lut4)(const float *qr, uint32_t groups, const float *base, float inv,
		     uint8_t *out);
	/* A cluster's query residual, by groups of 4 dimensions (groups a
	 * multiple of 16): qr[i] = rq[i] - rc[i]; per group g, lo = 0 plus
	 * min(qr[4g+b], 0) for b = 0..3 in order, hi the same of the maxima
	 * (+0 for -0 and NaN, as v < 0 ? v : 0 and v > 0 ? v : 0 give);
	 * base[g] = -lo; *msum = the lo of the groups with g % 16 == j added
	 * in order into sum j, the 16 sums then added as vf_tree16 does;
	 * *maxrange = the largest hi - lo, 0 at least. */
	void (*groups4)(const float *rq, const float *rc, uint32_t groups, float *qr,
			float *base, float *msum, float *maxrange);
	/* A survivor's sign plane out of its batch, as layout's
	 * vf_sign_gather() (block.h) writes it. */
	void (*sign_gather)(const uint8_t *batch, uint32_t groups, uint32_t j, uint8_t *out);
	/* First pass over one batch of 32 codes: 4-bit look-up sums into
	 * estimates and bounds; returns the bit mask of slots whose lower
	 * bound is not above p->thresh (NaN included; padding slots too when
	 * thresh is infinite: callers mask them).  groups is a multiple of 8.  lo[32] and hi[32] receive the lower
	 * and upper bounds. */
	uint32_t (*pass1)(const uint8_t *codes, const uint8_t *lut, uint32_t groups,
			  const uint8_t *add, const uint8_t *r1, const uint8_t *e1,
			  const vf_pass1 *p, float *lo, float *hi);
	/* Second pass: sum_i u_i q[i], exactly, over a code of `bits` (1..8)
	 * bit planes of pdim bits each (a multiple of 32; dimension 8j+b at
	 * bit b of byte j): the sign plane (bit bits-1 of u_i) at `sign`, planes
	 * 1..bits-1 (plane p holds bit bits-1-p) one after the other at `low`.
	 * The caller keeps (2^bits - 1) * sum_i |q[i]| below 2^31. */
	int32_t (*code_dot)(const uint8_t *sign, const uint8_t *low, uint32_t bits,
			    const int16_t *q, uint32_t pdim);
	/* One scale t of the encoder's search for levels, over n (a multiple
	 * of 8) magnitudes ax >= 0: y_i = trunc(min(t*ax_i, kmax)) + 1/2;
	 * *num = sum ax_i*y_i, *den = sum y_i*y_i, lane i % 8 by lane (a
	 * multiply, then an add), the lanes added as in hsum8. */
	void (*levels_scan)(const float *ax, uint32_t n, float t, float kmax, float *num,
			    float *den);
	/* The encoder's residual: r_i = (double)v_i - c_i for i < dim,
	 * ax_i = (float)r_i; lane i % 4 of n4 adds r_i * r_i and of c4
	 * adds c_i * r_i, in order of i, except the last dim % 4, which go
	 * to lane 0 (a multiply, then an add, in double). */
	void (*encode_residual)(const float *v, const float *c, uint32_t dim, float *ax,
				double n4[4], double c4[4]);
	/* The encoder's codes, over n (a multiple of 8) rotated coordinates
	 * x and their magnitudes ax: level k_i = trunc(min(t * ax_i, kmax)),
	 * y_i = k_i + 1/2 (in float), code u[i] = half + k_i where x_i >= 0,
	 * else half - 1 - k_i.  Lane i % 4 of each sum adds in order of i,
	 * in double: sums[0] ax_i, sums[1] the float product ax_i * y_i,
	 * sums[2] the float y_i * y_i, sums[3] u_i * rc_i and, when rmu is
	 * not NULL, sums[4] (x_i >= 0 ? rc_i - rmu_i : +0). */
	void (*encode_codes)(const float *x, const float *ax, uint32_t n, float t, float kmax,
			     uint32_t half, const float *rc, const float *rmu, uint8_t *u,
			     double sums[5][4]);
	/* `rounds` times over x (n floats, a power of two >= 8): multiply by
	 * the round's n signs, the fast Walsh-Hadamard transform (butterflies
	 * x[j], x[j+h] = a + b, a - b for h = 1, 2, 4, ...), multiply by
	 * scale. */
	void (*rotate_rounds)(float *x, uint32_t n, const float *signs, int rounds,
			      float scale);
	/* Lane by lane minimum over panels: for each of npts points and each
	 * lane j of a panel (the dots as panel_dots writes them), with
	 * v = norms[j] - 2 * dots[p*VF_PANEL + j]: where v < best[p*VF_PANEL +
	 * j], best takes v and arg takes base + j. */
	void (*panel_min)(const float *dots, size_t npts, const float *norms, uint32_t base,
			  float *best, uint32_t *arg);
	/* The rest of a selection of the np smallest scores (np >= 1): pd[0..np)
	 * holds, ascending (pc alongside), the np smallest of score[0..from);
	 * each of score[from..n) in order that is below pd[np - 1] then takes
	 * its place by vf_insert_sorted(), the last one dropping out.  (The SIMD
	 * kernels pass over a vector at once when none of its scores is below
	 * pd[np - 1]; the others are checked again one by one.) */
	void (*best_rest)(const float *score, uint32_t from, uint32_t n, uint32_t np, float *pd,
			  uint32_t *pc);
	/* One point of d4 (a multiple of 4) unsigned bytes xu, each at most
	 * 127, against npanels consecutive panels of 8-bit centroids, each
	 * laid out [d4 / 4][VF_PANEL][4] (four coordinates of a centroid side
	 * by side): out[VF_PANEL * i + j] = sum_k xu[k] * c_j[k] in 32 bits,
	 * exactly. */
	void (*point_panels_i8)(const uint8_t *xu, size_t d4, const int8_t *panels,
				size_t npanels, int32_t *out);
	/* The same for npts points, d4 bytes each, one after the other (each
	 * centroid's bytes read once for four points): point p's sums at
	 * out[VF_PANEL * (npanels * p + i) + j]. */
	void (*points_panels_i8)(const uint8_t *xu, size_t npts, size_t d4,
				 const int8_t *panels, size_t npanels, int32_t *out);
	/* Probe-score bounds from those sums (vf_cindex_probe_bounds()), for
	 * j < npanels * VF_PANEL, in this order of operations:
	 * a = (float)(raw[j] - 64 sum[j]) * (t * scale[j]),
	 * e = (xn * err[j] + dxn * norm[j]) + slack * (norm[j] + err[j]);
	 * with norms: r = 2^-22 (|norms[j]| + 2 (|a| + e)),
	 * lo = (norms[j] - 2 (a + e)) - r, hi = (norms[j] - 2 (a - e)) + r;
	 * without: lo = (0 - a) - e, hi = (0 - a) + e.  lmin[p], hmin[p]: the
	 * smallest lo and hi of panel p. */
	/* Assignment's first look (vf_nearest_bounded()), for j < npanels *
	 * VF_PANEL, in this order of operations: s = norms[j] -
	 * ((float)(raw[j] - 64 sum[j]) * scale[j]) * t2; smin[p]: the smallest s
	 * of panel p. */
	void (*q8_scores)(const int32_t *raw, const int32_t *sum, const float *scale,
			  const float *norms, size_t npanels, float t2, float *smin);
	void (*q8_bounds)(const int32_t *raw, const int32_t *sum, const float *scale,
			  const float *norm, const float *err, const float *norms, size_t npanels,
			  const float par[4], float *lo, float *hi, float *lmin, float *hmin);
	/* The second pass's query (vf_qstate_set()): over n (a multiple of
	 * 16) values, sum lane by lane (lane i % 16, in order of i, the lanes
	 * then added as vf_tree16 does) and the largest magnitude; and
	 * q16[i] = (int32)(v + copysign(0.5, v)) of v = rq[i] * scf clamped to
	 * [-qm, qm]. */
	void (*sum_maxabs)(const float *x, uint32_t n, float *sum, float *maxabs);
	void (*quant16)(const float *rq, uint32_t n, float scf, float qm, int16_t *q16);
	/* The largest |x_i| of x[0..n), +0 at least (a NaN is passed over). */
	float (*max_abs)(const float *x, uint32_t n);
	/* The 8-bit first look's bytes of a point (kmeans.c's q8_query()):
	 * over d4 (a multiple of 4, at least dim) values v_i = x_i for i <
	 * dim, else 0: r_i = (v_i * inv + 1.5 * 2^23) - 1.5 * 2^23 in float,
	 * clamped to [-63, 63], xu[i] = r_i + 64; in double, e_i = v_i - r_i *
	 * t; lane i % 8 of *dx2 adds e_i * e_i and of *x2 adds v_i * v_i, in
	 * order of i (a multiply, then an add), the lanes then added in
	 * order. */
	void (*q8_point)(const float *x, uint32_t dim, uint32_t d4, float t, float inv,
			 uint8_t *xu, double *dx2, double *x2);
	/* out[i] = x[i] for i < n: a record's numbers held in bytes, as
	 * floats (exact) */
	void (*u8_floats)(const uint8_t *x, uint32_t n, float *out);
	/* l2sq(a, y) of y[i] = b[i], a record's numbers held in bytes: the
	 * same float as l2sq() of the floats u8_floats() gives (the same
	 * operations in the same order), without writing them out */
	float (*l2sq_u8)(const float *a, const uint8_t *b, size_t d);
} vf_kernels;

/* Put (sc, c) in place i of the ascending pd[0..i] (pc alongside), moving
 * the greater ones up by one: after any equal ones, so ties stay in the
 * order they came. */
static inline void vf_insert_sorted(float *pd, uint32_t *pc, uint32_t i, float sc, uint32_t c)
{
	for (; i > 0 && pd[i - 1] > sc; i--) {
		pd[i] = pd[i - 1];
		pc[i] = pc[i - 1];
	}
	pd[i] = sc;
	pc[i] = c;
}

/* best_rest's step for score[c]: kept if it is below the worst one kept,
 * pd[np - 1] (a NaN never is). */
static inline void vf_best_offer(const float *score, uint32_t c, uint32_t np, float *pd,
				 uint32_t *pc)
{
	if (score[c] < pd[np - 1])
		vf_insert_sorted(pd, pc, np - 1, score[c], c);
}

/* IEEE binary16 <-> float: to half rounds to nearest, ties to even
 * (overflow to infinity, NaN stays NaN); back is exact. */
uint16_t vf_float_to_half(float f);
float vf_half_to_float(uint16_t h);

/* t[0..16) added pairwise: ((t0 + t1) + (t2 + t3)) + ... up the tree. */
static inline float vf_tree16(const float *t)
{
	float a[8], b[4];
	for (int i = 0; i < 8; i++)
		a[i] = t[2 * i] + t[2 * i + 1];
	for (int i = 0; i < 4; i++)
		b[i] = a[2 * i] + a[2 * i + 1];
	return (b[0] + b[1]) + (b[2] + b[3]);
}

extern const vf_kernels vf_kernels_scalar;
#if defined(__x86_64__)
extern const vf_kernels vf_kernels_avx2;
extern const vf_kernels vf_kernels_avx512; /* needs AVX-512 F, BW, VL, DQ */
/* the AVX-512 table with the 8-bit centroid kernels on AVX-512 VNNI */
const vf_kernels *vf_kernels_avx512vnni(void);
/* shared by the AVX2 and AVX-512 tables */
void vf_levels_scan_avx2(const float *ax, uint32_t n, float t, float kmax, float *num,
			 float *den);
void vf_encode_residual_avx2(const float *v, const float *c, uint32_t dim, float *ax,
			     double n4[4], double c4[4]);
void vf_encode_codes_avx2(const float *x, const float *ax, uint32_t n, float t, float kmax,
			  uint32_t half, const float *rc, const float *rmu, uint8_t *u,
			  double sums[5][4]);
void vf_point_panels_i8_avx2(const uint8_t *xu, size_t d4, const int8_t *panels,
			     size_t npanels, int32_t *out);
void vf_point_panel_set_avx2(const float *x, size_t d, const float *const *pan, size_t m,
			     float *out);
void vf_points_panels_i8_avx2(const uint8_t *xu, size_t npts, size_t d4,
			      const int8_t *panels, size_t npanels, int32_t *out);
void vf_q8_scores_avx2(const int32_t *raw, const int32_t *sum, const float *scale,
		       const float *norms, size_t npanels, float t2, float *smin);
void vf_q8_bounds_avx2(const int32_t *raw, const int32_t *sum, const float *scale,
		       const float *norm, const float *err, const float *norms, size_t npanels,
		       const float par[4], float *lo, float *hi, float *lmin, float *hmin);
void vf_sum_maxabs_avx2(const float *x, uint32_t n, float *sum, float *maxabs);
void vf_quant16_avx2(const float *rq, uint32_t n, float scf, float qm, int16_t *q16);
float vf_max_abs_avx2(const float *x, uint32_t n);
void vf_q8_point_avx2(const float *x, uint32_t dim, uint32_t d4, float t, float inv,
		      uint8_t *xu, double *dx2, double *x2);
void vf_u8_floats_avx2(const uint8_t *x, uint32_t n, float *out);
#endif

/* The scalar q8_point's step for coordinate i (lane i % 8 of dx2l, x2l),
 * which the SIMD kernels take for the coordinates past their last whole
 * vector. */
static inline void vf_q8_point_step(const float *x, uint32_t dim, uint32_t i, float t,
				    float inv, uint8_t *xu, double *dx2l, double *x2l)
{
	float v = i < dim ? x[i] : 0;
	float r = (v * inv + 0x1.8p23f) - 0x1.8p23f;
	r = r > 63 ? 63 : r < -63 ? -63 : r;
	xu[i] = (uint8_t)(int)(r + 64);
	double e = (double)v - (double)r * t;
	dx2l[i % 8] += e * e;
	x2l[i % 8] += (double)v * v;
}

/* The lanes of q8_point's sums added in order. */
static inline void vf_q8_point_sums(const double *dx2l, const double *x2l, double *dx2,
				    double *x2)
{
	double a = 0, b = 0;
	for (int l = 0; l < 8; l++) {
		a += dx2l[l];
		b += x2l[l];
	}
	*dx2 = a;
	*x2 = b;
}

/* The exact distances of float32 arrays, in double: the squared L2
 * distance, the dot product, and the cosine distance in index units,
 * 2 (1 - q.x / |x|), of a unit q and any x (clamped to [0, 4]). */
double vf_l2sq_exact(const vf_kernels *kn, const void *a, const void *b, size_t d);
double vf_dot_exact(const vf_kernels *kn, const void *a, const void *b, size_t d);
double vf_cosine_exact(const vf_kernels *kn, const void *q, const void *x, size_t d);
/* vf_l2sq_exact() of a and the floats of the bytes b[0..d): the same
 * value, read from the bytes in place. */
double vf_l2sq_exact_u8(const vf_kernels *kn, const float *a, const uint8_t *b, size_t d);

/* The table named "scalar", "avx2" or "avx512", or NULL when this CPU
 * lacks it (or the name is unknown). */
const vf_kernels *vf_kernels_named(const char *name);

/* The best table this CPU supports, or the one VECFS_KERNEL names
 * (scalar, avx2, avx512) when the CPU has it. */
const vf_kernels *vf_kernels_get(void);

#endif
