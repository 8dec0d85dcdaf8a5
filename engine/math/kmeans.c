/*
 * engine/math/kmeans.c - k-means (k-means++ seeding, Lloyd iterations on all
 * cores, empty-cluster repair) and nearest-centroid search; how many
 * clusters and how large a training sample suit a store.
 */
#include "io.h"
#include "kmeans.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "parallel.h"
#include "rotation.h"
#include "vecfs.h"

/* The smallest largest coordinate of a query or centroid the 8-bit first
 * look takes: the product of their scales (1/63 and 1/127 of it) stays a
 * normal float. */
#define VF_Q8_TINY 1e-15f

int vf_cindex_init(vf_cindex *ci, const float *centroids, uint32_t k, uint32_t dim)
{
	ci->k = k;
	ci->dim = dim;
	ci->npanels = (k + VF_PANEL - 1) / VF_PANEL;
	ci->half = NULL;
	ci->half_unscale = 1;
	ci->q8 = NULL;
	ci->q8_scale = ci->q8_norm = ci->q8_err = NULL;
	ci->q8_sum = NULL;
	ci->d4 = 0;
	ci->panels = vf_calloc((size_t)ci->npanels * dim * VF_PANEL, sizeof(float));
	ci->norms = vf_malloc(sizeof(float) * (size_t)ci->npanels * VF_PANEL);
	if (!ci->panels || !ci->norms) {
		vf_cindex_free(ci);
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < ci->npanels * VF_PANEL; j++) {
		float *pan = ci->panels + (size_t)(j / VF_PANEL) * dim * VF_PANEL;
		if (j < k) {
			double n2 = 0;
			for (uint32_t d = 0; d < dim; d++) {
				float c = centroids[(size_t)j * dim + d];
				pan[(size_t)d * VF_PANEL + j % VF_PANEL] = c;
				n2 += (double)c * c;
			}
			ci->norms[j] = (float)n2;
		} else {
			ci->norms[j] = FLT_MAX; /* never nearest */
		}
	}
	return 0;
}

void vf_cindex_free(vf_cindex *ci)
{
	free(ci->panels);
	free(ci->norms);
	free(ci->half);
	free(ci->q8);
	free(ci->q8_scale);
	ci->panels = ci->norms = NULL;
	ci->half = NULL;
	ci->q8 = NULL;
	ci->q8_scale = ci->q8_norm = ci->q8_err = NULL;
	ci->q8_sum = NULL;
}

/* Coordinate d of centroid j as probing scores it: binary16 when there is
 * a copy in binary16, else float. */
static double probe_coord(const vf_cindex *ci, size_t j, uint32_t d)
{
	size_t at = j / VF_PANEL * ci->dim * VF_PANEL + j % VF_PANEL + (size_t)d * VF_PANEL;
	return ci->half ? (double)vf_half_to_float(ci->half[at]) * ci->half_unscale
			: (double)ci->panels[at];
}

/* The 8-bit copy of the centroids probing scores (see vf_cindex): each
 * centroid scaled so its largest coordinate is 127, rounded; its scale,
 * the norm of the rounded centroid and of what the rounding lost (in
 * double, rounded up), and the sum of its bytes. */
