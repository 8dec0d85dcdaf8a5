/*
 * test_quant.c - the engine's numeric core: the random rotation, RaBitQ
 * codes and their estimators and error bounds (both passes), the scalar and
 * SIMD kernels, k-means and nearest-centroid search.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "block.h"
#include "math/kernels.h"
#include "math/kmeans.h"
#include "math/parallel.h"
#include "math/rabitq.h"
#include "math/rotation.h"
#include <xxhash.h>
#include "testutil.h"

/* ------------------------------------------------------------ helpers */

/* The SIMD kernel tables this CPU has, NULL-terminated after the scalar
 * one: kernel_tables[0] is the scalar table. */
static const vf_kernels *kernel_tables[5];

static const vf_kernels *const *all_kernels(void)
{
	static const char *const names[] = { "avx2", "avx512", "avx512vnni" };
	if (!kernel_tables[0]) {
		size_t n = 0;
		kernel_tables[n++] = &vf_kernels_scalar;
		for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
			const vf_kernels *k = vf_kernels_named(names[i]);
			if (k)
				kernel_tables[n++] = k;
			else
				print_message("no %s on this CPU: its kernels are not checked\n",
					      names[i]);
		}
	}
	return kernel_tables;
}

static float *gauss_vec(rng *r, size_t n, double scale)
{
	float *v = malloc((n ? n : 1) * sizeof(float));
	assert_non_null(v);
	for (size_t i = 0; i < n; i++)
		v[i] = (float)(rng_gauss(r) * scale);
	return v;
}

static double dot_d(const float *a, const float *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

static double l2_d(const float *a, const float *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - b[i];
		s += d * d;
	}
	return s;
}

static int same_float(float a, float b)
{
	return memcmp(&a, &b, sizeof a) == 0;
}

/* ------------------------------------------------------------ 1. rotation */

/* A generation keeps the rotation it was coded with: at a padded dimension
 * that is a power of two (all that generations made before could have), and
 * in two windows (those made since), the output is the one recorded here,
 * bit for bit (XXH64 of the floats; all kernels agree bit for bit), however
 * the kernels come to compute it.  A padded dimension that is no multiple
 * of 64, or below dim, is refused. */
static void test_rotation_kept(void **state)
{
	(void)state;
	static const struct {
		uint32_t dim, pdim;
		uint64_t hash;
	} kept[] = { {100, 128, 0x64004127dbc8abcdULL}, {784, 1024, 0xcab28922a8c93cefULL},
		     /* two windows a round (generations with pdim a multiple of
		      * 64 that is no power of two) */
		     {784, 832, 0x72e8333d288d924bULL},   {300, 320, 0x7b1b3bea37530ca9ULL},
		     {960, 960, 0xe16a55d38a5cd791ULL},   {1536, 1536, 0xd386a9047c77ea91ULL},
		     {130, 192, 0x7b350754042c9b81ULL},   {64, 64, 0xd8c47cc95237c4deULL} };
	for (size_t t = 0; t < sizeof kept / sizeof *kept; t++) {
		vf_rotation rot;
		assert_int_equal(vf_rotation_init(&rot, kept[t].dim, kept[t].pdim, 42), 0);
		float *in = malloc(sizeof(float) * kept[t].dim);
		float *out = malloc(sizeof(float) * kept[t].pdim);
		assert_true(in && out);
		for (uint32_t i = 0; i < kept[t].dim; i++)
			in[i] = (float)i * 0.37f - 3.0f;
		vf_rotate(&rot, in, out);
		assert_true(XXH64(out, sizeof(float) * kept[t].pdim, 0) == kept[t].hash);
		free(in);
		free(out);
		vf_rotation_free(&rot);
	}
	vf_rotation bad;
	assert_int_equal(vf_rotation_init(&bad, 100, 100, 1), -EINVAL);
	assert_int_equal(vf_rotation_init(&bad, 100, 96, 1), -EINVAL);
	assert_int_equal(vf_rotation_init(&bad, 200, 128, 1), -EINVAL);
	assert_int_equal(vf_rotation_init(&bad, 1, 0, 1), -EINVAL);
}

static void test_rotation_preserves_geometry(void **state)
{
	(void)state;
	/* dim, and the padded dimension to rotate in: 0 for a new
	 * generation's (vf_padded_dim()), else a power of two as generations
	 * made before had (784 in 1,024: one transform a round) */
	static const uint32_t dims[][2] = { {1, 0}, {7, 0}, {64, 0}, {100, 0}, {128, 0},
					    {300, 0}, {784, 0}, {784, 1024}, {1000, 0}, {1536, 0} };
	rng r = { .s = 1 };
	for (size_t t = 0; t < sizeof dims / sizeof *dims; t++) {
		uint32_t dim = dims[t][0], pdim = dims[t][1] ? dims[t][1] : vf_padded_dim(dim);
		/* new generations: the smallest multiple of 64 >= max(dim, 64) */
		if (!dims[t][1])
			assert_true(pdim >= 64 && pdim >= dim && pdim % 64 == 0 && pdim - 64 < dim);

		vf_rotation rot, same, other;
		assert_int_equal(vf_rotation_init(&rot, dim, pdim, 42), 0);
		assert_int_equal(vf_rotation_init(&same, dim, pdim, 42), 0);
		assert_int_equal(vf_rotation_init(&other, dim, pdim, 43), 0);
		assert_int_equal(rot.dim, dim);
		assert_int_equal(rot.pdim, pdim);
		/* the transform: the whole of a power of two, else the largest
		 * power of two below it */
		assert_true((rot.win & (rot.win - 1)) == 0 && rot.win <= pdim && 2 * rot.win > pdim);

		float *ra = malloc(pdim * sizeof(float)), *rb = malloc(pdim * sizeof(float));
		float *rs = malloc(pdim * sizeof(float)), *ro = malloc(pdim * sizeof(float));
		float *sum = malloc(dim * sizeof(float)), *rsum = malloc(pdim * sizeof(float));
		assert_non_null(ra);
		assert_non_null(rb);
		assert_non_null(rs);
		assert_non_null(ro);
		assert_non_null(sum);
		assert_non_null(rsum);
		double worst_n = 0, worst_ip = 0;
		for (int k = 0; k < 40; k++) {
			float *a = gauss_vec(&r, dim, 1.0 + k % 5);
			float *b = gauss_vec(&r, dim, 0.5);
			if (k % 4 == 1) /* correlated pairs: a large inner product */
				for (uint32_t i = 0; i < dim; i++)
					b[i] = a[i] * 0.7f + b[i];
			if (k == 0) { /* a basis vector */
				memset(a, 0, dim * sizeof(float));
				a[dim - 1] = 1;
			}
			vf_rotate(&rot, a, ra);
			vf_rotate(&rot, b, rb);
			double na = sqrt(dot_d(a, a, dim)), nb = sqrt(dot_d(b, b, dim));
			double e = fabs(sqrt(dot_d(ra, ra, pdim)) - na) / na;
			double f = fabs(dot_d(ra, rb, pdim) - dot_d(a, b, dim)) / (na * nb);
			worst_n = e > worst_n ? e : worst_n;
			worst_ip = f > worst_ip ? f : worst_ip;
			if (e > 1e-5 || f > 1e-5)
				print_message("dim %u vector %d: norm error %.3g, inner product error %.3g\n",
					      dim, k, e, f);
			assert_true(e <= 1e-5);
			assert_true(f <= 1e-5);

			/* linear: R(a + b) = Ra + Rb */
			for (uint32_t i = 0; i < dim; i++)
				sum[i] = a[i] + b[i];
			vf_rotate(&rot, sum, rsum);
			for (uint32_t i = 0; i < pdim; i++)
				assert_true(fabs((double)rsum[i] - ((double)ra[i] + rb[i])) <=
					    1e-5 * (na + nb));

			/* it mixes: the padding dimensions get their share */
			if (dim < pdim) {
				double out = 0;
				for (uint32_t i = dim; i < pdim; i++)
					out += (double)ra[i] * ra[i];
				/* (a quarter of their share of the dimensions) */
				assert_true(out > 0.25 * (pdim - dim) / pdim * na * na);
			}

			/* deterministic in the seed, and the seed matters */
			vf_rotate(&same, a, rs);
			assert_memory_equal(rs, ra, pdim * sizeof(float));
			vf_rotate(&other, a, ro);
			double diff = l2_d(ro, ra, pdim);
			if (diff < 0.1 * na * na)
				print_message("dim %u: seeds 42 and 43 rotate alike (%g of %g)\n",
					      dim, diff, na * na);
			assert_true(diff >= 0.1 * na * na);
			free(a);
			free(b);
		}
		/* the images of the basis vectors are orthonormal */
		if (dim <= 128 || dim == 300) {
			float *basis = malloc((size_t)dim * pdim * sizeof(float));
			float *e = calloc(dim, sizeof(float));
			assert_non_null(basis);
			assert_non_null(e);
			for (uint32_t i = 0; i < dim; i++) {
				e[i] = 1;
				vf_rotate(&rot, e, basis + (size_t)i * pdim);
				e[i] = 0;
			}
			for (uint32_t i = 0; i < dim; i++)
				for (uint32_t j = 0; j <= i; j++) {
					double ip = dot_d(basis + (size_t)i * pdim,
							  basis + (size_t)j * pdim, pdim);
					assert_true(fabs(ip - (i == j)) <= 1e-5);
				}
			free(basis);
			free(e);
		}
		print_message("dim %u (pdim %u): worst relative norm error %.2g, inner product %.2g\n",
			      dim, pdim, worst_n, worst_ip);
		free(ra);
		free(rb);
		free(rs);
		free(ro);
		free(sum);
		free(rsum);
		vf_rotation_free(&rot);
		vf_rotation_free(&same);
		vf_rotation_free(&other);
	}
}

/* ------------------------------------------------------------ 2. estimators */

#define E_DIM 128
#define E_NP 400  /* points: 12 full batches and a half one */
#define E_NQ 60   /* queries: 24000 pairs */

typedef struct est_stats {
	size_t pairs;
	double mean_rel;     /* mean (est - true) / true */
	double mean_norm;    /* mean (est - true) / (|v - c| |q - c|) */
	double slope;        /* least squares slope of the error on <v-c, q-c> */
	double cover2;       /* share with |est - true| <= bound */
	double mean_rel1;    /* first pass (exact S1): mean (est1 - true) / true */
	double cover1;       /* share with first-pass lo <= true */
	double cover1hi;     /* share with first-pass hi >= true */
	size_t lut_bad;      /* first-pass lo off by more than the LUT error */
	size_t mask_bad;     /* mask bits disagreeing with lo <= thresh */
	size_t kernel_diff;  /* first-pass results differing between kernels */
	size_t fold_bad;     /* query table: codes or second-pass estimates
			      * unlike the cluster table's */
	size_t q16_bad;      /* second-pass estimates farther from the one of
			      * the exact code dot than the 16-bit query's
			      * share of the bound */
	double q16_share;    /* mean share of the bound that is */
} est_stats;

/* Code u_i of a code of `bits` planes of pb bytes: the sign plane (bit
 * bits-1) at `sign`, planes 1..bits-1 one after the other at `low`. */
static uint32_t code_at(const uint8_t *sign, const uint8_t *low, size_t pb, uint32_t bits,
			uint32_t i)
{
	uint32_t u = ((sign[i / 8] >> (i % 8)) & 1u) << (bits - 1);
	for (uint32_t p = 1; p < bits; p++)
		u |= ((low[(p - 1) * pb + i / 8] >> (i % 8)) & 1u) << (bits - 1 - p);
	return u;
}

/* One cluster (centroid c) of Gaussian points, encoded with `bits`; random
 * queries around it.  dot: the dot-product variant; qtable: the first-pass
 * table built once a query over R (q - mu) (VF_GEN_QUERY_TABLE), else once
 * a cluster.  The first pass runs with kns[0] (and each later table up to a
 * NULL, which must agree bit for bit). */
