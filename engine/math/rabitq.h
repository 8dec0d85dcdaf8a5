/*
 * engine/math/rabitq.h - RaBitQ codes and estimators.
 *
 * A vector v in cluster c is stored as x = R (v - c) (R: the rotation),
 * quantized to B bits per dimension: u_i in [0, 2^B), reconstructing
 * y_i = u_i - (2^B - 1)/2, with the scale chosen to maximize cos(y, x).  The
 * top bit of u_i is the sign of x_i (the sign plane).  For a query q with
 * qr = R (q - c), <x, qr> is estimated without bias by |x|^2 <y, qr> / <y, x>,
 * with error at most |x| |qr| eps0 sqrt(1 - a^2) / (a sqrt(pdim - 1)) at the
 * stated confidence, a = cos(y, x).  The first pass uses the sign plane only
 * (y = sign(x)/2); the second pass the full code.
 *
 * Distances (in index space; cosine indexes unit vectors under l2):
 *   l2:  |v - q|^2 = |r|^2 + |q - c|^2 - 2 <x, qr>
 *   dot: -<v, q>   = -<c, r> - <q, c> - <x, qr>
 * so est = add + qc + rescale * <y, qr>, with per-vector add/rescale/error
 * factors and per-cluster qc.
 */
#ifndef VF_RABITQ_H
#define VF_RABITQ_H

#include <math.h>
#include <stdint.h>

#include "block.h"
#include "kernels.h"
#include "rotation.h"

#define VF_EPS0 2.7f /* bound = eps0 standard deviations: 99.3% two-sided */

typedef struct vf_encoder {
	const vf_rotation *rot;
	uint32_t bits;
	int dot;        /* 1: dot-product distance, 0: l2 */
	const float *rmu; /* the query table's centre R mu (pdim), or NULL (below) */
	float *x;       /* pdim scratch */
	float *vc;      /* dim scratch */
	uint8_t *k;     /* pdim scratch */
} vf_encoder;

/* rmu non-NULL: the generation's first-pass table is built once a query,
 * over R (q - mu) (mu: the generation's centre, rmu = R mu), rather than
 * once a cluster over R (q - c) (VF_GEN_QUERY_TABLE).  The sign plane's
 * dot with R (q - c) is sum_i s_i (R (q - mu))_i - sum_i s_i (R (c - mu))_i,
 * whose second term is the code's own constant: the encoder moves
 * r1 times it out of add (the first pass's estimate is then
 * add + qc + r1 * (sum_i s_i (R (q - mu))_i - qr_sum / 2)) and the same
 * amount, divided by rb, out of cdot, so that the second pass's estimate
 * is unchanged. */
int vf_encoder_init(vf_encoder *e, const vf_rotation *rot, uint32_t bits, int dot,
		    const float *rmu);
void vf_encoder_free(vf_encoder *e);
/* Encode v (dim floats) against centroid c (dim) whose rotation is rc
 * (pdim).  Writes bits*pdim/8 bytes of planes and fills the factors of
 * `out` (not id/seq; out->planes is set to `planes`). */
void vf_encode(vf_encoder *e, const float *v, const float *c, const float *rc,
	       uint8_t *planes, vf_code *out);

/* Per-query state shared by all clusters. */
typedef struct vf_qstate {
	uint32_t pdim, bits;
	const float *rmu; /* non-NULL: the first-pass table is this query's,
			   * over R q - rmu (below) */
	float *rq;      /* R q, pdim */
	float rq_sum;
	/* R q in 16-bit integers for the second pass: q16 = round(R q * s),
	 * q16_inv = 1/s; sum_i u_i (R q)_i is within q16_err of
	 * q16_inv * sum_i u_i q16_i (float rounding included) */
	int16_t *q16;
	float q16_inv, q16_err;
	/* with rmu: the table over R q - rmu (groups*16 bytes) and its
	 * constants: sum_i s_i (R q - rmu)_i ~= delta * (sum of entries) +
	 * msum, within qerr */
	uint8_t *lut;
	float delta, msum, qerr;
	float *scratch;   /* pdim + pdim/4 */
	const vf_kernels *kn;
} vf_qstate;

int vf_qstate_init(vf_qstate *s, uint32_t pdim, uint32_t bits, const float *rmu);
void vf_qstate_free(vf_qstate *s);
void vf_qstate_set(vf_qstate *s, const vf_rotation *rot, const float *q);

/* Per-(query, cluster) first-pass table: groups*16 bytes, plus constants. */
typedef struct vf_cstate {
	const uint8_t *lut; /* the query's table, or own */
	uint8_t *own;   /* the cluster's table (no rmu) */
	float *qr;      /* pdim scratch */
	float *base;    /* pdim/4 scratch: per-group offsets */
	float qr_sum;
	vf_pass1 p1;
} vf_cstate;

/* For the clusters of query q (sharing its table when it has one). */
int vf_cstate_init(vf_cstate *c, const vf_qstate *q);
void vf_cstate_free(vf_cstate *c);
/* qc: the per-cluster distance term; nq = |q - c|. */
void vf_cstate_set(vf_cstate *c, const vf_qstate *q, const float *rc, float rc_sum,
		   float qc, float nq);

/* Second pass: estimate and bound from the full code: its sign plane at
 * `sign`, planes 1..bits-1 at `low`.  sum_i u_i (R q)_i comes from the
 * 16-bit query, whose error widens the bound by |rb| q16_err. */
static inline void vf_pass2(const vf_qstate *q, const vf_cstate *c, const uint8_t *sign,
			    const uint8_t *low, float add, float rb, float eb, float cdot,
			    float *est, float *bound)
{
	float u = (float)q->kn->code_dot(sign, low, q->bits, q->q16, q->pdim) * q->q16_inv;
	float half = (float)((1u << q->bits) - 1) * 0.5f;
	float sy = (u - cdot) - half * c->qr_sum;
	*est = (add + c->p1.qc) + rb * sy;
	*bound = eb * c->p1.nq + fabsf(rb) * q->q16_err;
}

#endif