static int add_q8(vf_cindex *ci)
{
	size_t np = ci->npanels, nc = np * VF_PANEL, d4 = (ci->dim + 3) / 4 * 4;
	int8_t *q = vf_calloc(np * d4 * VF_PANEL, 1);
	float *f = vf_malloc(sizeof(float) * nc * 3 + sizeof(int32_t) * nc);
	if (!q || !f) {
		free(q);
		free(f);
		return -ENOMEM;
	}
	ci->q8 = q;
	ci->q8_scale = f;
	ci->q8_norm = f + nc;
	ci->q8_err = f + 2 * nc;
	ci->q8_sum = (int32_t *)(f + 3 * nc);
	ci->d4 = (uint32_t)d4;
	ci->q8_nmax = ci->q8_emax = ci->q8_n2max = 0;
	for (size_t j = 0; j < nc; j++) {
		int8_t *o = q + j / VF_PANEL * d4 * VF_PANEL + j % VF_PANEL * 4;
		double mx = 0;
		for (uint32_t d = 0; d < ci->dim; d++) {
			double c = fabs(probe_coord(ci, j, d));
			mx = c > mx && c <= DBL_MAX ? c : mx;
		}
		/* (the binary16 unscale is a power of two: (mx / 127) * unscale
		 * of the binary16 values is mx / 127 of the unscaled ones) */
		float sc = mx > 0 ? (float)(mx / 127) : 1.0f;
		double n2 = 0, e2 = 0;
		int32_t sum = 0;
		for (uint32_t d = 0; d < ci->dim; d++) {
			double c = probe_coord(ci, j, d);
			double r = nearbyint(c / sc);
			r = r > 127 ? 127 : r < -127 ? -127 : r;
			o[(size_t)d / 4 * VF_PANEL * 4 + d % 4] = (int8_t)r;
			sum += (int32_t)r;
			n2 += r * sc * r * sc;
			e2 += (c - r * sc) * (c - r * sc);
		}
		if (j < ci->k) {
			ci->q8_nmax = fmaxf(ci->q8_nmax, (float)(sqrt(n2) * (1 + 1e-6)));
			ci->q8_emax = fmaxf(ci->q8_emax, (float)(sqrt(e2) * (1 + 1e-6)));
			ci->q8_n2max = fmaxf(ci->q8_n2max, fabsf(ci->norms[j]));
		}
		ci->q8_scale[j] = sc;
		ci->q8_norm[j] = (float)(sqrt(n2) * (1 + 1e-6));
		ci->q8_err[j] = (float)(sqrt(e2) * (1 + 1e-6));
		ci->q8_sum[j] = sum;
		/* centroids past float32's squares, or so small that a
		 * query's scale times theirs could leave float32's normal
		 * range (VF_Q8_TINY): no first look */
		if (!isfinite(ci->q8_norm[j]) || !isfinite(ci->q8_err[j]) || !isfinite(sc) ||
		    (j < ci->k && !isfinite(ci->norms[j])) || (mx > 0 && sc < VF_Q8_TINY / 127)) {
			free(ci->q8);
			free(ci->q8_scale);
			ci->q8 = NULL;
			ci->q8_scale = ci->q8_norm = ci->q8_err = NULL;
			ci->q8_sum = NULL;
			return 0;
		}
	}
	return 0;
}

void vf_cindex_dots(const vf_cindex *ci, const float *x, float *dots)
{
	vf_kernels_get()->point_panels(x, ci->dim, ci->panels, ci->npanels, dots);
}

int vf_cindex_add_half(vf_cindex *ci)
{
	size_t n = (size_t)ci->npanels * ci->dim * VF_PANEL;
	float mx = 0;
	for (size_t i = 0; i < n; i++) {
		float a = fabsf(ci->panels[i]);
		if (a > mx && a <= FLT_MAX)
			mx = a;
	}
	/* 2^e * mx in [2^14, 2^15]; 2^-e stays a normal float */
	int e = 0;
	if (mx > 0) {
		frexpf(mx, &e); /* mx = m * 2^e, m in [0.5, 1) */
		e = 15 - e;
		e = e > 126 ? 126 : e < -126 ? -126 : e;
	}
	uint16_t *h = vf_malloc(n * sizeof *h);
	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		h[i] = vf_float_to_half(ldexpf(ci->panels[i], e));
	free(ci->half);
	ci->half = h;
	ci->half_unscale = ldexpf(1.0f, -e);
	return ci->npanels >= VF_Q8_MIN_PANELS ? add_q8(ci) : 0;
}

int vf_cindex_assign_init(vf_cindex *ai, const vf_cindex *ci)
{
	*ai = *ci; /* the float panels and norms, borrowed */
	ai->half = NULL;
	ai->half_unscale = 1;
	ai->q8 = NULL;
	ai->q8_scale = ai->q8_norm = ai->q8_err = NULL;
	ai->q8_sum = NULL;
	return ai->npanels >= VF_ASSIGN_MIN_PANELS ? add_q8(ai) : 0;
}

void vf_cindex_assign_free(vf_cindex *ai)
{
	free(ai->q8);
	free(ai->q8_scale);
	memset(ai, 0, sizeof *ai);
}