static void run_estimator(int dot, int qtable, uint32_t D, uint32_t bits, uint64_t seed,
			  const vf_kernels *const *kns, est_stats *st)
{
	rng r = { .s = seed };
	vf_rotation rot;
	assert_int_equal(vf_rotation_init(&rot, D, vf_padded_dim(D), seed * 7 + 1), 0);
	const uint32_t pdim = rot.pdim, groups = pdim / 4;
	size_t pb = (size_t)bits * vf_plane_bytes(pdim);

	float *c = malloc(D * sizeof(float));
	float *rc = malloc(pdim * sizeof(float));
	float *pts = malloc((size_t)E_NP * D * sizeof(float));
	float *qs = malloc((size_t)E_NQ * D * sizeof(float));
	uint8_t *planes = malloc(E_NP * pb);
	vf_code *codes = calloc(E_NP, sizeof *codes);
	assert_non_null(c);
	assert_non_null(rc);
	assert_non_null(pts);
	assert_non_null(qs);
	assert_non_null(planes);
	assert_non_null(codes);
	for (uint32_t i = 0; i < D; i++)
		c[i] = (float)(rng_unif(&r) * 10 - 5);
	for (size_t p = 0; p < E_NP; p++) {
		double s = 0.5 + 1.5 * rng_unif(&r);
		for (uint32_t i = 0; i < D; i++)
			pts[p * D + i] = c[i] + (float)(rng_gauss(&r) * s);
	}
	for (size_t q = 0; q < E_NQ; q++) {
		double s = 0.5 + 1.5 * rng_unif(&r);
		for (uint32_t i = 0; i < D; i++)
			qs[q * D + i] = c[i] + (float)(rng_gauss(&r) * s);
	}
	vf_rotate(&rot, c, rc);
	/* the query table's centre: away from c (at c the codes' shares
	 * would be 0) and from the origin */
	float *mu = malloc(D * sizeof(float)), *rmu = malloc(pdim * sizeof(float));
	assert_non_null(mu);
	assert_non_null(rmu);
	for (uint32_t i = 0; i < D; i++)
		mu[i] = 0.4f * c[i] + (float)(rng_gauss(&r) * 2);
	vf_rotate(&rot, mu, rmu);
	const float *tmu = qtable ? rmu : NULL;
	float rc_sum = 0;
	for (uint32_t i = 0; i < pdim; i++)
		rc_sum += rc[i];

	vf_encoder enc;
	assert_int_equal(vf_encoder_init(&enc, &rot, bits, dot, tmu), 0);
	/* the cluster table's codes, which the query table's must match but
	 * for the share of the cluster moved from add to cdot */
	vf_code *ccodes = calloc(E_NP, sizeof *ccodes);
	uint8_t *cplanes = malloc(E_NP * pb);
	vf_encoder cenc;
	assert_non_null(ccodes);
	assert_non_null(cplanes);
	assert_int_equal(vf_encoder_init(&cenc, &rot, bits, dot, NULL), 0);
	for (size_t p = 0; p < E_NP; p++) {
		vf_encode(&enc, pts + p * D, c, rc, planes + p * pb, &codes[p]);
		vf_encode(&cenc, pts + p * D, c, rc, cplanes + p * pb, &ccodes[p]);
		const vf_code *a = &codes[p], *z = &ccodes[p];
		if (memcmp(planes + p * pb, cplanes + p * pb, pb) != 0 || a->r1 != z->r1 ||
		    a->e1 != z->e1 || a->rb != z->rb || a->eb != z->eb ||
		    (!qtable && (a->add != z->add || a->cdot != z->cdot)))
			st->fold_bad++;
		assert_ptr_equal(codes[p].planes, planes + p * pb);
		codes[p].id = p;
		codes[p].seq = p + 1;
		codes[p].key = "k";
		codes[p].keylen = 1;
	}
	vf_encoder_free(&enc);
	vf_encoder_free(&cenc);

	/* the same codes as a posting block, for the first pass */
	size_t blen = vf_block_size(codes, E_NP, pdim, bits);
	uint8_t *blk = malloc(blen);
	assert_non_null(blk);
	vf_block_write(blk, codes, E_NP, D, pdim, bits);
	vf_block b;
	assert_int_equal(vf_block_open(blk, blen, &b), 0);

	vf_qstate qst;
	vf_cstate cst;
	vf_qstate cqst;
	vf_cstate ccst;
	assert_int_equal(vf_qstate_init(&qst, pdim, bits, tmu), 0);
	assert_int_equal(vf_cstate_init(&cst, &qst), 0);
	assert_int_equal(vf_qstate_init(&cqst, pdim, bits, NULL), 0);
	assert_int_equal(vf_cstate_init(&ccst, &cqst), 0);

	double s_rel = 0, s_norm = 0, s_rel1 = 0;
	double sx = 0, sy = 0, sxx = 0, sxy = 0;
	size_t in2 = 0, in1 = 0, in1hi = 0, n = 0, lut_bad = 0, mask_bad = 0, kdiff = 0;
	for (size_t qi = 0; qi < E_NQ; qi++) {
		const float *q = qs + qi * D;
		double nq2 = l2_d(q, c, D), qcd = dot_d(q, c, D);
		vf_qstate_set(&qst, &rot, q);
		vf_cstate_set(&cst, &qst, rc, rc_sum, dot ? (float)-qcd : (float)nq2,
			      (float)sqrt(nq2));
		vf_qstate_set(&cqst, &rot, q);
		vf_cstate_set(&ccst, &cqst, rc, rc_sum, dot ? (float)-qcd : (float)nq2,
			      (float)sqrt(nq2));
		double truth[E_NP];
		for (size_t p = 0; p < E_NP; p++) {
			const float *v = pts + p * D;
			const vf_code *cd = &codes[p];
			double t = dot ? -dot_d(q, v, D) : l2_d(q, v, D);
			truth[p] = t;
			float est, bound;
			vf_pass2(&qst, &cst, cd->planes, cd->planes + vf_plane_bytes(pdim), cd->add,
				 cd->rb, cd->eb, cd->cdot, &est, &bound);
			assert_true(isfinite(est) && isfinite(bound) && bound >= 0);
			/* the same estimate from the cluster table's code, but
			 * for float rounding (of add + rb * cdot, each up to
			 * a few times the estimate's terms) */
			float cest, cbound;
			const vf_code *cc = &ccodes[p];
			vf_pass2(&cqst, &ccst, cc->planes, cc->planes + vf_plane_bytes(pdim),
				 cc->add, cc->rb, cc->eb, cc->cdot, &cest, &cbound);
			double tol = 1e-5 * (fabs(cc->add) + fabs(cd->add) + fabs(cst.p1.qc) +
					     fabs((double)cc->rb * cc->cdot) +
					     fabs((double)cd->rb * cd->cdot)) + 1e-6;
			/* against the code dot in double precision: within the
			 * bound's share for the 16-bit query (|rb| q16_err),
			 * but for float rounding of the estimate's terms */
			double ud = 0;
			for (uint32_t i = 0; i < pdim; i++)
				ud += (double)code_at(cd->planes, cd->planes + vf_plane_bytes(pdim),
						      vf_plane_bytes(pdim), bits, i) * qst.rq[i];
			double half = (double)((1u << bits) - 1) * 0.5;
			double ex = ((double)cd->add + cst.p1.qc) +
				    (double)cd->rb * ((ud - cd->cdot) - half * cst.qr_sum);
			double share = fabs((double)cd->rb) * qst.q16_err;
			st->q16_share += share / bound;
			/* and the bound holds that share */
			if ((fabs(est - ex) > share + 1e-6 * (fabs(ex) + fabs(cd->add) +
							      fabs((double)cd->rb * ud)) ||
			     bound < (1 - 1e-6) * ((double)cd->eb * cst.p1.nq + share)) &&
			    st->q16_bad++ < 5)
				print_message("vector %zu: second-pass estimate %.9g, %.9g with the exact code dot (allowed %.3g)\n",
					      p, est, ex, share);
			if (cbound != bound || fabs((double)cest - est) > tol) {
				if (st->fold_bad++ < 5)
					print_message("vector %zu: second-pass estimate %.7g, %.7g with the cluster table (allowed %.3g)\n",
						      p, est, cest, tol);
			}
			double err = est - t;
			double nr = sqrt(l2_d(v, c, D)), ip = 0;
			for (uint32_t i = 0; i < D; i++)
				ip += ((double)v[i] - c[i]) * ((double)q[i] - c[i]);
			s_rel += err / t;
			s_norm += err / (nr * sqrt(nq2));
			sx += ip;
			sy += err;
			sxx += ip * ip;
			sxy += ip * err;
			if (fabs(err) <= bound)
				in2++;
			n++;
		}

		/* first pass, a batch at a time */
		for (uint32_t bt = 0; bt < b.nbatch; bt++) {
			const uint8_t *sign = b.col[VF_COL_SIGN] + (size_t)bt * groups * 16;
			const uint8_t *f1 = vf_block_f1_batch(&b, bt);
			const uint8_t *add = f1, *r1 = f1 + VF_BATCH * 4, *e1 = f1 + 2 * VF_BATCH * 4;
			float lo[VF_BATCH], hi[VF_BATCH], lo2[VF_BATCH], hi2[VF_BATCH];
			vf_pass1 p1 = cst.p1;
			uint32_t mask = kns[0]->pass1(sign, cst.lut, groups, add, r1, e1, &p1, lo, hi);
			assert_int_equal(mask, 0xFFFFFFFFu); /* thresh = +inf */
			for (int kk = 1; kns[kk]; kk++) {
				uint32_t m2 = kns[kk]->pass1(sign, cst.lut, groups, add, r1, e1, &p1,
							     lo2, hi2);
				if (m2 != mask || memcmp(lo, lo2, sizeof lo) != 0 ||
				    memcmp(hi, hi2, sizeof hi) != 0)
					kdiff++;
			}
			for (uint32_t j = 0; j < VF_BATCH; j++) {
				uint32_t p = bt * VF_BATCH + j;
				if (p >= E_NP) {
					assert_true(isinf(lo[j]) && lo[j] > 0);
					continue;
				}
				const vf_code *cd = &codes[p];
				/* the sign-plane estimate with an exact inner product */
				double s1 = -0.5 * (double)cst.qr_sum;
				for (uint32_t i = 0; i < pdim; i++) {
					int bit = (cd->planes[i / 8] >> (i % 8)) & 1;
					/* the query table's codes took
					 * sum s_i (R (c - mu))_i */
					double v = (double)qst.rq[i] - (qtable ? rmu[i] : rc[i]);
					s1 += bit ? v : 0.0;
				}
				double base = (double)cd->add + p1.qc;
				double est1 = base + (double)cd->r1 * s1;
				double bnd1 = fabs((double)cd->r1) * p1.qerr + (double)cd->e1 * p1.nq;
				/* the look-up tables err by at most qerr in S1 */
				double slack = fabs((double)cd->r1) * p1.qerr +
					       2e-6 * (fabs(base) + fabs(cd->r1 * s1) + bnd1) + 1e-6;
				if ((fabs(lo[j] - (est1 - bnd1)) > slack ||
				     fabs(hi[j] - (est1 + bnd1)) > slack) && lut_bad++ < 5)
					print_message("bits %u: vector %u: first-pass lo/hi %.6g %.6g, exact S1 gives %.6g %.6g (allowed %.3g)\n",
						      bits, p, lo[j], hi[j], est1 - bnd1, est1 + bnd1, slack);
				s_rel1 += (est1 - truth[p]) / truth[p];
				if (lo[j] <= truth[p])
					in1++;
				if (hi[j] >= truth[p])
					in1hi++;
			}
			/* mask: bit set iff lo <= thresh; padding never passes a
			 * finite threshold */
			float th[3] = { lo[(bt * 7) % VF_BATCH], -INFINITY, FLT_MAX };
			if (!isfinite(th[0]))
				th[0] = lo[0];
			for (int k = 0; k < 3; k++) {
				p1.thresh = th[k];
				for (int kk = 0; kns[kk]; kk++) {
					uint32_t m = kns[kk]->pass1(sign, cst.lut, groups, add, r1, e1,
								    &p1, lo2, hi2);
					if (memcmp(lo2, lo, sizeof lo) != 0 ||
					    memcmp(hi2, hi, sizeof hi) != 0)
						kdiff++;
					for (uint32_t j = 0; j < VF_BATCH; j++) {
						int bit = (int)(m >> j & 1), want = lo[j] <= th[k];
						if (bt * VF_BATCH + j >= E_NP)
							want = 0;
						if (bit != want && mask_bad++ < 5)
							print_message("%s: mask bit %u is %d: lo %g thresh %g\n",
								      kns[kk]->name, j, bit, lo[j], th[k]);
					}
				}
			}
		}
	}
	st->pairs = n;
	st->mean_rel = s_rel / n;
	st->mean_rel1 = s_rel1 / n;
	st->mean_norm = s_norm / n;
	st->slope = (sxy - sx * sy / n) / (sxx - sx * sx / n);
	st->cover2 = (double)in2 / n;
	st->cover1 = (double)in1 / n;
	st->cover1hi = (double)in1hi / n;
	st->lut_bad = lut_bad;
	st->q16_share /= n;
	st->mask_bad = mask_bad;
	st->kernel_diff = kdiff;

	vf_qstate_free(&qst);
	vf_cstate_free(&cst);
	vf_qstate_free(&cqst);
	vf_cstate_free(&ccst);
	free(ccodes);
	free(cplanes);
	free(mu);
	free(rmu);
	free(blk);
	free(codes);
	free(planes);
	free(qs);
	free(pts);
	free(rc);
	free(c);
	vf_rotation_free(&rot);
}

/* The dimensions and bits the estimator is run with: every bits value at
 * 128 dimensions (a padded dimension that is a power of two: one transform
 * a round), and at 300 (padded to 320: two overlapping windows of 256). */
static const struct {
	uint32_t dim, bits;
	int qtable; /* the first-pass table once a query (new generations) */
} est_runs[] = { {E_DIM, 1, 0}, {E_DIM, 2, 0}, {E_DIM, 3, 0}, {E_DIM, 4, 0}, {E_DIM, 5, 0},
		 {E_DIM, 8, 0}, {300, 1, 0}, {300, 4, 0}, {E_DIM, 1, 1}, {E_DIM, 4, 1},
		 {E_DIM, 5, 1}, {300, 4, 1} };
