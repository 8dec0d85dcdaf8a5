/*
 * engine/rabitq.c - RaBitQ encoding (extended multi-bit codes) and the
 * query-side tables.
 */
#include "io.h"
#include "rabitq.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

int vf_encoder_init(vf_encoder *e, const vf_rotation *rot, uint32_t bits, int dot,
		    const float *rmu)
{
	memset(e, 0, sizeof *e);
	e->rot = rot;
	e->bits = bits;
	e->dot = dot;
	e->rmu = rmu;
	e->x = vf_malloc(sizeof(float) * rot->pdim);
	e->vc = vf_malloc(sizeof(float) * rot->pdim);
	e->k = vf_malloc(rot->pdim);
	if (!e->x || !e->vc || !e->k) {
		vf_encoder_free(e);
		return -ENOMEM;
	}
	return 0;
}

void vf_encoder_free(vf_encoder *e)
{
	free(e->x);
	free(e->vc);
	free(e->k);
	memset(e, 0, sizeof *e);
}

/* Step of the MSE-optimal uniform quantizer of a unit Gaussian with 2^B
 * levels: the rotated coordinates are close to Gaussian, so the best scale
 * lies near 1/(step * sigma). */
static const float gauss_step[9] = {0, 1.596f, 0.9957f, 0.586f, 0.3352f,
				    0.1881f, 0.1041f, 0.0568f, 0.0308f};

/* The scale t of levels k_i = trunc(min(t |x_i|, kmax)) (codes y_i =
 * sign(x_i)(k_i + 1/2)) making cos(y, x) as large as a scan over scales
 * around the Gaussian optimum finds; 0 (every level 0) when kmax or the
 * norm is 0.  The factors use the code actually chosen, so the estimator
 * is unbiased whatever scale wins; the scan only tightens the bound. */
static float best_scale(const vf_kernels *kn, const vf_encoder *e, const float *ax, uint32_t n,
			uint32_t kmax, double norm)
{
	static const float mult[] = {0.6f, 0.7f, 0.8f, 0.9f, 1.0f, 1.1f, 1.25f, 1.45f, 1.7f};
	if (kmax == 0 || norm == 0)
		return 0;
	float sigma = (float)(norm / sqrt((double)n));
	float t0 = 1.0f / (gauss_step[e->bits] * sigma);
	float best = -1, best_t = t0;
	for (size_t m = 0; m < sizeof mult / sizeof mult[0]; m++) {
		float t = t0 * mult[m], num, den;
		kn->levels_scan(ax, n, t, (float)kmax, &num, &den);
		float c = num / sqrtf(den);
		if (c > best) {
			best = c;
			best_t = t;
		}
	}
	return best_t;
}

/* ax = |x|, n floats (restrict: distinct, so it vectorizes) */
static void magnitudes(const float *restrict x, float *restrict ax, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		ax[i] = fabsf(x[i]);
}

static inline double sum4(const double s[4])
{
	return (s[0] + s[1]) + (s[2] + s[3]);
}