int vf_cindex_probe_panels(const vf_cindex *ci, const float *x, size_t p0, size_t p1,
			   float *dots)
{
	vf_kernels_get()->point_panels_half(x, ci->dim, ci->half + p0 * ci->dim * VF_PANEL,
					    p1 - p0, dots + p0 * VF_PANEL);
	int finite = 1;
	for (size_t j = p0 * VF_PANEL; j < p1 * VF_PANEL; j++) {
		dots[j] *= ci->half_unscale;
		finite &= isfinite(dots[j]);
	}
	return finite ? 0 : -1;
}

/* x in 7 bits a coordinate (|x8| <= 63, stored as x8 + 64), x ~= t x8.
 * With c~ the binary16 centroid, c^ = s q8 its 8-bit copy and x^ = t x8:
 * <x, c~> - <x^, c^> = <x, c~ - c^> + <x - x^, c^>, at most |x| err + |x - x^|
 * norm; the float rounding of the binary16 dot (d fused multiply-adds, each
 * within 2^-24 of a partial sum no larger than |x| |c~|) and of this one
 * are covered by (d + 16) 2^-22 (|x| + |x - x^|) (norm + err); that of
 * |c|^2 - 2 dot by 2^-22 (||c|^2| + 2 (|dot| + e)) (the q8_bounds kernel). */
/* x for the first look: its bytes xu (d4 of them) and the bounds'
 * parameters par (see vf_kernels.q8_bounds); 0, or -1 as
 * vf_cindex_probe_bounds() says. */
static int q8_query(const vf_cindex *ci, const float *x, uint8_t *xu, float par[4])
{
	const vf_kernels *kn = vf_kernels_get();
	float mx = kn->max_abs(x, ci->dim);
	if (!(mx >= VF_Q8_TINY) || !(mx <= 1e30f))
		return -1;
	float t = mx / 63, inv = 63 / mx;
	/* v * inv (at most 63.0...) rounded to the nearest integer, ties to
	 * even, as nearbyintf() does, by adding and taking away 1.5 * 2^23;
	 * the sums in eight lanes of double */
	double dx2, x2;
	kn->q8_point(x, ci->dim, ci->d4, t, inv, xu, &dx2, &x2);
	float xn = (float)(sqrt(x2) * (1 + 1e-6)), dxn = (float)(sqrt(dx2) * (1 + 1e-6));
	/* (no NaN: the factors are finite, so an overflow gives -inf lo and
	 * +inf hi, the widest bounds) */
	par[0] = t;
	par[1] = xn;
	par[2] = dxn;
	par[3] = (float)((ci->dim + 16) * 0x1p-22) * (xn + dxn);
	return 0;
}

/* The bounds from the sums raw of x's bytes against the 8-bit copy. */
static void q8_finish(const vf_cindex *ci, const vf_kernels *kn, const int32_t *raw, int neg,
		      const float par[4], float *lo, float *hi, float *lmin, float *hmin)
{
	kn->q8_bounds(raw, ci->q8_sum, ci->q8_scale, ci->q8_norm, ci->q8_err,
		      neg ? NULL : ci->norms, ci->npanels, par, lo, hi, lmin, hmin);
	/* the padding: never a cluster */
	size_t last = (size_t)(ci->npanels - 1) * VF_PANEL;
	float lm = INFINITY, hm = INFINITY;
	for (size_t j = last; j < (size_t)ci->npanels * VF_PANEL; j++) {
		if (j >= ci->k)
			lo[j] = hi[j] = INFINITY;
		lm = lo[j] < lm ? lo[j] : lm;
		hm = hi[j] < hm ? hi[j] : hm;
	}
	lmin[ci->npanels - 1] = lm;
	hmin[ci->npanels - 1] = hm;
}