#define N_EST_RUNS (sizeof est_runs / sizeof *est_runs)

/* The statistics of each metric (0 l2, 1 dot) and run, computed once and
 * shared by the tests below. */
static est_stats est_cache[2][N_EST_RUNS];
static int est_done[2];

static const est_stats *estimator_runs(int dot)
{
	if (est_done[dot])
		return est_cache[dot];
	const vf_kernels *const *kns = all_kernels();
	for (size_t t = 0; t < N_EST_RUNS; t++) {
		est_stats *s = &est_cache[dot][t];
		uint32_t bits = est_runs[t].bits, dim = est_runs[t].dim;
		memset(s, 0, sizeof *s);
		run_estimator(dot, est_runs[t].qtable, dim, bits,
			      100 + bits + 50 * (uint64_t)dot + dim, kns, s);
		print_message("%s%s dim %u bits %u: %zu pairs, mean rel err %+.5f (pass 1 %+.5f), "
			      "mean err/(|v-c||q-c|) %+.5f, err slope %+.4f, "
			      "within bound %.4f (16-bit query's share %.4f), pass-1 lo <= true %.4f (true <= hi %.4f)\n",
			      dot ? "dot" : "l2", est_runs[t].qtable ? " (query table)" : "", dim,
			      bits, s->pairs, s->mean_rel,
			      s->mean_rel1, s->mean_norm, s->slope, s->cover2, s->q16_share, s->cover1,
			      s->cover1hi);
	}
	est_done[dot] = 1;
	return est_cache[dot];
}

/* Unbiased estimates, first-pass values within the look-up error of the
 * exact sign-plane estimate, the mask semantics, kernels in agreement. */
static void check_unbiased(int dot)
{
	const est_stats *st = estimator_runs(dot);
	for (size_t t = 0; t < N_EST_RUNS; t++) {
		const est_stats *s = &st[t];
		assert_true(s->pairs >= 20000);
		/* on average, and whatever the true inner product (no scale
		 * error) */
		assert_true(fabs(s->mean_rel) < 0.01);
		assert_true(fabs(s->mean_rel1) < 0.01);
		assert_true(fabs(s->mean_norm) < 0.01);
		assert_true(fabs(s->slope) < 0.05);
		assert_int_equal(s->lut_bad, 0);
		assert_int_equal(s->mask_bad, 0);
		assert_int_equal(s->kernel_diff, 0);
		assert_int_equal(s->fold_bad, 0);
		assert_int_equal(s->q16_bad, 0);
		/* the 16-bit query widens the bound by little at 4 bits or
		 * fewer, even here, where the cluster lies far from the
		 * origin (|c| about twice |v - c|: it quantizes R q, not
		 * R (q - c)): 1-5% of it */
		if (est_runs[t].bits <= 4)
			assert_true(s->q16_share < 0.06);
	}
}

/* The error bounds hold for nearly all pairs: |est - true| <= bound in the
 * second pass, lo <= true in the first. */
static void check_bounds(int dot)
{
	const est_stats *st = estimator_runs(dot);
	size_t bad = 0;
	for (size_t t = 0; t < N_EST_RUNS; t++) {
		const est_stats *s = &st[t];
		if (s->cover2 < 0.99 || s->cover1 < 0.99) {
			print_message("%s dim %u bits %u: %.2f%% within the second-pass bound, "
				      "%.2f%% at or above the first-pass lower bound (want >= 99%%)\n",
				      dot ? "dot" : "l2", est_runs[t].dim, est_runs[t].bits, 100 * s->cover2,
				      100 * s->cover1);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
}

static void test_estimator_l2_unbiased(void **state)
{
	(void)state;
	check_unbiased(0);
}

static void test_estimator_dot_unbiased(void **state)
{
	(void)state;
	check_unbiased(1);
}

static void test_error_bounds_l2(void **state)
{
	(void)state;
	check_bounds(0);
}

static void test_error_bounds_dot(void **state)
{
	(void)state;
	check_bounds(1);
}

/* ------------------------------------------------------------ 3. kernels */

/* Floats copied to `off` bytes past a fresh buffer: unaligned inputs. */
static void *unaligned_copy(const float *v, size_t n, size_t off, char **buf)
{
	*buf = malloc(n * sizeof(float) + off + 1);
	assert_non_null(*buf);
	memcpy(*buf + off, v, n * sizeof(float));
	return *buf + off;
}

/* Results that must match bit for bit between kernels, and a double
 * reference within rounding. */
static size_t float_diffs(const float *a, const float *b, size_t n)
{
	size_t d = 0;
	for (size_t i = 0; i < n; i++)
		d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
	return d;
}

static void check_l2_dot(const vf_kernels *kn, const vf_kernels *ref, rng *r)
{
	static const size_t offs[][2] = { { 0, 0 }, { 1, 2 }, { 3, 1 }, { 2, 3 }, { 0, 1 } };
	size_t bad_ref = 0, bad_bits = 0, bad_align = 0;
	for (size_t d = 1; d <= 300; d++) {
		double scale = d % 3 == 0 ? 1e-3 : d % 3 == 1 ? 1.0 : 50.0;
		float *a = gauss_vec(r, d, scale), *b = gauss_vec(r, d, scale);
		if (d % 5 == 0) /* nearby vectors: cancellation in a - b */
			for (size_t i = 0; i < d; i++)
				b[i] = a[i] + (float)(rng_gauss(r) * scale * 1e-3);
		double l2 = 0, l2abs = 0, ip = 0, ipabs = 0;
		for (size_t i = 0; i < d; i++) {
			double x = (double)a[i] - b[i];
			l2 += x * x;
			l2abs += x * x;
			ip += (double)a[i] * b[i];
			ipabs += fabs((double)a[i] * b[i]);
		}
		float l2_0 = 0, dot_0 = 0;
		for (size_t o = 0; o < sizeof offs / sizeof *offs; o++) {
			char *ba, *bb;
			const void *pa = unaligned_copy(a, d, offs[o][0], &ba);
			const void *pb = unaligned_copy(b, d, offs[o][1], &bb);
			float l2f = kn->l2sq(pa, pb, d), dotf = kn->dot(pa, pb, d);
			/* fp32 sums of d terms: a few ulps per term at most */
			if (fabs(l2f - l2) > 4e-6 * l2abs + 1e-30 ||
			    fabs(dotf - ip) > 4e-6 * ipabs + 1e-30) {
				if (bad_ref++ < 5)
					print_message("%s d %zu: l2sq %.9g (ref %.9g) dot %.9g (ref %.9g)\n",
						      kn->name, d, l2f, l2, dotf, ip);
			}
			if (o == 0) {
				l2_0 = l2f;
				dot_0 = dotf;
			} else if (!same_float(l2f, l2_0) || !same_float(dotf, dot_0)) {
				if (bad_align++ < 5)
					print_message("%s d %zu offsets %zu/%zu: result depends on alignment\n",
						      kn->name, d, offs[o][0], offs[o][1]);
			}
			if (ref && (!same_float(l2f, ref->l2sq(pa, pb, d)) ||
				    !same_float(dotf, ref->dot(pa, pb, d)))) {
				if (bad_bits++ < 5)
					print_message("d %zu offsets %zu/%zu: %s l2sq %.9g dot %.9g, %s %.9g %.9g\n",
						      d, offs[o][0], offs[o][1], kn->name, l2f, dotf,
						      ref->name, ref->l2sq(pa, pb, d), ref->dot(pa, pb, d));
			}
			free(ba);
			free(bb);
		}
		free(a);
		free(b);
	}
	assert_int_equal(bad_ref, 0);
	assert_int_equal(bad_align, 0);
	assert_int_equal(bad_bits, 0);
}

/* Reference check of rows of panel dots: row i is the point pts + i*pstep
 * against the panel panels + i*panstep; returns how many values are off. */
static size_t panel_ref_diffs(const char *what, const vf_kernels *kn, const float *out,
			      const float *pts, size_t pstep, const float *panels,
			      size_t panstep, size_t rows, size_t d)
{
	size_t bad = 0;
	for (size_t i = 0; i < rows; i++)
		for (size_t j = 0; j < VF_PANEL; j++) {
			const float *x = pts + i * pstep, *pan = panels + i * panstep;
			double s = 0, sa = 0;
			for (size_t k = 0; k < d; k++) {
				double t = (double)x[k] * pan[k * VF_PANEL + j];
				s += t;
				sa += fabs(t);
			}
			float got = out[i * VF_PANEL + j];
			if (fabs(got - s) > 4e-6 * sa + 1e-30 && bad++ < 5)
				print_message("%s %s d %zu rows %zu: [%zu][%zu] %.9g, ref %.9g\n",
					      kn->name, what, d, rows, i, j, got, s);
		}
	return bad;
}

static void check_panels(const vf_kernels *kn, const vf_kernels *ref, rng *r)
{
	static const size_t ds[] = { 1, 2, 3, 8, 15, 16, 17, 100 };
	static const size_t nps[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 64, 65 };
	size_t bad_ref = 0, bad_bits = 0;
	for (size_t di = 0; di < sizeof ds / sizeof *ds; di++) {
		size_t d = ds[di];
		for (size_t ni = 0; ni < sizeof nps / sizeof *nps; ni++) {
			size_t np = nps[ni];
			/* mode 0 against 1 to 6 panels at once */
			size_t npan = 1 + ni % 6, nmax = np > npan ? np : npan;
			float *pts = gauss_vec(r, np * d, 1.0);
			float *panels = gauss_vec(r, nmax * d * VF_PANEL, 1.0);
			float *out = malloc(np * npan * VF_PANEL * sizeof(float));
			float *out2 = malloc(np * npan * VF_PANEL * sizeof(float));
			assert_non_null(out);
			assert_non_null(out2);
			for (int mode = 0; mode < 2; mode++) {
				/* 0: np points against npan panels; 1: one point
				 * against np panels */
				const char *what = mode ? "point_panels" : "panel_dots";
				size_t nout = mode ? np : np * npan;
				if (mode == 0) {
					kn->panel_dots(pts, np, d, panels, npan, out);
					for (size_t i = 0; i < npan; i++)
						bad_ref += panel_ref_diffs(what, kn, out + i * np * VF_PANEL,
									   pts, d, panels + i * d * VF_PANEL,
									   0, np, d);
				} else {
					kn->point_panels(pts, d, panels, np, out);
					bad_ref += panel_ref_diffs(what, kn, out, pts, 0, panels,
								   d * VF_PANEL, np, d);
				}
				if (!ref)
					continue;
				if (mode == 0)
					ref->panel_dots(pts, np, d, panels, npan, out2);
				else
					ref->point_panels(pts, d, panels, np, out2);
				size_t n = float_diffs(out, out2, nout);
				if (n && bad_bits++ < 5)
					print_message("%s d %zu rows %zu: %zu values differ between %s and %s\n",
						      what, d, np, n, kn->name, ref->name);
			}
			/* point_panel_set: panels in any order, 1 to 4 of
			 * them, the dots of point_panels bit for bit */
			for (size_t m = 1; m <= 4 && m <= np; m++) {
				const float *set[4];
				for (size_t i = 0; i < m; i++)
					set[i] = panels + (np - 1 - i * 2 % np) * d * VF_PANEL;
				kn->point_panels(pts, d, panels, np, out2);
				kn->point_panel_set(pts, d, set, m, out);
				for (size_t i = 0; i < m; i++) {
					size_t at = (size_t)(set[i] - panels) / (d * VF_PANEL);
					size_t n = float_diffs(out + i * VF_PANEL, out2 + at * VF_PANEL,
							       VF_PANEL);
					if (n && bad_bits++ < 5)
						print_message("point_panel_set d %zu panel %zu of %zu: %zu values differ (%s)\n",
							      d, i, m, n, kn->name);
				}
			}
			/* binary16 panels: the dots of point_panels with the
			 * rounded values, bit for bit (each lane adds in
			 * dimension order either way) */
			size_t nv = np * d * VF_PANEL;
			uint16_t *half = malloc(nv * sizeof *half);
			float *wide = malloc(nv * sizeof(float));
			assert_non_null(half);
			assert_non_null(wide);
			for (size_t i = 0; i < nv; i++) {
				half[i] = vf_float_to_half(panels[i] * 1000.0f);
				wide[i] = vf_half_to_float(half[i]);
			}
			kn->point_panels_half(pts, d, half, np, out);
			kn->point_panels(pts, d, wide, np, out2);
			size_t nh = float_diffs(out, out2, np * VF_PANEL);
			if (ref) {
				ref->point_panels_half(pts, d, half, np, out2);
				nh += float_diffs(out, out2, np * VF_PANEL);
			}
			if (nh && bad_bits++ < 5)
				print_message("point_panels_half d %zu panels %zu: %zu values differ (%s)\n",
					      d, np, nh, kn->name);
			free(half);
			free(wide);
			free(pts);
			free(panels);
			free(out);
			free(out2);
		}
	}
	assert_int_equal(bad_ref, 0);
	assert_int_equal(bad_bits, 0);
}

/* binary16: every value converts to float and back unchanged; a float
 * converts as the compiler's _Float16 does (to nearest, ties to even,
 * subnormals, overflow to infinity). */
static void test_half_conversion(void **state)
{
	(void)state;
	size_t bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = vf_half_to_float((uint16_t)h);
		_Float16 c;
		memcpy(&c, &(uint16_t){(uint16_t)h}, 2);
		if (isnan(f)) {
			bad += !isnan((float)c) || (vf_float_to_half(f) & 0x7c00) != 0x7c00 ||
			       !(vf_float_to_half(f) & 0x3ff);
			continue;
		}
		bad += f != (float)c || vf_float_to_half(f) != h;
	}
	rng r = {.s = 7};
	for (int i = 0; i < 2000000; i++) {
		uint32_t u = (uint32_t)rng_next(&r);
		float f;
		/* exponents around binary16's range, and every bit pattern */
		if (i % 2)
			u = (u & 0x807fffff) | (uint32_t)(127 - 30 + (int)(u >> 24) % 50) << 23;
		memcpy(&f, &u, 4);
		if (isnan(f))
			continue;
		_Float16 c = (_Float16)f;
		uint16_t want;
		memcpy(&want, &c, 2);
		if (vf_float_to_half(f) != want && bad++ < 5)
			print_message("%.9g (0x%08x): 0x%04x, want 0x%04x\n", f, u,
				      vf_float_to_half(f), want);
	}
	assert_int_equal(bad, 0);
}

/* pass1 against an exact integer look-up sum, and against `ref`. */
static void check_pass1(const vf_kernels *kn, const vf_kernels *ref, rng *r)
{
	static const uint32_t gs[] = { 16, 32, 48, 256, 272, 512, 1024, 1032, 2056 };
	size_t bad_ref = 0, bad_bits = 0, bad_mask = 0;
	for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
		uint32_t groups = gs[gi];
		for (int t = 0; t < 7; t++) {
			uint8_t *codes = malloc((size_t)groups * 16);
			uint8_t *lut = malloc((size_t)groups * 16);
			float f[3][VF_BATCH];
			assert_non_null(codes);
			assert_non_null(lut);
			vf_pass1 p;
			if (t == 0) { /* the largest sums: every look-up 255 */
				memset(codes, 0xFF, (size_t)groups * 16);
				memset(lut, 0xFF, (size_t)groups * 16);
				for (int j = 0; j < VF_BATCH; j++) {
					f[0][j] = 0;
					f[1][j] = 1;
					f[2][j] = 0;
				}
				p = (vf_pass1){ 1, 0, 0, 0, 0, INFINITY };
			} else {
				for (size_t i = 0; i < (size_t)groups * 16; i++) {
					codes[i] = (uint8_t)rng_next(r);
					lut[i] = (uint8_t)rng_next(r);
				}
				for (int j = 0; j < VF_BATCH; j++) {
					f[0][j] = (float)(rng_unif(r) * 100);
					f[1][j] = (float)(rng_gauss(r) * 10);
					f[2][j] = (float)(rng_unif(r) * 3);
				}
				if (t == 1) /* padding slots */
					for (int j = 20; j < VF_BATCH; j++) {
						f[0][j] = INFINITY;
						f[1][j] = 0;
						f[2][j] = 0;
					}
				if (t == 6) /* factors that overflowed: NaN bounds */
					for (int j = 0; j < VF_BATCH; j += 5)
						f[0][j] = NAN;
				p.a = (float)(rng_unif(r) * 0.1 + 1e-3);
				p.b = (float)(rng_gauss(r) * 5);
				p.qc = (float)(rng_unif(r) * 50);
				p.qerr = (float)(rng_unif(r) * 0.5);
				p.nq = (float)(rng_unif(r) * 10);
				p.thresh = INFINITY;
			}
			char *bufs[3];
			const uint8_t *fp[3];
			for (int k = 0; k < 3; k++) /* unaligned factor arrays */
				fp[k] = unaligned_copy(f[k], VF_BATCH, (size_t)k + 1, &bufs[k]);

			float lo[VF_BATCH], hi[VF_BATCH], lo2[VF_BATCH], hi2[VF_BATCH];
			uint32_t m = kn->pass1(codes, lut, groups, fp[0], fp[1], fp[2], &p, lo, hi);
			assert_int_equal(m, 0xFFFFFFFFu);
			for (int j = 0; j < VF_BATCH; j++) {
				uint64_t acc = 0;
				for (uint32_t g = 0; g < groups; g++) {
					uint8_t nib = (codes[g * 16 + (j & 15)] >> (j >= 16 ? 4 : 0)) & 15;
					acc += lut[g * 16 + nib];
				}
				double s1 = (double)acc * p.a + p.b;
				double est = ((double)f[0][j] + p.qc) + (double)f[1][j] * s1;
				double bound = fabs((double)f[1][j]) * p.qerr + (double)f[2][j] * p.nq;
				double want = est - bound, want_hi = est + bound;
				double tol = 1e-6 * (fabs((double)f[0][j]) + fabs(p.qc) +
						     fabs((double)f[1][j] * s1) + fabs(bound)) + 1e-30;
				int ok = isnan(want)   ? isnan(lo[j]) && isnan(hi[j])
					 : isinf(want) ? lo[j] == want && hi[j] == want_hi
						       : fabs(lo[j] - want) <= tol && fabs(hi[j] - want_hi) <= tol;
				if (t == 0) /* exact: the sum itself, 255 * groups */
					ok = lo[j] == (float)(255.0 * groups) && hi[j] == lo[j];
				if (!ok && bad_ref++ < 5)
					print_message("%s pass1 groups %u case %d slot %d: lo/hi %.9g %.9g, want %.9g %.9g\n",
						      kn->name, groups, t, j, lo[j], hi[j], want, want_hi);
			}
			float ths[4] = { lo[5], lo[17], -INFINITY, FLT_MAX };
			for (int k = 0; k < 4; k++) {
				vf_pass1 pk = p;
				pk.thresh = ths[k];
				uint32_t mk = kn->pass1(codes, lut, groups, fp[0], fp[1], fp[2], &pk,
							lo2, hi2);
				if (memcmp(lo2, lo, sizeof lo) != 0 || memcmp(hi2, hi, sizeof hi) != 0)
					bad_mask++;
				/* kept unless above the threshold: a NaN bound prunes nothing */
				for (int j = 0; j < VF_BATCH; j++)
					if ((int)(mk >> j & 1) != !(lo[j] > ths[k]) && bad_mask++ < 5)
						print_message("%s pass1 mask bit %d: %d, lo %g thresh %g\n",
							      kn->name, j, (int)(mk >> j & 1), lo[j], ths[k]);
				if (ref) {
					uint32_t mr = ref->pass1(codes, lut, groups, fp[0], fp[1], fp[2],
								 &pk, lo2, hi2);
					if ((mr != mk || float_diffs(lo, lo2, VF_BATCH) ||
					     float_diffs(hi, hi2, VF_BATCH)) && bad_bits++ < 5)
						print_message("pass1 groups %u case %d thresh %g: %s and %s differ\n",
							      groups, t, ths[k], kn->name, ref->name);
				}
			}
			for (int k = 0; k < 3; k++)
				free(bufs[k]);
			free(codes);
			free(lut);
		}
	}
	assert_int_equal(bad_ref, 0);
	assert_int_equal(bad_mask, 0);
	assert_int_equal(bad_bits, 0);
}