void vf_encode(vf_encoder *e, const float *v, const float *c, const float *rc,
	       uint8_t *planes, vf_code *out)
{
	const vf_rotation *rot = e->rot;
	const vf_kernels *kn = vf_kernels_get();
	uint32_t dim = rot->dim, n = rot->pdim, bits = e->bits;
	uint32_t kmax = (1u << (bits - 1)) - 1, nbytes = n / 8;
	float *x = e->x, *ax = e->vc;

	/* four partial sums each (lane i % 4), added at the end in a fixed
	 * order: single chains of dependent double adds were most of the
	 * encoder's time */
	double n4[4], c4[4], sums[5][4];
	kn->encode_residual(v, c, dim, ax, n4, c4);
	double norm2 = sum4(n4), cr = sum4(c4);
	vf_rotate(rot, ax, x);
	magnitudes(x, ax, n);
	float t = best_scale(kn, e, ax, n, kmax, sqrt(norm2));
	uint8_t *u = e->k;
	kn->encode_codes(x, ax, n, t, (float)kmax, 1u << (bits - 1), rc, e->rmu, u, sums);
	double sum_abs = sum4(sums[0]), yx = sum4(sums[1]), yy = sum4(sums[2]);
	double cdot = sum4(sums[3]), s1c = sum4(sums[4]); /* s1c: sum_i s_i (R (c - mu))_i */
	/* bit planes: bit sh of each of 8 codes, gathered into a byte by one
	 * multiply (code b's bit lands at bit 56 + b) */
	for (uint32_t p = 0; p < bits; p++) {
		uint32_t sh = bits - 1 - p;
		uint8_t *pl = planes + (size_t)p * nbytes;
		for (uint32_t j = 0; j < nbytes; j++) {
			uint64_t w;
			memcpy(&w, u + 8 * j, 8);
			w = (w >> sh) & 0x0101010101010101ULL;
			pl[j] = (uint8_t)((w * 0x0102040810204080ULL) >> 56);
		}
	}
	double coef = e->dot ? 1.0 : 2.0;
	double xn = sqrt(norm2);
	out->planes = planes;
	out->add = e->dot ? (float)-cr : (float)norm2;
	out->cdot = (float)cdot;
	if (xn == 0 || sum_abs == 0) {
		out->r1 = out->e1 = out->rb = out->eb = 0;
		return;
	}
	double a1 = sum_abs / (sqrt((double)n) * xn);
	double ab = yx / (sqrt(yy) * xn);
	if (a1 > 1)
		a1 = 1;
	if (ab > 1)
		ab = 1;
	double sq = sqrt((double)n - 1);
	out->r1 = (float)(-coef * norm2 / (0.5 * sum_abs));
	out->e1 = (float)(coef * xn * VF_EPS0 * sqrt(1 - a1 * a1) / (a1 * sq));
	out->rb = (float)(-coef * norm2 / yx);
	out->eb = (float)(coef * xn * VF_EPS0 * sqrt(1 - ab * ab) / (ab * sq));
	if (e->rmu) {
		/* the first pass scores against R (q - mu): add takes the
		 * cluster's share, and cdot gives back what add (as stored)
		 * lost, so add + rb * (u.Rq - cdot - ...) is as before */
		double add0 = out->add;
		out->add = (float)(add0 - (double)out->r1 * s1c);
		out->cdot = (float)(cdot + ((double)out->add - add0) / (double)out->rb);
	}
}

int vf_qstate_init(vf_qstate *s, uint32_t pdim, uint32_t bits, const float *rmu)
{
	memset(s, 0, sizeof *s);
	s->pdim = pdim;
	s->bits = bits;
	s->rmu = rmu;
	s->kn = vf_kernels_get();
	/* one room: rq (pdim floats), q16 (pdim), then with rmu the
	 * table's scratch (pdim residuals, pdim/4 offsets) and the table
	 * (pdim/4 * 16 bytes) */
	size_t pd = pdim, tab = rmu ? sizeof(float) * (pd + pd / 4) + pd * 4 : 0;
	uint8_t *room = vf_malloc(sizeof(float) * pd + sizeof(int16_t) * pd + tab);
	if (!room)
		return -ENOMEM;
	s->rq = (float *)room;
	s->q16 = (int16_t *)(room + sizeof(float) * pd);
	if (rmu) {
		s->scratch = (float *)(room + sizeof(float) * pd + sizeof(int16_t) * pd);
		s->lut = (uint8_t *)(s->scratch + pd + pd / 4);
	}
	return 0;
}

void vf_qstate_free(vf_qstate *s)
{
	free(s->rq); /* (the room) */
	s->rq = s->scratch = NULL;
	s->q16 = NULL;
	s->lut = NULL;
}

/* The first-pass table over v - sub (pdim floats each; qr and base:
 * scratch of pdim and pdim/4 floats): sum_i s_i (v - sub)_i ~= delta *
 * (sum of the entries the sign codes pick) + msum, with error at most
 * qerr.  Each group's entries are offset by its most negative subset sum,
 * so all are >= 0; one quantization step fits the widest group in 255. */