/* x in 7 bits a coordinate (|x8| <= 63, stored as x8 + 64), x ~= t x8.
 * With c~ the binary16 centroid, c^ = s q8 its 8-bit copy and x^ = t x8:
 * <x, c~> - <x^, c^> = <x, c~ - c^> + <x - x^, c^>, at most |x| err + |x - x^|
 * norm; the float rounding of the binary16 dot (d fused multiply-adds, each
 * within 2^-24 of a partial sum no larger than |x| |c~|) and of this one
 * are covered by (d + 16) 2^-22 (|x| + |x - x^|) (norm + err); that of
 * |c|^2 - 2 dot by 2^-22 (||c|^2| + 2 (|dot| + e)) (the q8_bounds kernel).
 * (Without a binary16 copy, c~ is the float centroid.) */
int vf_cindex_probe_bounds(const vf_cindex *ci, const float *x, int neg, int32_t *raw,
			   float *lo, float *hi, float *lmin, float *hmin)
{
	if (!ci->q8)
		return -1;
	uint8_t xu[VECFS_DIM_MAX];
	float par[4];
	if (ci->d4 > sizeof xu || q8_query(ci, x, xu, par))
		return -1;
	const vf_kernels *kn = vf_kernels_get();
	kn->point_panels_i8(xu, ci->d4, ci->q8, ci->npanels, raw);
	q8_finish(ci, kn, raw, neg, par, lo, hi, lmin, hmin);
	return 0;
}

void vf_cindex_probe_dots(const vf_cindex *ci, const float *x, float *dots)
{
	if (!ci->half) {
		vf_cindex_dots(ci, x, dots);
		return;
	}
	vf_kernels_get()->point_panels_half(x, ci->dim, ci->half, ci->npanels, dots);
	int finite = 1;
	for (size_t j = 0; j < (size_t)ci->npanels * VF_PANEL; j++) {
		dots[j] *= ci->half_unscale;
		finite &= isfinite(dots[j]);
	}
	if (!finite) /* a query so large that the scaled sums overflow */
		vf_cindex_dots(ci, x, dots);
}

typedef struct nearest_job {
	const vf_cindex *ci;
	const float *pts;
	size_t lo, hi;
	uint32_t *out;
	float *dist;
} nearest_job;

#define NB 64 /* points per tile */
#define PN 4  /* panels per call of the kernel */

/* The nearest centroid of x by |c|^2 - 2 x.c in double (the first on
 * ties), for a point or centroids whose float32 sums overflow; *dist gets
 * that score rounded to float32. */
static uint32_t nearest_double(const vf_cindex *ci, const float *x, float *dist)
{
	uint32_t arg = 0;
	double best = INFINITY;
	for (uint32_t c = 0; c < ci->k; c++) {
		const float *pan = ci->panels + (size_t)(c / VF_PANEL) * ci->dim * VF_PANEL + c % VF_PANEL;
		double n2 = 0, xc = 0;
		for (uint32_t d = 0; d < ci->dim; d++) {
			double v = pan[(size_t)d * VF_PANEL];
			n2 += v * v;
			xc += v * x[d];
		}
		if (n2 - 2 * xc < best) {
			best = n2 - 2 * xc;
			arg = c;
		}
	}
	*dist = (float)best;
	return arg;
}

/* The nearest centroid of each point: a tile of NB points against every
 * panel, keeping per point and lane (centroid index mod VF_PANEL) the
 * smallest distance and the first centroid with it; then per point the
 * smallest over the lanes, the first centroid on ties, as a scan in
 * centroid order finds. */