/* lut4: entry e of group g = trunc(clamp((base[g] + the qr of e's
 * dimensions) * inv + 0.5, 0, 255)). */
/* groups4 against a plain reference (the sums as its contract orders
 * them), with zeros of both signs among the residuals, and bit for bit
 * against `ref`. */
static void check_groups4(const vf_kernels *kn, const vf_kernels *ref, rng *r)
{
	static const uint32_t gs[] = { 16, 32, 48, 256 };
	size_t bad = 0;
	for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
		uint32_t groups = gs[gi], n = groups * 4;
		float *rq = gauss_vec(r, n, 1.0), *rc = gauss_vec(r, n, 1.0);
		float *qr = malloc(n * sizeof(float)), *qr2 = malloc(n * sizeof(float));
		float *base = malloc(groups * sizeof(float)), *base2 = malloc(groups * sizeof(float));
		assert_true(qr && qr2 && base && base2);
		for (uint32_t i = 0; i < n; i += 7) /* residuals +0 ... */
			rc[i] = rq[i];
		for (uint32_t i = 3; i < n; i += 11) { /* ... and -0 */
			rq[i] = -0.0f;
			rc[i] = 0.0f;
		}
		float msum, mr, msum2, mr2;
		kn->groups4(rq, rc, groups, qr, base, &msum, &mr);
		/* the reference */
		float t[16] = {0}, want_mr = 0;
		for (uint32_t g = 0; g < groups; g++) {
			float lo = 0, hi = 0;
			for (int b = 0; b < 4; b++) {
				float v = rq[4 * g + b] - rc[4 * g + b];
				if (memcmp(&v, &qr[4 * g + b], 4) && bad++ < 5)
					print_message("%s groups4 qr[%u]\n", kn->name, 4 * g + b);
				lo += v < 0 ? v : 0;
				hi += v > 0 ? v : 0;
			}
			float nb = -lo;
			if (memcmp(&nb, &base[g], 4) && bad++ < 5)
				print_message("%s groups4 base[%u] %g, want %g\n", kn->name, g, base[g], nb);
			t[g % 16] += lo;
			if (hi - lo > want_mr)
				want_mr = hi - lo;
		}
		float want_ms = vf_tree16(t);
		if ((memcmp(&want_ms, &msum, 4) || memcmp(&want_mr, &mr, 4)) && bad++ < 5)
			print_message("%s groups4 %u: msum %.9g maxrange %.9g, want %.9g %.9g\n",
				      kn->name, groups, msum, mr, want_ms, want_mr);
		if (ref) {
			ref->groups4(rq, rc, groups, qr2, base2, &msum2, &mr2);
			if ((memcmp(qr, qr2, n * 4) || memcmp(base, base2, groups * 4) ||
			     memcmp(&msum, &msum2, 4) || memcmp(&mr, &mr2, 4)) && bad++ < 5)
				print_message("%s groups4 %u differs from %s\n", kn->name, groups,
					      ref->name);
		}
		free(rq);
		free(rc);
		free(qr);
		free(qr2);
		free(base);
		free(base2);
	}
	assert_int_equal(bad, 0);
}

/* sign_gather against layout's vf_sign_gather for every slot of batches
 * of random bytes. */
static void check_sign_gather(const vf_kernels *kn, rng *r)
{
	static const uint32_t gs[] = { 16, 32, 48, 256 };
	size_t bad = 0;
	for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
		uint32_t groups = gs[gi];
		uint8_t *batch = malloc((size_t)groups * 16), out[128], want[128];
		assert_non_null(batch);
		for (size_t i = 0; i < (size_t)groups * 16; i++)
			batch[i] = (uint8_t)rng_next(r);
		for (uint32_t j = 0; j < 32; j++) {
			memset(out, 0xAA, sizeof out);
			memset(want, 0xAA, sizeof want);
			kn->sign_gather(batch, groups, j, out);
			vf_sign_gather(batch, groups, j, want);
			if (memcmp(out, want, sizeof out) && bad++ < 5)
				print_message("%s sign_gather groups %u slot %u differs\n", kn->name,
					      groups, j);
		}
		free(batch);
	}
	assert_int_equal(bad, 0);
}

static void check_lut4(const vf_kernels *kn, const vf_kernels *ref, rng *r)
{
	static const uint32_t gs[] = { 1, 2, 16, 19, 256 };
	size_t bad_ref = 0, bad_bits = 0;
	for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
		uint32_t groups = gs[gi];
		float *qr = gauss_vec(r, (size_t)groups * 4, 2.0);
		float *base = malloc(groups * sizeof(float));
		uint8_t *out = malloc((size_t)groups * 16), *out2 = malloc((size_t)groups * 16);
		assert_non_null(base);
		assert_non_null(out);
		assert_non_null(out2);
		/* offsets making each group's smallest subset sum 0, as the
		 * first pass uses them; some groups shifted out of range */
		double maxrange = 0;
		for (uint32_t g = 0; g < groups; g++) {
			double mn = INFINITY, mx = -INFINITY;
			for (int e = 0; e < 16; e++) {
				double v = 0;
				for (int b = 0; b < 4; b++)
					v += (e >> b & 1) ? qr[4 * g + b] : 0;
				mn = v < mn ? v : mn;
				mx = v > mx ? v : mx;
			}
			base[g] = (float)(-mn + (g % 7 == 3 ? 100 : g % 7 == 5 ? -100 : 0));
			maxrange = mx - mn > maxrange ? mx - mn : maxrange;
		}
		float inv = (float)(255.0 / maxrange);
		kn->lut4(qr, groups, base, inv, out);
		for (uint32_t g = 0; g < groups; g++)
			for (int e = 0; e < 16; e++) {
				double v = base[g];
				for (int b = 0; b < 4; b++)
					if (e >> b & 1)
						v += qr[4 * g + b];
				double t = v * inv + 0.5;
				int want = t <= 0 ? 0 : t >= 255 ? 255 : (int)t;
				/* float rounding may move a value across an integer */
				if (abs((int)out[16 * g + e] - want) > 1 && bad_ref++ < 5)
					print_message("%s lut4 group %u entry %d: %d, want %d\n", kn->name,
						      g, e, out[16 * g + e], want);
			}
		if (ref) {
			ref->lut4(qr, groups, base, inv, out2);
			if (memcmp(out, out2, (size_t)groups * 16) != 0 && bad_bits++ < 5)
				print_message("lut4 groups %u: %s and %s differ\n", groups, kn->name,
					      ref->name);
		}
		free(qr);
		free(base);
		free(out);
		free(out2);
	}
	assert_int_equal(bad_ref, 0);
	assert_int_equal(bad_bits, 0);
}

