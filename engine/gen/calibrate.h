/*
 * engine/gen/calibrate.h - how many clusters a query must probe to reach a
 * recall target: measured at build time on sample queries drawn from the
 * data (their exact neighbours found by brute force), stored with the
 * generation, and applied per query as a stopping rule.
 *
 * The rule: a query probes its nearest cluster, and each next one (in
 * probe order, at most `cap` in all) while
 *     score(q, centroid_r) - score(q, centroid_0)  <=  tau * scale(q)
 * where score is what probing ranks clusters by (|c|^2 - 2<q,c> for l2
 * and cosine, -<q,c> for dot) and scale(q) is |q|^2 for l2 and cosine,
 * |q| * max|x| for dot: clusters not much farther than the nearest one.
 * A query whose nearest clusters are all about as far probes many; one
 * with a clear nearest cluster, few.  For each k and target, (tau, cap)
 * is the pair with the fewest clusters probed on average at which the
 * sample queries' mean recall@k reached the target plus a margin; with
 * tau infinite it is a fixed nprobe, which the search includes, so the
 * rule probes no more than the smallest fixed nprobe that reaches the
 * same recall on the sample.
 *
 * A second look guards queries unlike the sample (far from the data, or
 * where records were deleted): once its results are in, a query whose
 * first cluster left out is as near as
 *     score(q, centroid_r) + scale(q) <= gamma * kth
 * (kth: the k-th exact distance found, + scale(q) for dot; for l2 and
 * cosine both sides are squared distances) probes on, every cluster up to
 * the first that is not, and re-ranks what they add.  gamma is set so
 * that 10% of the sample queries would look again.
 */
#ifndef VF_CALIBRATE_H
#define VF_CALIBRATE_H

#include <stdint.h>

#include "gen.h"

#define VF_CAL_NK 3  /* k = 1, 10, 100 */
#define VF_CAL_NT 12 /* recall targets */

typedef struct vf_calib {
	uint32_t version;               /* 1 */
	uint32_t queries;               /* sample queries measured */
	float max_norm;                 /* largest vector norm (dot's add) */
	uint32_t nk;                    /* k values calibrated (<= VF_CAL_NK) */
	uint32_t k[VF_CAL_NK];
	float target[VF_CAL_NT];
	float tau[VF_CAL_NK][VF_CAL_NT];
	uint32_t cap[VF_CAL_NK][VF_CAL_NT];
	uint32_t nprobe[VF_CAL_NK][VF_CAL_NT]; /* the smallest fixed nprobe that
						  reached the same target */
	float recall[VF_CAL_NK][VF_CAL_NT];    /* the sample's mean recall under
						  the rule */
	float clusters[VF_CAL_NK][VF_CAL_NT];  /* its mean clusters probed */
	float gamma[VF_CAL_NK][VF_CAL_NT];     /* the second look (below) */
} vf_calib;

/* Calibrate a generation: n vectors, vec(i) giving vector i in index
 * space (into buf, dim floats), assign[i] its cluster; g its routing.
 * The sample queries' exact neighbours cost n * 300 distances.
 * Runs on `threads` CPUs.  0, -ENOMEM or -ECANCELED (tick returned
 * non-zero). */
typedef void (*vf_vec_fn)(const void *arg, uint64_t i, float *buf);
int vf_calibrate(const vf_gen *g, vecfs_metric metric, uint64_t n, vf_vec_fn vec,
		 const void *varg, const uint32_t *assign, int threads, uint64_t seed,
		 int (*tick)(void *, int), void *targ, vf_calib *out);

/* The rule for one query: k results at recall target t. */
typedef struct vf_stop_rule {
	float tau;     /* +inf: cap clusters, always */
	uint32_t cap;  /* clusters probed at most */
	float gamma;   /* 0: no second look */
	float max_norm;
} vf_stop_rule;
/* scale(q) above, for a query with squared norm qn2. */
float vf_calib_scale(vecfs_metric m, float qn2, float max_norm);
void vf_calib_rule(const vf_calib *c, uint32_t nlist, uint32_t k, float t, vf_stop_rule *r);

#endif