static void *nearest_run(void *arg)
{
	nearest_job *j = arg;
	const vf_cindex *ci = j->ci;
	const vf_kernels *kn = vf_kernels_get();
	/* 24 KiB on the stack: nothing to allocate, so nothing that can fail
	 * and leave points without their centroid */
	float dots[PN * NB * VF_PANEL], lane_best[NB * VF_PANEL];
	uint32_t lane_arg[NB * VF_PANEL];
	for (size_t p0 = j->lo; p0 < j->hi; p0 += NB) {
		size_t np = j->hi - p0 < NB ? j->hi - p0 : NB;
		for (size_t i = 0; i < np * VF_PANEL; i++) {
			lane_best[i] = FLT_MAX;
			lane_arg[i] = 0;
		}
		for (uint32_t pn = 0; pn < ci->npanels; pn += PN) {
			uint32_t m = ci->npanels - pn < PN ? ci->npanels - pn : PN;
			kn->panel_dots(j->pts + p0 * ci->dim, np, ci->dim,
				       ci->panels + (size_t)pn * ci->dim * VF_PANEL, m, dots);
			for (uint32_t i = 0; i < m; i++) /* in centroid order */
				kn->panel_min(dots + i * np * VF_PANEL, np,
					      ci->norms + (pn + i) * VF_PANEL, (pn + i) * VF_PANEL,
					      lane_best, lane_arg);
		}
		for (size_t i = 0; i < np; i++) {
			const float *b = lane_best + i * VF_PANEL;
			const uint32_t *a = lane_arg + i * VF_PANEL;
			uint32_t bj = 0;
			for (uint32_t l = 1; l < VF_PANEL; l++)
				if (b[l] < b[bj] || (b[l] == b[bj] && a[l] < a[bj]))
					bj = l;
			float bd = b[bj];
			uint32_t ba = a[bj];
			if (!(fabsf(bd) < FLT_MAX)) /* sums past float32 */
				ba = nearest_double(ci, j->pts + (p0 + i) * ci->dim, &bd);
			j->out[p0 + i] = ba;
			if (j->dist)
				j->dist[p0 + i] = bd;
		}
	}
	return NULL;
}

void vf_nearest(const vf_cindex *ci, const float *pts, size_t n, uint32_t *out,
		float *dist, int threads)
{
	if (threads < 1)
		threads = 1;
	if (threads > VF_PARALLEL_MAX)
		threads = VF_PARALLEL_MAX;
	if (n < 256)
		threads = 1;
	nearest_job jobs[VF_PARALLEL_MAX];
	for (int t = 0; t < threads; t++)
		jobs[t] = (nearest_job){ci, pts, n * t / threads, n * (t + 1) / threads, out, dist};
	vf_parallel(nearest_run, jobs, sizeof *jobs, threads);
}

/* The nearest centroid of x as vf_nearest() finds it, from the first look
 * at it (raw: the sums of x's bytes, par: its parameters).  With a_j =
 * <x^, c^_j> (t scale_j (raw_j - 64 sum_j)), the float dot D_j is within
 * e_j = |x| err_j + |x - x^| norm_j + slack (norm_j + err_j) of it (see
 * vf_cindex_probe_bounds()), at most E with the largest err and norm; the
 * float score S_j = |c_j|^2 - 2 D_j within 2^-24 (N2 + 2 (A + E)) of its
 * exact value (N2 the largest |c_j|^2, A = (|x| + |x - x^|) the largest
 * norm, at least |a_j|), and the first look's score s_j = |c_j|^2 - 2 a_j,
 * in float, within 2^-24 (N2 + 9 A) of its exact value: so |S_j - s_j| <=
 * W = 2 E + 2^-20 (N2 + 4 A + 4 E), rounding of W included.  The nearest
 * has S at most min s + W, so s at most min s + 2 W: the panels whose
 * smallest s is above that hold neither it nor a centroid that ties with
 * it, and only the others are scored, with the same kernels in the same
 * order.  A score too large for float32 and the point is scored against
 * every panel, as vf_nearest() does. */