/* code_dot: exactly sum_i u_i q_i (the sign plane and the others apart),
 * with q as large as the caller may make it: (2^bits - 1) sum |q_i| just
 * below 2^31 where 32767 allows it. */
static void check_code_dot(const vf_kernels *kn, rng *r)
{
	static const uint32_t pdims[] = { 32, 64, 96, 128, 800, 1024, 16384 };
	size_t bad = 0;
	for (size_t pi = 0; pi < sizeof pdims / sizeof *pdims; pi++) {
		uint32_t pdim = pdims[pi], pb = pdim / 8;
		for (uint32_t bits = 1; bits <= 8; bits++) {
			uint32_t umax = (1u << bits) - 1;
			int64_t qmax = 2147483647 / ((int64_t)umax * pdim);
			if (qmax > 32767)
				qmax = 32767;
			int16_t *q = malloc(sizeof *q * pdim);
			uint8_t *sign = malloc(pb), *low = malloc((size_t)(bits - 1) * pb + 1);
			assert_non_null(q);
			assert_non_null(sign);
			assert_non_null(low);
			for (int round = 0; round < 3; round++) {
				for (uint32_t i = 0; i < pdim; i++) /* round 2: all at the extremes */
					q[i] = (int16_t)(round == 2 ? (rng_next(r) % 2 ? qmax : -qmax)
								    : (int64_t)(rng_next(r) % (2 * qmax + 1)) - qmax);
				for (size_t j = 0; j < pb; j++)
					sign[j] = (uint8_t)(round == 2 ? 0xff : rng_next(r) >> 24);
				for (size_t j = 0; j < (size_t)(bits - 1) * pb; j++)
					low[j] = (uint8_t)(round == 2 ? 0xff : rng_next(r) >> 24);
				int64_t want = 0;
				for (uint32_t i = 0; i < pdim; i++)
					want += (int64_t)code_at(sign, low, pb, bits, i) * q[i];
				int32_t got = kn->code_dot(sign, low, bits, q, pdim);
				if (got != want && bad++ < 5)
					print_message("%s code_dot pdim %u bits %u: %d, want %lld\n",
						      kn->name, pdim, bits, got, (long long)want);
			}
			free(q);
			free(sign);
			free(low);
		}
	}
	assert_int_equal(bad, 0);
}

/* The encoder's scan of one scale: against a double reference of the
 * same levels, and bit for bit against the scalar kernel; with magnitudes
 * beyond the top level (clamped), at the top level and below it. */
static void check_levels_scan(const vf_kernels *kn, const vf_kernels *ref, rng *r)
{
	size_t bad_ref = 0, bad_bits = 0;
	for (uint32_t n = 8; n <= 1024; n += n < 256 ? 8 : 256) {
		float *ax = gauss_vec(r, n, 1.0);
		for (uint32_t i = 0; i < n; i++)
			ax[i] = fabsf(ax[i]);
		if (n % 16 == 0)
			ax[n / 2] = 0;
		for (uint32_t bits = 2; bits <= 8; bits += 3) {
			float kmax = (float)((1u << (bits - 1)) - 1);
			for (int m = 0; m < 4; m++) {
				float t = kmax * (0.3f + 0.5f * (float)m), num, den;
				if (m == 3)
					ax[0] = kmax / t; /* exactly at the top level */
				kn->levels_scan(ax, n, t, kmax, &num, &den);
				double rn = 0, rd = 0, an = 0;
				for (uint32_t i = 0; i < n; i++) {
					double lv = (double)(t * ax[i]);
					double y = floor(lv < kmax ? lv : kmax) + 0.5;
					rn += ax[i] * y;
					an += fabs(ax[i] * y);
					rd += y * y;
				}
				if (fabs(num - rn) > 1e-5 * an + 1e-30 || fabs(den - rd) > 1e-5 * rd) {
					if (bad_ref++ < 5)
						print_message("%s n %u bits %u t %g: num %.9g (ref %.9g) den %.9g (ref %.9g)\n",
							      kn->name, n, bits, t, num, rn, den, rd);
				}
				if (ref) {
					float rnum, rden;
					ref->levels_scan(ax, n, t, kmax, &rnum, &rden);
					if (!same_float(num, rnum) || !same_float(den, rden)) {
						if (bad_bits++ < 5)
							print_message("n %u bits %u: %s %.9g %.9g, %s %.9g %.9g\n",
								      n, bits, kn->name, num, den, ref->name,
								      rnum, rden);
					}
				}
			}
		}
		free(ax);
	}
	assert_int_equal(bad_ref, 0);
	assert_int_equal(bad_bits, 0);
}

/* The rotation rounds: against the transform computed from the Hadamard
 * matrix's definition in double precision, and bit for bit against the
 * scalar kernel. */
static void check_rotate(const vf_kernels *kn, const vf_kernels *ref, rng *r)
{
	size_t bad_ref = 0, bad_bits = 0;
	for (uint32_t n = 8; n <= 4096; n *= 2)
		for (int rounds = 1; rounds <= 4; rounds += 3) {
			float *x = gauss_vec(r, n, n % 3 ? 1.0 : 1e3), *sg = malloc(sizeof(float) * n * rounds);
			float *y = malloc(sizeof(float) * n), *z = malloc(sizeof(float) * n);
			double *d = malloc(sizeof(double) * n);
			assert_true(sg && y && z && d);
			for (uint32_t i = 0; i < n * (uint32_t)rounds; i++)
				sg[i] = rng_next(r) >> 63 ? -1.0f : 1.0f;
			float scale = 1.0f / sqrtf((float)n);
			memcpy(y, x, sizeof(float) * n);
			kn->rotate_rounds(y, n, sg, rounds, scale);
			double norm = 0;
			for (uint32_t i = 0; i < n; i++) {
				d[i] = x[i];
				norm += (double)x[i] * x[i];
			}
			/* the Hadamard matrix by its definition, H[i][j] =
			 * (-1)^popcount(i & j) */
			double *e = malloc(sizeof(double) * n);
			assert_non_null(e);
			for (int k = 0; k < rounds; k++) {
				for (uint32_t i = 0; i < n; i++)
					d[i] *= sg[(size_t)k * n + i];
				for (uint32_t i = 0; i < n; i++) {
					double acc = 0;
					for (uint32_t j = 0; j < n; j++)
						acc += __builtin_popcount(i & j) & 1 ? -d[j] : d[j];
					e[i] = acc * scale;
				}
				memcpy(d, e, sizeof(double) * n);
			}
			free(e);
			for (uint32_t i = 0; i < n; i++)
				if (fabs(y[i] - d[i]) > 1e-5 * sqrt(norm) + 1e-30) {
					if (bad_ref++ < 5)
						print_message("%s n %u rounds %d: [%u] %.9g (ref %.9g)\n",
							      kn->name, n, rounds, i, y[i], d[i]);
				}
			if (ref) {
				memcpy(z, x, sizeof(float) * n);
				ref->rotate_rounds(z, n, sg, rounds, scale);
				size_t diff = float_diffs(y, z, n);
				if (diff && bad_bits++ < 5)
					print_message("n %u rounds %d: %zu values differ between %s and %s\n",
						      n, rounds, diff, kn->name, ref->name);
			}
			free(x);
			free(sg);
			free(y);
			free(z);
			free(d);
		}
	assert_int_equal(bad_ref, 0);
	assert_int_equal(bad_bits, 0);
}

/* Lane minima over panels: each lane ends with the smallest value it was
 * offered and the first index that offered it (ties included: values on a
 * coarse grid); the AVX2 kernel bit for bit as the scalar one. */
static void check_panel_min(const vf_kernels *kn, const vf_kernels *ref, rng *r)
{
	enum { NP = 37, PANELS = 9 };
	float dots[NP * VF_PANEL], norms[PANELS * VF_PANEL];
	float best[NP * VF_PANEL], best2[NP * VF_PANEL], want[NP * VF_PANEL];
	uint32_t arg[NP * VF_PANEL], arg2[NP * VF_PANEL], want_arg[NP * VF_PANEL];
	size_t bad = 0, bad_bits = 0;
	for (size_t i = 0; i < NP * VF_PANEL; i++) {
		best[i] = best2[i] = want[i] = FLT_MAX;
		arg[i] = arg2[i] = want_arg[i] = 0;
	}
	for (uint32_t pn = 0; pn < PANELS; pn++) {
		for (size_t i = 0; i < VF_PANEL; i++)
			norms[pn * VF_PANEL + i] = (float)(rng_next(r) % 8);
		for (size_t i = 0; i < NP * VF_PANEL; i++)
			dots[i] = (float)(rng_next(r) % 8) * 0.5f;
		for (size_t p = 0; p < NP; p++)
			for (uint32_t j = 0; j < VF_PANEL; j++) {
				double v = (double)norms[pn * VF_PANEL + j] - 2.0 * dots[p * VF_PANEL + j];
				if (v < want[p * VF_PANEL + j]) {
					want[p * VF_PANEL + j] = (float)v;
					want_arg[p * VF_PANEL + j] = pn * VF_PANEL + j;
				}
			}
		kn->panel_min(dots, NP, norms + pn * VF_PANEL, pn * VF_PANEL, best, arg);
		if (ref)
			ref->panel_min(dots, NP, norms + pn * VF_PANEL, pn * VF_PANEL, best2, arg2);
	}
	for (size_t i = 0; i < NP * VF_PANEL; i++) {
		if (!same_float(best[i], want[i]) || arg[i] != want_arg[i]) {
			if (bad++ < 5)
				print_message("%s [%zu]: %g at %u, want %g at %u\n", kn->name, i, best[i],
					      arg[i], want[i], want_arg[i]);
		}
		if (ref && (!same_float(best[i], best2[i]) || arg[i] != arg2[i]))
			bad_bits++;
	}
	assert_int_equal(bad, 0);
	assert_int_equal(bad_bits, 0);
}

/* sum_maxabs and quant16 bit for bit against the scalar kernels: random
 * values of mixed scales, -0, values past the clamp, halves. */
static void check_quant16(const vf_kernels *kn, rng *r)
{
	enum { N = 832 };
	static float x[N];
	int16_t q[2][N];
	size_t bad = 0;
	for (int round = 0; round < 4; round++) {
		for (size_t i = 0; i < N; i++) {
			float u = (float)(rng_next(r) % 2000001) / 1e6f - 1;
			x[i] = round == 0 ? u : round == 1 ? u * 1e4f : round == 2 ? (float)((int)(u * 8)) * 0.5f
							   : (i % 3 ? -0.0f : u * 40000);
		}
		for (uint32_t n = 16; n <= N; n += n < 64 ? 16 : 192) {
			float s0, m0, s1, m1;
			vf_kernels_scalar.sum_maxabs(x, n, &s0, &m0);
			kn->sum_maxabs(x, n, &s1, &m1);
			float scf = round == 1 ? 3.0f : 7.5f, qm = round == 3 ? 1000.0f : 32767.0f;
			vf_kernels_scalar.quant16(x, n, scf, qm, q[0]);
			kn->quant16(x, n, scf, qm, q[1]);
			if (memcmp(&s0, &s1, 4) || memcmp(&m0, &m1, 4) ||
			    memcmp(q[0], q[1], n * sizeof(int16_t))) {
				if (bad++ < 5)
					print_message("%s sum_maxabs/quant16 differ from scalar (n %u, round %d)\n",
						      kn->name, n, round);
			}
		}
	}
	assert_int_equal(bad, 0);
}

/* max_abs and q8_point bit for bit against the scalar kernels: every
 * dimension up to 40 and some larger (d4 the next multiple of 4, its
 * padding read as 0), values of mixed scales and signs, -0, ties of the
 * rounding (v * inv halfway between two integers); max_abs also passes
 * over a NaN. */
