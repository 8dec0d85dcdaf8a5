/*
 * engine/config.c - the distance metric and the configuration: defaults,
 * the stored form, get and set.
 */
#include "attrs.h"
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <string.h>

const char *vecfs_metric_name(vecfs_metric m)
{
	switch (m) {
	case VECFS_L2: return "l2";
	case VECFS_COSINE: return "cosine";
	case VECFS_DOT: return "dot";
	}
	return "?";
}

int vecfs_metric_parse(const char *s, vecfs_metric *out)
{
	if (!strcmp(s, "l2"))
		*out = VECFS_L2;
	else if (!strcmp(s, "cosine"))
		*out = VECFS_COSINE;
	else if (!strcmp(s, "dot"))
		*out = VECFS_DOT;
	else
		return -EINVAL;
	return 0;
}

int vf_to_index_space(vecfs_metric m, const float *in, float *out, uint32_t dim)
{
	if (m != VECFS_COSINE) {
		if (out != in)
			memcpy(out, in, sizeof(float) * dim);
		return 0;
	}
	double n2 = 0;
	for (uint32_t i = 0; i < dim; i++)
		n2 += (double)in[i] * in[i];
	if (n2 == 0)
		return -EINVAL;
	/* in double: 1/|in| of a float vector is within double's range, not
	 * always float32's (|in| < 2^-126 or > 2^126) */
	double inv = 1.0 / sqrt(n2);
	for (uint32_t i = 0; i < dim; i++)
		out[i] = (float)(in[i] * inv);
	return 0;
}

void vecfs_config_defaults(vecfs_config *c)
{
	memset(c, 0, sizeof *c);
	c->metric = VECFS_L2;
	c->bits = 4;
	c->nprobe = 0;
	c->recall_target = 0.95f;
	c->k = 10;
	c->refine = 10;
	c->auto_build = 10000;
	c->compact_deltas = 128;
	c->keep_generations = 1;
	c->rebalance_ratio = 3;
	c->seed = 0x7665636673ULL;
}

static void to_stored(const vecfs_config *c, vf_stored_config *s)
{
	memset(s, 0, sizeof *s);
	s->version = 2;
	s->dim = c->dim;
	s->metric = c->metric;
	s->nlist = c->nlist;
	s->bits = c->bits;
	s->nprobe = c->nprobe;
	s->k = c->k;
	s->refine = c->refine;
	s->auto_build = c->auto_build;
	s->compact_deltas = c->compact_deltas;
	s->keep_generations = c->keep_generations;
	s->seed = c->seed;
	s->rebalance_ratio = c->rebalance_ratio;
	s->recall_ppm = (uint32_t)lrint((double)c->recall_target * 1e6);
}

static void from_stored(const vf_stored_config *s, vecfs_config *c)
{
	c->dim = s->dim;
	c->metric = (vecfs_metric)s->metric;
	c->nlist = s->nlist;
	c->bits = s->bits;
	c->nprobe = s->nprobe;
	c->k = s->k;
	c->refine = s->refine;
	c->auto_build = s->auto_build;
	c->compact_deltas = s->compact_deltas;
	c->keep_generations = s->keep_generations;
	c->seed = s->seed;
	c->rebalance_ratio = s->rebalance_ratio;
	c->recall_target = vf_recall_target(s);
}

float vf_recall_target(const vf_stored_config *s)
{
	return s->recall_ppm ? (float)(s->recall_ppm / 1e6) : 0.95f;
}

int vf_load_config(vf_txn *txn, vf_store *s, vf_stored_config *c)
{
	int rc = vf_load_meta(txn, s, VF_META_CONFIG, c, sizeof *c);
	if (rc == -ENOENT) {
		vecfs_config d;
		vecfs_config_defaults(&d);
		to_stored(&d, c);
		return 0;
	}
	/* version 1 had no recall target, and every query probed nprobe
	 * clusters (32 unless set): the old default becomes the new one, 0,
	 * chosen per query */
	if (rc == 0 && c->version < 2) {
		if (c->nprobe == 32)
			c->nprobe = 0;
		c->recall_ppm = 0;
		c->version = 2;
	}
	return rc;
}

int vecfs_config_get(vecfs *v, vecfs_config *out)
{
	vf_txn *txn;
	vf_stored_config sc;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = vf_load_config(txn, v->store, &sc);
	vf_read_end(v->store, txn);
	if (rc == 0)
		from_stored(&sc, out);
	return rc;
}

typedef struct config_job {
	vecfs *v;
	const vecfs_config *c;
	char *err;
	size_t errlen;
} config_job;

static int config_fn(vf_txn *txn, void *arg)
{
	config_job *j = arg;
	vf_stored_config old, nw;
	vf_counters cnt;
	int rc;
	if ((rc = vf_load_config(txn, j->v->store, &old)) ||
	    (rc = vf_load_counters(txn, j->v->store, &cnt)))
		return rc;
	int has_data = cnt.next_id > 0 || cnt.live > 0;
	if (has_data && (j->c->dim != old.dim || (uint32_t)j->c->metric != old.metric)) {
		vf_seterr(j->err, j->errlen, "config: %s cannot change once the store has records",
			  j->c->dim != old.dim ? "dim" : "metric");
		return -EBUSY;
	}
	to_stored(j->c, &nw);
	int rc2 = vf_save_config(txn, j->v->store, &nw);
	return rc2 ? rc2 : vf_attrs_touch(txn, j->v->store, VF_TIME_CONFIG);
}

int vecfs_config_set(vecfs *v, const vecfs_config *c, char *err, size_t errlen)
{
	if (c->dim > VECFS_DIM_MAX) {
		vf_seterr(err, errlen, "config: dim must be at most %d", VECFS_DIM_MAX);
		return -EINVAL;
	}
	if (c->metric != VECFS_L2 && c->metric != VECFS_COSINE && c->metric != VECFS_DOT) {
		vf_seterr(err, errlen, "config: metric must be l2, cosine or dot");
		return -EINVAL;
	}
	if (c->bits < 1 || c->bits > 8) {
		vf_seterr(err, errlen, "config: bits must be 1..8");
		return -EINVAL;
	}
	if (c->nlist > 1000000) {
		vf_seterr(err, errlen, "config: nlist must be at most 1000000");
		return -EINVAL;
	}
	if (c->k < 1 || c->refine < 1 || c->k > 100000 || c->refine > 1000) {
		vf_seterr(err, errlen, "config: k and refine must be positive (k <= 100000, refine <= 1000)");
		return -EINVAL;
	}
	if (!(c->recall_target > 0 && c->recall_target <= 1)) {
		vf_seterr(err, errlen, "config: recall_target must be a number in (0, 1]");
		return -EINVAL;
	}
	if (c->compact_deltas < 1) {
		vf_seterr(err, errlen, "config: compact_deltas must be positive");
		return -EINVAL;
	}
	if (c->keep_generations > 1000) {
		vf_seterr(err, errlen, "config: keep_generations must be at most 1000");
		return -EINVAL;
	}
	if (c->rebalance_ratio == 1 || c->rebalance_ratio > 1000) {
		vf_seterr(err, errlen, "config: rebalance_ratio must be 0 (never) or 2..1000");
		return -EINVAL;
	}
	config_job j = {v, c, err, errlen};
	return vf_write(v->store, config_fn, &j);
}