static uint32_t nearest_bounded1(const vf_cindex *ci, const vf_kernels *kn, const float *x,
				 const int32_t *raw, const float par[4], float *smin)
{
	float dots[PN * VF_PANEL], best[VF_PANEL], bd;
	uint32_t arg[VF_PANEL], out;
	kn->q8_scores(raw, ci->q8_sum, ci->q8_scale, ci->norms, ci->npanels, 2 * par[0], smin);
	float lo = INFINITY;
	for (uint32_t p = 0; p < ci->npanels; p++)
		lo = smin[p] < lo ? smin[p] : lo;
	float e = (par[1] * ci->q8_emax + par[2] * ci->q8_nmax) + par[3] * (ci->q8_nmax + ci->q8_emax);
	float a = (par[1] + par[2]) * ci->q8_nmax;
	float w = 2 * e + 0x1p-20f * (ci->q8_n2max + 4 * (a + e));
	float h = lo + (2 * w * (1 + 0x1p-18f) + 0x1p-18f * fabsf(lo));
	if (!(fabsf(lo) < FLT_MAX) || !(fabsf(h) < FLT_MAX))
		goto all;
	for (uint32_t l = 0; l < VF_PANEL; l++) {
		best[l] = FLT_MAX;
		arg[l] = 0;
	}
	/* the panels that can hold it, in order, PN at a time side by side
	 * (one panel alone would be two chains of dim dependent FMAs) */
	for (uint32_t p = 0; p < ci->npanels;) {
		const float *pan[PN];
		uint32_t at[PN], m = 0;
		for (; p < ci->npanels && m < PN; p++)
			if (!(smin[p] > h)) {
				at[m] = p;
				pan[m++] = ci->panels + (size_t)p * ci->dim * VF_PANEL;
			}
		if (!m)
			break;
		kn->point_panel_set(x, ci->dim, pan, m, dots);
		for (uint32_t i = 0; i < m; i++)
			kn->panel_min(dots + i * VF_PANEL, 1, ci->norms + (size_t)at[i] * VF_PANEL,
				      at[i] * VF_PANEL, best, arg);
	}
	uint32_t bj = 0;
	for (uint32_t l = 1; l < VF_PANEL; l++)
		if (best[l] < best[bj] || (best[l] == best[bj] && arg[l] < arg[bj]))
			bj = l;
	if (fabsf(best[bj]) < FLT_MAX)
		return arg[bj];
all:
	vf_nearest(ci, x, 1, &out, &bd, 1);
	return out;
}

#define TP 16 /* points a first look: the 8-bit panels read once for all */

void vf_nearest_bounded(const vf_cindex *ci, const float *pts, size_t n, uint32_t *out)
{
	size_t nc = (size_t)ci->npanels * VF_PANEL, tp = n < TP ? n : TP;
	void *room = ci->q8 && n ? vf_malloc(nc * tp * sizeof(int32_t) + sizeof(float) * ci->npanels +
					     tp * (size_t)ci->d4)
				 : NULL;
	if (!room) {
		vf_nearest(ci, pts, n, out, NULL, 1);
		return;
	}
	int32_t *raw = room;
	float *smin = (float *)(raw + tp * nc);
	uint8_t *xu = (uint8_t *)(smin + ci->npanels);
	const vf_kernels *kn = vf_kernels_get();
	float par[TP][4];
	for (size_t p0 = 0; p0 < n; p0 += TP) {
		size_t np = n - p0 < TP ? n - p0 : TP, m = 0;
		size_t at[TP]; /* the points with bytes, in xu's order */
		for (size_t i = 0; i < np; i++) {
			const float *x = pts + (p0 + i) * ci->dim;
			if (q8_query(ci, x, xu + m * ci->d4, par[m]) == 0)
				at[m++] = p0 + i;
			else
				vf_nearest(ci, x, 1, out + p0 + i, NULL, 1);
		}
		kn->points_panels_i8(xu, m, ci->d4, ci->q8, ci->npanels, raw);
		for (size_t i = 0; i < m; i++)
			out[at[i]] = nearest_bounded1(ci, kn, pts + at[i] * ci->dim, raw + i * nc,
						      par[i], smin);
	}
	free(room);
}

static float sqdist(const float *a, const float *b, uint32_t d)
{
	return vf_kernels_get()->l2sq(a, b, d);
}

/* k-means++ on a subsample: each new center drawn with probability
 * proportional to the squared distance to the nearest chosen center. */