static void check_q8_point(const vf_kernels *kn, rng *r)
{
	enum { N = 1000 };
	static const uint32_t big[] = {100, 127, 128, 129, 784, 999, 1000};
	static float x[N];
	uint8_t xu[2][N];
	size_t bad = 0;
	for (int round = 0; round < 4; round++) {
		for (size_t i = 0; i < N; i++) {
			float u = (float)(rng_next(r) % 2000001) / 1e6f - 1;
			x[i] = round == 0 ? u : round == 1 ? u * 1e-3f * (float)(1 + i % 7)
				: round == 2 ? (float)((int)(u * 126)) * 0.5f : (i % 5 ? -0.0f : u * 3e4f);
		}
		for (uint32_t k = 0; k < 40 + sizeof big / sizeof *big; k++) {
			uint32_t dim = k < 40 ? k + 1 : big[k - 40], d4 = (dim + 3) & ~3u;
			float m0 = vf_kernels_scalar.max_abs(x, dim), m1 = kn->max_abs(x, dim);
			if (memcmp(&m0, &m1, 4)) {
				if (bad++ < 5)
					print_message("%s max_abs differs from scalar (dim %u, round %d)\n",
						      kn->name, dim, round);
				continue;
			}
			if (!(m0 > 0))
				continue;
			float t = m0 / 63, inv = 63 / m0;
			double a0, b0, a1, b1;
			memset(xu, 0xee, sizeof xu);
			vf_kernels_scalar.q8_point(x, dim, d4, t, inv, xu[0], &a0, &b0);
			kn->q8_point(x, dim, d4, t, inv, xu[1], &a1, &b1);
			if (memcmp(&a0, &a1, 8) || memcmp(&b0, &b1, 8) || memcmp(xu[0], xu[1], N)) {
				if (bad++ < 5)
					print_message("%s q8_point differs from scalar (dim %u, round %d)\n",
						      kn->name, dim, round);
			}
		}
	}
	float y[19];
	for (int i = 0; i < 19; i++)
		y[i] = (float)(i - 8); /* |y| largest at the end: 10, then 9 */
	for (int at = 0; at < 19; at++) {
		float keep = y[at];
		y[at] = NAN;
		float m0 = vf_kernels_scalar.max_abs(y, 19), m1 = kn->max_abs(y, 19);
		if (m1 != m0 || m0 != (at == 18 ? 9.0f : 10.0f))
			bad++;
		y[at] = keep;
	}
	assert_int_equal(bad, 0);
}

/* point_panels_i8 against a plain sum, exactly: random bytes, and the
 * extremes (127 against -127 and 127 in every coordinate), over 4 to
 * 1,024 coordinates and 1 to 3 panels. */
static void check_panels_i8(const vf_kernels *kn, rng *r)
{
	static const size_t d4s[] = {4, 8, 28, 128, 784, 1024};
	enum { DMAX = 1024, PMAX = 3 };
	static uint8_t xu[DMAX];
	static int8_t pan[PMAX * DMAX * VF_PANEL];
	int32_t out[PMAX * VF_PANEL];
	size_t bad = 0;
	for (size_t a = 0; a < sizeof d4s / sizeof *d4s; a++)
		for (int round = 0; round < 3; round++)
			for (size_t np = 1; np <= PMAX; np++) {
				size_t d4 = d4s[a];
				for (size_t k = 0; k < d4; k++)
					xu[k] = round ? 127 : (uint8_t)(rng_next(r) % 128);
				for (size_t i = 0; i < np * d4 * VF_PANEL; i++)
					pan[i] = round == 1 ? 127 : round == 2 ? -127
							 : (int8_t)(rng_next(r) % 255 - 127);
				kn->point_panels_i8(xu, d4, pan, np, out);
				for (size_t i = 0; i < np; i++)
					for (int j = 0; j < VF_PANEL; j++) {
						int64_t want = 0;
						for (size_t k = 0; k < d4; k++)
							want += (int64_t)xu[k] *
								pan[i * d4 * VF_PANEL +
								    (k / 4 * VF_PANEL + j) * 4 + k % 4];
						if (out[i * VF_PANEL + j] != want && bad++ < 5)
							print_message("%s point_panels_i8 d4 %zu panel %zu lane %d: %d, want %lld\n",
								      kn->name, d4, i, j, out[i * VF_PANEL + j],
								      (long long)want);
					}
			}
	/* points_panels_i8: each point's sums as point_panels_i8 gives them,
	 * 1 to 9 points (whole groups of four and the rest) */
	{
		enum { NPT = 9, D4 = 28, NPAN = 3 };
		static uint8_t xs[NPT * D4];
		static int8_t pn[NPAN * D4 * VF_PANEL];
		int32_t all[NPT * NPAN * VF_PANEL], one[NPAN * VF_PANEL];
		for (size_t i = 0; i < sizeof xs; i++)
			xs[i] = (uint8_t)(rng_next(r) % 128);
		for (size_t i = 0; i < sizeof pn; i++)
			pn[i] = (int8_t)(rng_next(r) % 255 - 127);
		for (size_t npt = 1; npt <= NPT; npt++) {
			kn->points_panels_i8(xs, npt, D4, pn, NPAN, all);
			for (size_t p = 0; p < npt; p++) {
				kn->point_panels_i8(xs + p * D4, D4, pn, NPAN, one);
				if (memcmp(one, all + p * NPAN * VF_PANEL, sizeof one) && bad++ < 5)
					print_message("%s points_panels_i8 point %zu of %zu differs\n",
						      kn->name, p, npt);
			}
		}
	}
	/* q8_bounds bit for bit against the scalar kernel, with and without
	 * norms */
	enum { NP = 5, NC = NP * VF_PANEL };
	int32_t raw[NC], sum[NC];
	float sc[NC], nr[NC], er[NC], n2[NC], lo[2][NC], hi[2][NC], lm[2][NP], hm[2][NP];
	for (size_t i = 0; i < NC; i++) {
		raw[i] = (int32_t)(rng_next(r) % 2000001) - 1000000;
		sum[i] = (int32_t)(rng_next(r) % 20001) - 10000;
		sc[i] = (float)(rng_next(r) % 1000 + 1) * 1e-4f;
		nr[i] = (float)(rng_next(r) % 1000) * 1e-2f;
		er[i] = (float)(rng_next(r) % 1000) * 1e-5f;
		n2[i] = (float)(rng_next(r) % 100000) * 1e-3f;
	}
	const float par[4] = {0.013f, 3.5f, 0.02f, 1e-5f};
	for (int withn = 0; withn < 2; withn++) {
		vf_kernels_scalar.q8_bounds(raw, sum, sc, nr, er, withn ? n2 : NULL, NP, par, lo[0],
					    hi[0], lm[0], hm[0]);
		kn->q8_bounds(raw, sum, sc, nr, er, withn ? n2 : NULL, NP, par, lo[1], hi[1], lm[1],
			      hm[1]);
		if (memcmp(lo[0], lo[1], sizeof lo[0]) || memcmp(hi[0], hi[1], sizeof hi[0]) ||
		    memcmp(lm[0], lm[1], sizeof lm[0]) || memcmp(hm[0], hm[1], sizeof hm[0])) {
			print_message("%s q8_bounds differs from scalar (norms %d)\n", kn->name, withn);
			bad++;
		}
		for (size_t p = 0; p < NP; p++)
			for (size_t i = p * VF_PANEL; i < (p + 1) * VF_PANEL; i++)
				if (lo[1][i] < lm[1][p] || hi[1][i] < hm[1][p] || lo[1][i] > hi[1][i])
					bad++;
	}
	/* q8_scores bit for bit against the scalar kernel, and each panel's
	 * smallest score the smallest of its own */
	float sm[2][NP];
	vf_kernels_scalar.q8_scores(raw, sum, sc, n2, NP, 0.026f, sm[0]);
	kn->q8_scores(raw, sum, sc, n2, NP, 0.026f, sm[1]);
	if (memcmp(sm[0], sm[1], sizeof sm[0])) {
		print_message("%s q8_scores differs from scalar\n", kn->name);
		bad++;
	}
	for (size_t p = 0; p < NP; p++) {
		float m = INFINITY;
		for (size_t i = p * VF_PANEL; i < (p + 1) * VF_PANEL; i++) {
			float v = n2[i] - ((float)(raw[i] - sum[i] * 64) * sc[i]) * 0.026f;
			m = v < m ? v : m;
		}
		bad += m != sm[1][p];
	}
	assert_int_equal(bad, 0);
}

/* The rest of a selection of the np smallest scores: every kernel must
 * leave the same list as inserting one score at a time (ties in index
 * order, NaN never taken), for lengths that end mid-vector, lists of one
 * to more than a vector, scores on a coarse grid (ties) or not, NaN and
 * infinities among them. */
static void check_best_rest(const vf_kernels *kn, rng *r)
{
	static const uint32_t ns[] = {1, 7, 16, 17, 141, 316, 2000};
	/* (the AVX-512 kernel keeps up to 16, 32, 64 or 128 in vectors) */
	static const uint32_t nps[] = {1, 2, 8, 9, 16, 17, 28, 32, 33, 48, 64, 65, 100, 128};
	enum { NMAX = 2000 };
	static float score[NMAX];
	float pd[128], want[128];
	uint32_t pc[128], want_c[128];
	for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
		for (size_t b = 0; b < sizeof nps / sizeof *nps; b++)
			for (int kind = 0; kind < 3; kind++) {
				uint32_t n = ns[a], np = nps[b];
				if (np > n)
					continue;
				for (uint32_t i = 0; i < n; i++) {
					float v = (float)(rng_next(r) % 100000) / 100000.0f;
					score[i] = kind == 1 ? (float)(rng_next(r) % 6) : v;
					if (kind == 2 && rng_next(r) % 7 == 0)
						score[i] = rng_next(r) % 2 ? NAN : (rng_next(r) % 2 ? INFINITY : -INFINITY);
				}
				/* the first np as they come, then the rest */
				uint32_t m = 0;
				for (uint32_t c = 0; c < n; c++) {
					uint32_t i;
					if (m < np)
						i = m++;
					else if (score[c] < want[m - 1])
						i = m - 1;
					else
						continue;
					vf_insert_sorted(want, want_c, i, score[c], c);
				}
				for (uint32_t i = 0; i < np; i++)
					vf_insert_sorted(pd, pc, i, score[i], i);
				kn->best_rest(score, np, n, np, pd, pc);
				for (uint32_t i = 0; i < np; i++) {
					if (!same_float(pd[i], want[i]) || pc[i] != want_c[i])
						print_message("%s n %u np %u kind %d [%u]: %g at %u, want %g at %u\n",
							      kn->name, n, np, kind, i, pd[i], pc[i], want[i],
							      want_c[i]);
					assert_true(same_float(pd[i], want[i]));
					assert_int_equal(pc[i], want_c[i]);
				}
			}
}

static int same_doubles(const double *a, const double *b, size_t n)
{
	return memcmp(a, b, n * sizeof *a) == 0;
}

/* The encoder's residual and codes, bit for bit against the definitions in
 * kernels.h written out here (lane i % 4, in order; the residual's last
 * dim % 4 in lane 0); the signs include -0 and +0, the magnitudes reach
 * past the top level, bits 1 (every level 0) to 8, with and without the
 * first-pass table's centre. */
static void check_encode(const vf_kernels *kn, rng *r)
{
	size_t bad = 0;
	for (uint32_t dim = 1; dim <= 300; dim += dim < 20 ? 1 : 37) {
		float *v = gauss_vec(r, dim, 3.0), *c = gauss_vec(r, dim, 2.0), ax[300];
		double n4[4], c4[4], wn[4] = {0}, wc[4] = {0};
		float want_ax[300];
		for (uint32_t i = 0; i < dim; i++) {
			int l = i < dim / 4 * 4 ? (int)(i % 4) : 0;
			double d = (double)v[i] - c[i];
			wn[l] += d * d;
			wc[l] += (double)c[i] * d;
			want_ax[i] = (float)d;
		}
		kn->encode_residual(v, c, dim, ax, n4, c4);
		if (!same_doubles(n4, wn, 4) || !same_doubles(c4, wc, 4) ||
		    memcmp(ax, want_ax, dim * sizeof(float)) != 0) {
			if (bad++ < 5)
				print_message("%s encode_residual dim %u: n4[0] %.17g (want %.17g)\n",
					      kn->name, dim, n4[0], wn[0]);
		}
		free(v);
		free(c);
	}
	for (uint32_t n = 8; n <= 1024; n += n < 64 ? 8 : 120) {
		float *x = gauss_vec(r, n, 1.0), *rc = gauss_vec(r, n, 2.0);
		float *mu = gauss_vec(r, n, 2.0), *ax = malloc(n * sizeof(float));
		uint8_t *u = malloc(n), *wu = malloc(n);
		assert_true(ax && u && wu);
		x[0] = -0.0f;
		x[n - 1] = 0.0f;
		for (uint32_t i = 0; i < n; i++)
			ax[i] = fabsf(x[i]);
		for (uint32_t bits = 1; bits <= 8; bits++) {
			float kmax = (float)((1u << (bits - 1)) - 1);
			uint32_t half = 1u << (bits - 1);
			for (int m = 0; m < 3; m++) {
				float t = m == 0 ? 0.0f : kmax * (0.4f + 0.9f * (float)m);
				for (int with_mu = 0; with_mu < 2; with_mu++) {
					const float *rmu = with_mu ? mu : NULL;
					double sums[5][4], want[5][4];
					memset(want, 0, sizeof want);
					for (uint32_t i = 0; i < n; i++) {
						int l = (int)(i % 4);
						float lv = t * ax[i];
						uint32_t k = (uint32_t)floorf(lv < kmax ? lv : kmax);
						float y = (float)k + 0.5f;
						wu[i] = (uint8_t)(signbit(x[i]) && x[i] != 0
									  ? half - 1 - k
									  : half + k);
						want[0][l] += (double)ax[i];
						want[1][l] += (double)(ax[i] * y);
						want[2][l] += (double)(y * y);
						want[3][l] += (double)wu[i] * (double)rc[i];
						if (rmu && !(x[i] < 0))
							want[4][l] += (double)rc[i] - (double)rmu[i];
						else if (rmu)
							want[4][l] += 0.0;
					}
					memset(sums, 0xA5, sizeof sums);
					kn->encode_codes(x, ax, n, t, kmax, half, rc, rmu, u, sums);
					int ok = memcmp(u, wu, n) == 0 &&
						 same_doubles(sums[0], want[0], 16) &&
						 (!rmu || same_doubles(sums[4], want[4], 4));
					if (!ok && bad++ < 5)
						print_message("%s encode_codes n %u bits %u t %g mu %d: "
							      "u %s, sums[3][0] %.17g (want %.17g), "
							      "sums[4][0] %.17g (want %.17g)\n",
							      kn->name, n, bits, t, with_mu,
							      memcmp(u, wu, n) ? "differ" : "equal",
							      sums[3][0], want[3][0], sums[4][0],
							      want[4][0]);
				}
			}
		}
		free(x);
		free(rc);
		free(mu);
		free(ax);
		free(u);
		free(wu);
	}
	assert_int_equal(bad, 0);
}