static void table_of(const vf_kernels *kn, const float *v, const float *sub, uint32_t groups,
		     float *qr, float *base, uint8_t *lut, float *delta, float *msum,
		     float *qerr)
{
	float maxrange;
	kn->groups4(v, sub, groups, qr, base, msum, &maxrange);
	float d = maxrange > 0 ? maxrange / 255.0f : 1.0f;
	kn->lut4(qr, groups, base, 1.0f / d, lut);
	/* rounding error at most d/2 per group (plus a little float slack) */
	*delta = d;
	*qerr = d * 0.5f * (float)groups * 1.001f + 1e-6f * maxrange * groups;
}

void vf_qstate_set(vf_qstate *s, const vf_rotation *rot, const float *q)
{
	vf_rotate(rot, q, s->rq);
	/* sum and largest magnitude, 16 lanes (pdim is a multiple of 32),
	 * the lanes added as vf_tree16 does */
	float maxabs;
	s->kn->sum_maxabs(s->rq, s->pdim, &s->rq_sum, &maxabs);
	/* 16-bit R q: the largest magnitude at qmax, where the code dot's
	 * sum (at most umax * pdim * qmax) stays below 2^31.  Each rounding
	 * (half away from zero of the float product, itself within
	 * 2^-24 * qmax < 0.002 of the exact one) errs by at most 0.502/sc,
	 * times u_i <= umax; the sum's conversion to float, 1/sc in float
	 * and their product by at most 2^31 * 2^-24 / sc each. */
	uint32_t umax = (1u << s->bits) - 1;
	double qmax = floor(2147483647.0 / ((double)umax * s->pdim));
	if (qmax > 32767)
		qmax = 32767;
	double sc = maxabs > 0 ? qmax / maxabs : 1.0;
	const float scf = (float)sc, qm = (float)qmax;
	s->kn->quant16(s->rq, s->pdim, scf, qm, s->q16);
	s->q16_inv = (float)(1.0 / scf);
	s->q16_err = (float)((0.502 * umax * s->pdim + 3 * 128.0) / scf * 1.0001);
	if (s->rmu)
		table_of(s->kn, s->rq, s->rmu, s->pdim / 4, s->scratch, s->scratch + s->pdim,
			 s->lut, &s->delta, &s->msum, &s->qerr);
}

int vf_cstate_init(vf_cstate *c, const vf_qstate *q)
{
	memset(c, 0, sizeof *c);
	if (q->rmu) {
		c->lut = q->lut;
		return 0;
	}
	c->own = vf_malloc(q->pdim / 4 * 16);
	c->qr = vf_malloc(sizeof(float) * q->pdim);
	c->base = vf_malloc(sizeof(float) * (q->pdim / 4));
	c->lut = c->own;
	if (!c->own || !c->qr || !c->base) {
		vf_cstate_free(c);
		return -ENOMEM;
	}
	return 0;
}

void vf_cstate_free(vf_cstate *c)
{
	free(c->own);
	free(c->qr);
	free(c->base);
	c->lut = c->own = NULL;
	c->qr = c->base = NULL;
}

void vf_cstate_set(vf_cstate *c, const vf_qstate *q, const float *rc, float rc_sum,
		   float qc, float nq)
{
	c->qr_sum = q->rq_sum - rc_sum;
	float delta, msum, qerr;
	if (q->rmu) { /* sum_i s_i (R (q - mu))_i; the codes took the rest */
		delta = q->delta;
		msum = q->msum;
		qerr = q->qerr;
	} else {
		table_of(q->kn, q->rq, rc, q->pdim / 4, c->qr, c->base, c->own, &delta, &msum,
			 &qerr);
	}
	/* S1 = sum_g lutf[g][code] ~= delta * acc + msum */
	c->p1.a = delta;
	c->p1.b = msum - 0.5f * c->qr_sum;
	c->p1.qc = qc;
	c->p1.nq = nq;
	c->p1.qerr = qerr;
	c->p1.thresh = INFINITY;
}