static int seed_pp(const float *pts, size_t n, uint32_t dim, uint32_t k,
		   uint64_t *rng, float *cent)
{
	size_t m = n < (size_t)k * 8 ? n : (size_t)k * 8;
	if (m > 65536 && m > k)
		m = 65536 > k ? 65536 : k;
	size_t *idx = vf_malloc(sizeof(size_t) * m);
	double *d2 = vf_malloc(sizeof(double) * m);
	if (!idx || !d2) {
		free(idx);
		free(d2);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m; i++)
		idx[i] = m == n ? i : (size_t)(vf_splitmix(rng) % n);
	size_t first = vf_splitmix(rng) % m;
	memcpy(cent, pts + idx[first] * dim, sizeof(float) * dim);
	for (size_t i = 0; i < m; i++)
		d2[i] = sqdist(pts + idx[i] * dim, cent, dim);
	for (uint32_t c = 1; c < k; c++) {
		double tot = 0;
		for (size_t i = 0; i < m; i++)
			tot += d2[i];
		size_t pick = 0;
		if (tot > 0) {
			double r = (double)(vf_splitmix(rng) >> 11) / 9007199254740992.0 * tot;
			for (pick = 0; pick + 1 < m && r >= d2[pick]; pick++)
				r -= d2[pick];
		} else {
			pick = vf_splitmix(rng) % m;
		}
		float *cc = cent + (size_t)c * dim;
		memcpy(cc, pts + idx[pick] * dim, sizeof(float) * dim);
		for (size_t i = 0; i < m; i++) {
			double dd = sqdist(pts + idx[i] * dim, cc, dim);
			if (dd < d2[i])
				d2[i] = dd;
		}
	}
	free(idx);
	free(d2);
	return 0;
}