/* u8_floats: every byte value at every length up to 40 (the vector body
 * and its tail), each the exact float. */
static void check_u8_floats(const vf_kernels *kn)
{
	uint8_t x[296];
	float out[297];
	for (int i = 0; i < 296; i++)
		x[i] = (uint8_t)(i * 7 + 3);
	for (uint32_t n = 0; n <= 296; n += n < 40 ? 1 : 64) {
		out[n] = -1;
		kn->u8_floats(x, n, out);
		for (uint32_t i = 0; i < n; i++)
			assert_true(out[i] == (float)x[i]);
		assert_true(out[n] == -1); /* nothing past n */
	}
}

/* l2sq_u8: the very float l2sq() gives of the bytes' floats, at every
 * length up to 40 and longer ones (each step and tail of every table),
 * random bytes and queries of wide range; and vf_l2sq_exact_u8() what
 * vf_l2sq_exact() gives, the double path too (a query so large that
 * float32 overflows). */
static void check_l2sq_u8(const vf_kernels *kn, rng *r)
{
	uint8_t x[800];
	float xf[800], q[800];
	for (uint32_t n = 0; n <= 800; n += n < 40 ? 1 : n < 200 ? 17 : 199) {
		for (int t = 0; t < 4; t++) {
			for (uint32_t i = 0; i < n; i++) {
				x[i] = (uint8_t)(rng_next(r) >> 56);
				xf[i] = x[i];
				q[i] = (float)(rng_next(r) % 100000) / (t == 3 ? 1.0f : 197.0f) - 20.0f;
			}
			/* the bytes at the very end of an allocation of their own,
			 * at an odd address too: a read past them is a fault
			 * under the sanitizers, or a different sum */
			uint8_t *xe = malloc(n + 1);
			assert_non_null(xe);
			uint8_t *xb = xe + (t & 1);
			memcpy(xb, x, n);
			float a = kn->l2sq_u8(q, xb, n), b = kn->l2sq(q, xf, n);
			assert_memory_equal(&a, &b, sizeof a);
			double da = vf_l2sq_exact_u8(kn, q, xb, n), db = vf_l2sq_exact(kn, q, xf, n);
			assert_memory_equal(&da, &db, sizeof da);
			free(xe);
		}
	}
	for (uint32_t i = 0; i < 64; i++) {
		x[i] = (uint8_t)i;
		xf[i] = x[i];
		q[i] = 1e30f;
	}
	double da = vf_l2sq_exact_u8(kn, q, x, 64), db = vf_l2sq_exact(kn, q, xf, 64);
	assert_true(isfinite(da) && da > 1e60);
	assert_memory_equal(&da, &db, sizeof da);
}

static void test_kernels_agree(void **state)
{
	(void)state;
	const vf_kernels *const *kns = all_kernels(), *sc = kns[0];
	rng r = { .s = 3 };
	assert_non_null(vf_kernels_get());
	/* each against the references; the SIMD ones also bit for bit
	 * against the scalar one */
	for (size_t i = 0; kns[i]; i++) {
		const vf_kernels *kn = kns[i], *ref = i ? sc : NULL;
		print_message("kernels %s\n", kn->name);
		check_l2_dot(kn, ref, &r);
		check_panels(kn, ref, &r);
		check_pass1(kn, ref, &r);
		check_lut4(kn, ref, &r);
		check_groups4(kn, ref, &r);
		check_sign_gather(kn, &r);
		check_code_dot(kn, &r);
		check_levels_scan(kn, ref, &r);
		check_encode(kn, &r);
		check_rotate(kn, ref, &r);
		check_panel_min(kn, ref, &r);
		check_best_rest(kn, &r);
		check_panels_i8(kn, &r);
		check_quant16(kn, &r);
		check_q8_point(kn, &r);
		check_u8_floats(kn);
		check_l2sq_u8(kn, &r);
	}
}

/* The library uses the table VECFS_KERNEL names when the CPU has it, else
 * the best one the CPU has. */
static void test_kernels_named(void **state)
{
	(void)state;
	assert_ptr_equal(vf_kernels_named("scalar"), &vf_kernels_scalar);
	assert_null(vf_kernels_named("sse9"));
	const char *force = getenv("VECFS_KERNEL");
	const vf_kernels *best = force ? vf_kernels_named(force) : NULL;
	if (!best)
		best = vf_kernels_named("avx512vnni");
	if (!best)
		best = vf_kernels_named("avx512");
	if (!best)
		best = vf_kernels_named("avx2");
	if (!best)
		best = &vf_kernels_scalar;
	assert_ptr_equal(vf_kernels_get(), best);
	for (const vf_kernels *const *k = all_kernels(); *k; k++)
		assert_string_equal(vf_kernels_named((*k)->name)->name, (*k)->name);
}

/* ------------------------------------------------------------ 4. k-means */

#define KM_K 20
#define KM_N 2000
#define KM_D 16

/* Brute-force nearest of k centroids (double). */
static uint32_t nearest_ref(const float *x, const float *cent, uint32_t k,
			    uint32_t d, double *best)
{
	uint32_t arg = 0;
	*best = INFINITY;
	for (uint32_t j = 0; j < k; j++) {
		double dd = l2_d(x, cent + (size_t)j * d, d);
		if (dd < *best) {
			*best = dd;
			arg = j;
		}
	}
	return arg;
}

typedef struct tick_log {
	int calls, last, bad, stop_at;
} tick_log;

static int on_tick(void *arg, int pct)
{
	tick_log *t = arg;
	t->calls++;
	if (pct < 0 || pct > 100 || pct < t->last)
		t->bad++;
	t->last = pct;
	return t->stop_at && t->calls >= t->stop_at;
}

static void test_kmeans_recovers_blobs(void **state)
{
	(void)state;
	const double sigma = 0.02, minsep = 6;
	rng r = { .s = 77 };
	float *centers = malloc(KM_K * KM_D * sizeof(float));
	float *pts = malloc((size_t)KM_N * KM_D * sizeof(float));
	uint32_t *label = malloc(KM_N * sizeof(uint32_t));
	assert_non_null(centers);
	assert_non_null(pts);
	assert_non_null(label);
	/* centers in [-10,10]^16, at least minsep apart */
	for (uint32_t c = 0; c < KM_K; c++) {
		int ok;
		do {
			for (uint32_t d = 0; d < KM_D; d++)
				centers[c * KM_D + d] = (float)(rng_unif(&r) * 20 - 10);
			ok = 1;
			for (uint32_t o = 0; o < c && ok; o++)
				ok = sqrt(l2_d(centers + c * KM_D, centers + o * KM_D, KM_D)) >= minsep;
		} while (!ok);
	}
	for (size_t i = 0; i < KM_N; i++) {
		label[i] = (uint32_t)(rng_next(&r) % KM_K);
		for (uint32_t d = 0; d < KM_D; d++)
			pts[i * KM_D + d] = centers[label[i] * KM_D + d] +
					    (float)(rng_gauss(&r) * sigma);
	}

	float cent[KM_K * KM_D];
	uint32_t *assign = malloc(KM_N * sizeof(uint32_t));
	assert_non_null(assign);
	for (uint64_t seed = 1; seed <= 3; seed++) {
		tick_log tl = { 0, 0, 0, 0 };
		int rc = vf_kmeans(pts, KM_N, KM_D, KM_K, 20, seed, 2, cent, on_tick, &tl);
		assert_int_equal(rc, 0);
		assert_true(tl.calls > 0);
		assert_int_equal(tl.bad, 0);
		assert_int_equal(tl.last, 100);
		for (size_t i = 0; i < KM_K * KM_D; i++)
			assert_true(isfinite(cent[i]));

		/* every true center has a centroid where the mean of its blob
		 * is (sampling error ~ sigma * sqrt(d / 100)) */
		double worst = 0;
		uint32_t match[KM_K];
		for (uint32_t c = 0; c < KM_K; c++) {
			double dd;
			match[c] = nearest_ref(centers + c * KM_D, cent, KM_K, KM_D, &dd);
			if (sqrt(dd) > worst)
				worst = sqrt(dd);
			if (sqrt(dd) > 0.04)
				print_message("seed %llu: center %u: nearest centroid %u at %.4f\n",
					      (unsigned long long)seed, c, match[c], sqrt(dd));
		}
		print_message("seed %llu: worst center-to-centroid distance %.4f (sigma %.2f), %d ticks\n",
			      (unsigned long long)seed, worst, sigma, tl.calls);
		assert_true(worst <= 0.04);

		/* no empty cluster: each centroid is the nearest of some point,
		 * and points go with their blob */
		vf_cindex ci;
		assert_int_equal(vf_cindex_init(&ci, cent, KM_K, KM_D), 0);
		vf_nearest(&ci, pts, KM_N, assign, NULL, 2);
		size_t cnt[KM_K] = { 0 }, wrong = 0;
		for (size_t i = 0; i < KM_N; i++) {
			assert_true(assign[i] < KM_K);
			cnt[assign[i]]++;
			wrong += assign[i] != match[label[i]];
		}
		for (uint32_t j = 0; j < KM_K; j++) {
			if (cnt[j] == 0)
				print_message("seed %llu: centroid %u is nobody's nearest\n",
					      (unsigned long long)seed, j);
			assert_true(cnt[j] > 0);
		}
		assert_int_equal(wrong, 0);
		vf_cindex_free(&ci);
	}

	/* k = 1: the mean */
	float one[KM_D];
	assert_int_equal(vf_kmeans(pts, KM_N, KM_D, 1, 5, 9, 1, one, NULL, NULL), 0);
	for (uint32_t d = 0; d < KM_D; d++) {
		double m = 0;
		for (size_t i = 0; i < KM_N; i++)
			m += pts[i * KM_D + d];
		m /= KM_N;
		assert_true(fabs(one[d] - m) <= 1e-4 * (1 + fabs(m)));
	}

	/* a tick asking to stop cancels */
	tick_log stop = { 0, 0, 0, 1 };
	assert_int_equal(vf_kmeans(pts, KM_N, KM_D, KM_K, 20, 1, 2, cent, on_tick, &stop),
			 -ECANCELED);
	assert_int_equal(stop.calls, 1);
	free(assign);
	free(label);
	free(pts);
	free(centers);
}

static void test_kmeans_small_n(void **state)
{
	(void)state;
	rng r = { .s = 5 };
	const uint32_t D = 3;
	static const size_t ns[] = { 1, 2, 5 };
	for (size_t t = 0; t < sizeof ns / sizeof *ns; t++) {
		size_t n = ns[t];
		float *pts = gauss_vec(&r, n * D, 1.0);
		for (uint32_t k = (uint32_t)n; k <= n + 4; k += 2) {
			float *cent = malloc((size_t)k * D * sizeof(float));
			assert_non_null(cent);
			assert_int_equal(vf_kmeans(pts, n, D, k, 10, 1, 1, cent, NULL, NULL), 0);
			/* every point is a centroid, every centroid a point */
			for (size_t i = 0; i < n; i++) {
				double dd;
				nearest_ref(pts + i * D, cent, k, D, &dd);
				assert_true(dd == 0);
			}
			for (uint32_t j = 0; j < k; j++) {
				double dd;
				nearest_ref(cent + (size_t)j * D, pts, (uint32_t)n, D, &dd);
				assert_true(dd == 0);
			}
			free(cent);
		}
		free(pts);
	}
	float x[3] = { 1, 2, 3 }, c[3];
	assert_int_equal(vf_kmeans(x, 0, 3, 1, 10, 1, 1, c, NULL, NULL), -EINVAL);
	assert_int_equal(vf_kmeans(x, 1, 3, 0, 10, 1, 1, c, NULL, NULL), -EINVAL);
}

static void test_nearest_brute_force(void **state)
{
	(void)state;
	static const uint32_t ks[] = { 1, 5, 16, 17, 33, 100 };
	static const uint32_t ds[] = { 1, 3, 16, 100 };
	rng r = { .s = 6 };
	const size_t N = 1000;
	for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
		for (size_t di = 0; di < sizeof ds / sizeof *ds; di++) {
			uint32_t k = ks[ki], d = ds[di];
			float *cent = gauss_vec(&r, (size_t)k * d, 1.0);
			float *pts = gauss_vec(&r, N * d, 1.2);
			uint32_t *o1 = malloc(N * sizeof *o1), *o4 = malloc(N * sizeof *o4);
			float *d1 = malloc(N * sizeof *d1), *d4 = malloc(N * sizeof *d4);
			assert_non_null(o1);
			assert_non_null(o4);
			assert_non_null(d1);
			assert_non_null(d4);
			vf_cindex ci;
			assert_int_equal(vf_cindex_init(&ci, cent, k, d), 0);
			assert_int_equal(ci.k, k);
			assert_int_equal(ci.npanels, (k + VF_PANEL - 1) / VF_PANEL);
			vf_nearest(&ci, pts, N, o1, d1, 1);
			vf_nearest(&ci, pts, N, o4, d4, 4);
			assert_memory_equal(o1, o4, N * sizeof *o1);
			assert_memory_equal(d1, d4, N * sizeof *d1);
			/* fewer than 256 points: one thread whatever is asked */
			vf_nearest(&ci, pts, 100, o4, NULL, 8);
			assert_memory_equal(o1, o4, 100 * sizeof *o1);

			size_t ties = 0;
			float *dots = malloc((size_t)ci.npanels * VF_PANEL * sizeof(float));
			assert_non_null(dots);
			for (size_t i = 0; i < N; i++) {
				const float *x = pts + i * d;
				double best, xx = dot_d(x, x, d), cmax = 0;
				uint32_t want = nearest_ref(x, cent, k, d, &best);
				for (uint32_t j = 0; j < k; j++) {
					double cc = dot_d(cent + (size_t)j * d, cent + (size_t)j * d, d);
					cmax = cc > cmax ? cc : cmax;
				}
				double tol = 1e-5 * (xx + cmax) + 1e-6;
				double got = l2_d(x, cent + (size_t)o1[i] * d, d);
				assert_true(o1[i] < k);
				if (o1[i] != want) {
					/* only a near tie may go either way */
					if (got - best > tol)
						print_message("k %u d %u point %zu: nearest %u (%.7g), brute force %u (%.7g)\n",
							      k, d, i, o1[i], got, want, best);
					assert_true(got - best <= tol);
					ties++;
				}
				/* dist: squared distance less |x|^2 */
				assert_true(fabs(d1[i] + xx - got) <= tol);

				if (i % 50 == 0) {
					vf_cindex_dots(&ci, x, dots);
					for (uint32_t j = 0; j < ci.npanels * VF_PANEL; j++) {
						double want_dot = j < k ? dot_d(x, cent + (size_t)j * d, d) : 0;
						assert_true(fabs(dots[j] - want_dot) <= tol);
					}
				}
			}
			assert_true(ties <= N / 100);
			free(dots);
			vf_cindex_free(&ci);
			free(cent);
			free(pts);
			free(o1);
			free(o4);
			free(d1);
			free(d4);
		}
}

/* Exact ties go to the first centroid, as a scan in centroid order finds:
 * duplicates in the same lane of another panel, and in another lane. */
/* Centroids and points of one kind for test_nearest_bounded_same(). */
static void bounded_case(rng *r, int kind, uint32_t k, uint32_t d, size_t n, float *cent,
			 float *pts)
{
	static const float scales[] = {1e-14f, 1e-6f, 1e12f, 1e17f, 1e30f};
	for (size_t i = 0; i < (size_t)k * d; i++)
		cent[i] = kind == 1 || kind == 2 ? (float)(rng_next(r) % 5) /* a coarse grid */
						 : (float)rng_gauss(r);
	if (kind == 2) /* duplicates: centroid j repeats an earlier one */
		for (uint32_t j = 1; j < k; j++)
			if (rng_next(r) % 3 == 0)
				memcpy(cent + (size_t)j * d, cent + (size_t)(rng_next(r) % j) * d,
				       sizeof(float) * d);
	for (size_t i = 0; i < n; i++) {
		float *x = pts + i * d;
		const float *c = cent + (size_t)(rng_next(r) % k) * d;
		const float *c2 = cent + (size_t)(rng_next(r) % k) * d;
		for (uint32_t j = 0; j < d; j++)
			switch (i % 4) {
			case 0: /* near a centroid */
				x[j] = c[j] + (kind == 1 || kind == 2 ? 0 : 0.05f * (float)rng_gauss(r));
				break;
			case 1: /* halfway between two: ties on the grid */
				x[j] = (c[j] + c2[j]) / 2;
				break;
			case 2: /* anywhere */
				x[j] = kind == 1 || kind == 2 ? (float)(rng_next(r) % 9) / 2
							      : 2 * (float)rng_gauss(r);
				break;
			default: /* far out, or zero */
				x[j] = i % 8 == 3 ? 0 : 30 * c[j];
			}
	}
	if (kind >= 3) { /* extreme magnitudes: everything scaled, or one huge centroid */
		float s = scales[(kind - 3) % 5];
		for (size_t i = 0; i < (size_t)k * d; i++)
			cent[i] *= s;
		for (size_t i = 0; i < n * d; i++)
			pts[i] *= s;
	}
	if (kind == 8) {
		for (uint32_t j = 0; j < d; j++)
			cent[(size_t)(k / 2) * d + j] = 3e18f;
		for (uint32_t j = 0; j < d; j++)
			pts[j] = 1e19f; /* a point past float32's squares */
	}
}

/* The first look's assignment (vf_nearest_bounded()) gives every point the
 * centroid the exhaustive scan gives it, ties included (the first one),
 * with the kernel table the library picks (the kernels' bit for bit
 * checks cover the others): random centroids, a coarse grid (exact ties,
 * points halfway between two centroids), duplicate centroids, tiny, huge
 * and overflowing magnitudes, zero points. */
static void test_nearest_bounded_same(void **state)
{
	(void)state;
	static const uint32_t ks[] = {VF_PANEL * VF_ASSIGN_MIN_PANELS, 130, 1009};
	static const uint32_t ds[] = {1, 3, 24, 128};
	const char *kname = vf_kernels_get()->name;
	const size_t N = 600;
	rng r = {.s = 41};
	size_t bad = 0, looked = 0;
	{
		for (int kind = 0; kind < 9; kind++)
			for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
				for (size_t di = 0; di < sizeof ds / sizeof *ds; di++) {
					uint32_t k = ks[ki], d = ds[di];
					if (k == 1009 && d == 128 && kind % 3)
						continue; /* the largest case for some kinds */
					float *cent = malloc(sizeof(float) * k * d);
					float *pts = malloc(sizeof(float) * N * d);
					uint32_t *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
					assert_non_null(cent);
					assert_non_null(pts);
					assert_non_null(want);
					assert_non_null(got);
					bounded_case(&r, kind, k, d, N, cent, pts);
					vf_cindex ci, ai; /* as a generation has them */
					assert_int_equal(vf_cindex_init(&ci, cent, k, d), 0);
					assert_int_equal(vf_cindex_add_half(&ci), 0);
					assert_int_equal(vf_cindex_assign_init(&ai, &ci), 0);
					looked += ai.q8 != NULL;
					vf_nearest(&ci, pts, N, want, NULL, 1);
					vf_nearest_bounded(&ai, pts, N, got);
					for (size_t i = 0; i < N; i++)
						if (want[i] != got[i] && bad++ < 10)
							print_message("%s kind %d k %u d %u point %zu: %u, the scan %u\n",
								      kname, kind, k, d, i, got[i], want[i]);
					vf_cindex_assign_free(&ai);
					vf_cindex_free(&ci);
					free(cent);
					free(pts);
					free(want);
					free(got);
				}
	}
	assert_int_equal(bad, 0);
	assert_true(looked > 0);
}

static void test_nearest_ties_first(void **state)
{
	(void)state;
	enum { K = 40, D = 8 };
	rng r = { .s = 11 };
	float *cent = gauss_vec(&r, (size_t)K * D, 1.0);
	memcpy(cent + 37 * D, cent + 5 * D, D * sizeof(float));  /* lane 5, panels 0 and 2 */
	memcpy(cent + 22 * D, cent + 3 * D, D * sizeof(float));  /* lanes 3 and 6 */
	memcpy(cent + 39 * D, cent + 30 * D, D * sizeof(float)); /* lanes 14 and 7 */
	vf_cindex ci;
	assert_int_equal(vf_cindex_init(&ci, cent, K, D), 0);
	static const uint32_t first[] = { 5, 3, 30 };
	for (size_t t = 0; t < 3; t++) {
		uint32_t o = 99;
		vf_nearest(&ci, cent + (size_t)first[t] * D, 1, &o, NULL, 1);
		assert_int_equal(o, first[t]);
	}
	vf_cindex_free(&ci);
	free(cent);
}

/* vf_parallel() runs its helper jobs on every CPU of the process but the
 * caller's, and vf_thread_start() its thread on every CPU, also when the
 * caller is pinned to one (the daemon's workers are): each job records
 * how many CPUs its thread may use, and whether the caller's is one. */
typedef struct cpus_seen {
	int n, has;  /* CPUs it may use; whether cpu is one */
	int cpu;     /* the caller's */
} cpus_seen;

static void *count_cpus(void *arg)
{
	cpus_seen *c = arg;
	cpu_set_t set;
	c->n = pthread_getaffinity_np(pthread_self(), sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
	c->has = c->n > 0 && CPU_ISSET(c->cpu, &set);
	return NULL;
}

static void test_parallel_on_every_cpu(void **state)
{
	(void)state;
	cpu_set_t all, one, keep;
	assert_int_equal(sched_getaffinity(getpid(), sizeof all, &all), 0);
	if (CPU_COUNT(&all) < 2) {
		print_message("one CPU: nothing to spread the jobs over\n");
		return;
	}
	assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof keep, &keep), 0);
	CPU_ZERO(&one);
	int cpu = -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all)) {
			CPU_SET(c, &one);
			cpu = c;
			break;
		}
	assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
	cpus_seen seen[4], started = {0, 0, cpu};
	for (int t = 0; t < 4; t++)
		seen[t] = (cpus_seen){0, 0, cpu};
	vf_parallel(count_cpus, seen, sizeof seen[0], 4);
	/* a thread of its own (a write's preparation of the next rows, a
	 * build, the recall sampler): the program's CPUs, not the caller's */
	pthread_t th;
	if (vf_thread_start(&th, count_cpus, &started) == 0)
		pthread_join(th, NULL);
	/* one that works beside its starter (a write's preparing threads):
	 * everywhere but the starter's CPU */
	cpus_seen away = {0, 0, cpu};
	if (vf_thread_start_away(&th, count_cpus, &away) == 0)
		pthread_join(th, NULL);
	assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof keep, &keep), 0);
	assert_int_equal(away.n, CPU_COUNT(&all) - 1);
	assert_false(away.has);
	assert_int_equal(seen[0].n, 1); /* the caller's own job, where the caller is */
	for (int t = 1; t < 4; t++) { /* the helpers: everywhere else */
		assert_int_equal(seen[t].n, CPU_COUNT(&all) - 1);
		assert_false(seen[t].has);
	}
	assert_int_equal(started.n, CPU_COUNT(&all));
	assert_true(started.has);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_half_conversion),
		cmocka_unit_test(test_rotation_kept),
		cmocka_unit_test(test_rotation_preserves_geometry),
		cmocka_unit_test(test_estimator_l2_unbiased),
		cmocka_unit_test(test_estimator_dot_unbiased),
		cmocka_unit_test(test_error_bounds_l2),
		cmocka_unit_test(test_error_bounds_dot),
		cmocka_unit_test(test_kernels_agree),
		cmocka_unit_test(test_kernels_named),
		cmocka_unit_test(test_parallel_on_every_cpu),
		cmocka_unit_test(test_nearest_bounded_same),
		cmocka_unit_test(test_kmeans_recovers_blobs),
		cmocka_unit_test(test_kmeans_small_n),
		cmocka_unit_test(test_nearest_brute_force),
		cmocka_unit_test(test_nearest_ties_first),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