int vf_kmeans(const float *pts, size_t n, uint32_t dim, uint32_t k, int iters,
	      uint64_t seed, int threads, float *cent, vf_tick_fn tick, void *targ)
{
	uint64_t rng = seed ^ 0x6b6d65616e73ULL;
	int rc;
	if (n == 0 || k == 0)
		return -EINVAL;
	if (k >= n) {
		/* every point its own centroid; extra centroids copy point 0 */
		for (uint32_t c = 0; c < k; c++)
			memcpy(cent + (size_t)c * dim, pts + (size_t)(c < n ? c : 0) * dim,
			       sizeof(float) * dim);
		return 0;
	}
	if ((rc = seed_pp(pts, n, dim, k, &rng, cent)))
		return rc;
	uint32_t *assign = vf_malloc(sizeof(uint32_t) * n);
	double *sum = vf_malloc(sizeof(double) * (size_t)k * dim);
	size_t *cnt = vf_malloc(sizeof(size_t) * k);
	if (!assign || !sum || !cnt) {
		rc = -ENOMEM;
		goto out;
	}
	for (int it = 0; it < iters; it++) {
		vf_cindex ci;
		if ((rc = vf_cindex_init(&ci, cent, k, dim)))
			goto out;
		vf_nearest(&ci, pts, n, assign, NULL, threads);
		vf_cindex_free(&ci);
		memset(sum, 0, sizeof(double) * (size_t)k * dim);
		memset(cnt, 0, sizeof(size_t) * k);
		for (size_t i = 0; i < n; i++) {
			double *s = sum + (size_t)assign[i] * dim;
			const float *p = pts + i * dim;
			for (uint32_t d = 0; d < dim; d++)
				s[d] += p[d];
			cnt[assign[i]]++;
		}
		for (uint32_t c = 0; c < k; c++)
			if (cnt[c])
				for (uint32_t d = 0; d < dim; d++)
					cent[(size_t)c * dim + d] = (float)(sum[(size_t)c * dim + d] / cnt[c]);
		/* empty clusters: split a large cluster in two by perturbing its
		 * centroid symmetrically */
		for (uint32_t c = 0; c < k; c++) {
			if (cnt[c])
				continue;
			uint32_t big = 0;
			for (;;) {
				big = vf_splitmix(&rng) % k;
				double p = (double)(cnt[big] > 1 ? cnt[big] - 1 : 0) / (double)(n - k);
				if ((double)(vf_splitmix(&rng) >> 11) / 9007199254740992.0 < p)
					break;
			}
			float *cb = cent + (size_t)big * dim, *cc = cent + (size_t)c * dim;
			for (uint32_t d = 0; d < dim; d++) {
				float eps = 1.0f / 1024 * (d % 2 ? 1 : -1);
				cc[d] = cb[d] * (1 + eps);
				cb[d] = cb[d] * (1 - eps);
			}
			cnt[c] = cnt[big] / 2;
			cnt[big] -= cnt[c];
		}
		if (tick && tick(targ, (it + 1) * 100 / iters)) {
			rc = -ECANCELED;
			goto out;
		}
	}
	rc = 0;
out:
	free(assign);
	free(sum);
	free(cnt);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int vf_robust_mean(const float *pts, size_t n, uint32_t dim, float *mean)
{
	double *n2 = vf_malloc(sizeof(double) * (n ? n : 1)), *sorted = vf_malloc(sizeof(double) * (n ? n : 1));
	double *sum = vf_calloc(dim, sizeof(double));
	if (!n2 || !sorted || !sum) {
		free(n2);
		free(sorted);
		free(sum);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		double s = 0;
		for (uint32_t d = 0; d < dim; d++)
			s += (double)pts[i * dim + d] * pts[i * dim + d];
		n2[i] = sorted[i] = s;
	}
	qsort(sorted, n, sizeof(double), cmp_double);
	double lim = n ? sorted[n / 2] * (VF_NORM_OUTLIER * VF_NORM_OUTLIER) : 0;
	size_t kept = 0;
	for (size_t i = 0; i < n; i++)
		if (n2[i] <= lim) {
			for (uint32_t d = 0; d < dim; d++)
				sum[d] += pts[i * dim + d];
			kept++;
		}
	for (uint32_t d = 0; d < dim; d++)
		mean[d] = kept ? (float)(sum[d] / (double)kept) : 0;
	free(n2);
	free(sorted);
	free(sum);
	return 0;
}

/* k-means' training sample and Lloyd iterations for n records in nlist
 * clusters.  128 sample rows a cluster (40, as before, gave glove-100
 * recall 0.9415 at nprobe 24 against 0.9482 with 128) and 20 iterations up
 * to 200,000 records (fashion-mnist-784, all 6,000 rows: 0.938 at nprobe 3
 * with 12, 0.945 with 20), 8 above; the sample shrinks, down to 40 rows a
 * cluster, so that the training costs at most TRAIN_BUDGET multiply-adds
 * and its copy at most TRAIN_BYTES (the 1M x 128 set trains on 256,000
 * rows; 10M rows on 40 a cluster). */
#define TRAIN_BUDGET 1.2e12
#define TRAIN_BYTES (256.0 * 1024 * 1024)
#define TRAIN_PER_LIST 128
#define TRAIN_FLOOR_PER_LIST 40
#define TRAIN_MIN 20000

uint64_t vf_train_sample(uint64_t n, uint32_t nlist, uint32_t dim, int *iters)
{
	*iters = n > 200000 ? 8 : 20;
	double per_row = (double)nlist * dim * *iters;
	uint64_t ns = (uint64_t)nlist * TRAIN_PER_LIST;
	uint64_t least = (uint64_t)nlist * TRAIN_FLOOR_PER_LIST;
	if ((double)ns * per_row > TRAIN_BUDGET)
		ns = (uint64_t)(TRAIN_BUDGET / per_row);
	if ((double)ns * dim * sizeof(float) > TRAIN_BYTES)
		ns = (uint64_t)(TRAIN_BYTES / ((double)dim * sizeof(float)));
	if (ns < least)
		ns = least;
	if (ns < TRAIN_MIN)
		ns = TRAIN_MIN;
	return ns > n ? n : ns;
}

uint32_t vf_auto_nlist(uint64_t n)
{
	/* about sqrt(N) clusters: probing cost (all centroids) and scanning
	 * cost (the probed clusters) stay balanced.  A centroid costs a full
	 * dot product to probe, a vector in a probed cluster mostly a
	 * first-pass look-up over its sign planes, so once clusters would hold
	 * more than 500 vectors, more and smaller ones pay: N/500 clusters, up
	 * to 2 sqrt(N) (from N = 1M on; at 1M, dim 128, nlist 2000 with nprobe
	 * 10 reaches recall 0.974 at about 1.4x the QPS of nlist 1000 with
	 * nprobe 6, recall 0.973).  Below N = 250000 this is sqrt(N). */
	double k = sqrt((double)n), big = (double)n / 500;
	if (big > 2 * k)
		big = 2 * k;
	if (big > k)
		k = big;
	uint64_t r = (uint64_t)llround(k);
	if (r < 1)
		r = 1;
	if (r > n)
		r = n;
	if (r > 65536)
		r = 65536;
	return (uint32_t)r;
}
