/*
 * engine/gen/generations.c - the generations of a store: listing, information,
 * activation, removal (and the retirement of old ones), centroids and
 * per-cluster counts.
 */
#include "attrs.h"
#include "handle.h"
#include "gen.h"
#include "calibrate.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint64_t vecfs_active(vecfs *v)
{
	vf_txn *txn;
	if (vf_read_begin(v->store, &txn))
		return 0;
	uint64_t a = vf_load_active(txn, v->store);
	vf_read_end(v->store, txn);
	return a;
}

typedef struct activate_job {
	vecfs *v;
	uint64_t gen;
	char *err;
	size_t errlen;
} activate_job;

static int activate_fn(vf_txn *txn, void *arg)
{
	activate_job *j = arg;
	vf_genmeta m;
	int rc = vf_load_genmeta(txn, j->v->store, j->gen, &m);
	if (rc == -ENOENT) {
		vf_seterr(j->err, j->errlen, "generation %llu does not exist",
			  (unsigned long long)j->gen);
		return rc;
	}
	if (rc)
		return rc;
	if (m.state != VECFS_GEN_READY) {
		vf_seterr(j->err, j->errlen, "generation %llu is not ready",
			  (unsigned long long)j->gen);
		return -EINVAL;
	}
	int rc2 = vf_save_active(txn, j->v->store, j->gen);
	return rc2 ? rc2 : vf_attrs_touch(txn, j->v->store, VF_TIME_GENS);
}

int vecfs_activate(vecfs *v, uint64_t gen, char *err, size_t errlen)
{
	activate_job j = {v, gen, err, errlen};
	return vf_write(v->store, activate_fn, &j);
}

static int remove_fn(vf_txn *txn, void *arg)
{
	activate_job *j = arg;
	vf_genmeta m;
	int rc = vf_load_genmeta(txn, j->v->store, j->gen, &m);
	if (rc)
		return rc;
	if (vf_load_active(txn, j->v->store) == j->gen)
		return -EBUSY;
	if (m.state == VECFS_GEN_BUILDING)
		return -EBUSY;
	if ((rc = vf_drop_generation_keys(txn, j->v->store, j->gen)))
		return rc;
	return vf_attrs_touch(txn, j->v->store, VF_TIME_GENS);
}

int vecfs_gen_remove(vecfs *v, uint64_t gen)
{
	activate_job j = {v, gen, NULL, 0};
	int rc = vf_write(v->store, remove_fn, &j);
	if (rc == 0)
		vf_gen_forget(v, gen);
	return rc;
}

int vecfs_gen_list(vecfs *v, uint64_t *ids, size_t cap, size_t *n)
{
	vf_txn *txn;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = vf_list_gens(txn, v->store, ids, cap, n);
	vf_read_end(v->store, txn);
	return rc;
}

int vf_sum_manifests(vf_txn *txn, vf_store *s, uint64_t gen, uint32_t nlist,
			 uint64_t *deltas, uint64_t *tombs)
{
	*deltas = *tombs = 0;
	for (uint32_t c = 0; c < nlist; c++) {
		vf_manifest m;
		int rc = vf_load_manifest(txn, s, gen, c, &m);
		if (rc)
			return rc;
		*deltas += m.deltas;
		*tombs += m.tombstones;
	}
	return 0;
}

int vf_cluster_imbalance(vf_txn *txn, vf_store *s, const vf_genmeta *m, double *out)
{
	uint64_t total = 0, largest = 0;
	for (uint32_t c = 0; c < m->nlist; c++) {
		vf_manifest mf;
		int rc = vf_load_manifest(txn, s, m->id, c, &mf);
		if (rc)
			return rc;
		uint64_t n = mf.vectors + mf.deltas;
		n = n > mf.tombstones ? n - mf.tombstones : 0;
		total += n;
		if (n > largest)
			largest = n;
	}
	*out = total ? (double)largest * m->nlist / (double)total : 0;
	return 0;
}

int vf_active_imbalance(vecfs *v, uint64_t *active, double *out)
{
	vf_txn *txn;
	vf_genmeta m;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	*out = 0;
	*active = vf_load_active(txn, v->store);
	if (*active &&
	    (rc = vf_load_genmeta(txn, v->store, *active, &m)) == 0)
		rc = vf_cluster_imbalance(txn, v->store, &m, out);
	vf_read_end(v->store, txn);
	return rc;
}

int vecfs_gen_info_get(vecfs *v, uint64_t gen, vecfs_gen_info *out)
{
	vf_txn *txn;
	vf_genmeta m;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = vf_load_genmeta(txn, v->store, gen, &m);
	if (rc == 0) {
		memset(out, 0, sizeof *out);
		out->id = m.id;
		out->state = (vecfs_gen_state)m.state;
		out->created = m.created;
		out->covered = m.covered;
		out->nlist = m.nlist;
		out->bits = m.bits;
		out->dim = m.dim;
		out->pdim = m.pdim;
		out->query_table = !!(m.flags & VF_GEN_QUERY_TABLE);
		out->metric = (vecfs_metric)m.metric;
		out->seed = m.seed;
		out->build_seconds = m.build_seconds;
		out->parent = m.parent;
		out->phase_pct = m.pct;
		snprintf(out->phase, sizeof out->phase, "%s", m.phase);
		if (m.state == VECFS_GEN_READY)
			rc = vf_sum_manifests(txn, v->store, gen, m.nlist, &out->delta_postings,
					   &out->tombstones);
	}
	vf_read_end(v->store, txn);
	return rc;
}

/* Generation gen from the cache (loaded if need be); vf_gen_put it. */
static int gen_ref(vecfs *v, uint64_t gen, vf_gen **g)
{
	vf_txn *txn;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = vf_gen_get(v, txn, gen, g);
	vf_read_end(v->store, txn);
	return rc;
}

int vecfs_gen_recall_table(vecfs *v, uint64_t gen, uint32_t k, vecfs_recall_row *rows,
			   size_t cap, size_t *n, uint32_t *queries)
{
	vf_gen *g;
	*n = 0;
	int rc = gen_ref(v, gen, &g);
	if (rc)
		return rc;
	const vf_calib *c = g->cal;
	if (!c || c->nk == 0) {
		vf_gen_put(v, g);
		return -ENOENT;
	}
	uint32_t ki = c->nk - 1;
	for (uint32_t i = 0; i < c->nk; i++)
		if (c->k[i] >= k) {
			ki = i;
			break;
		}
	for (uint32_t t = 0; t < VF_CAL_NT && *n < cap; t++)
		rows[(*n)++] = (vecfs_recall_row){c->target[t], c->nprobe[ki][t], c->clusters[ki][t]};
	*queries = c->queries;
	vf_gen_put(v, g);
	return 0;
}

int vecfs_gen_centroids(vecfs *v, uint64_t gen, float **out, uint32_t *nlist,
			uint32_t *dim)
{
	vf_gen *g;
	int rc = gen_ref(v, gen, &g);
	if (rc)
		return rc;
	size_t n = (size_t)g->meta.nlist * g->meta.dim;
	*out = vf_malloc(sizeof(float) * n);
	if (!*out) {
		vf_gen_put(v, g);
		return -ENOMEM;
	}
	memcpy(*out, g->centroids, sizeof(float) * n);
	*nlist = g->meta.nlist;
	*dim = g->meta.dim;
	vf_gen_put(v, g);
	return 0;
}

int vecfs_gen_clusters(vecfs *v, uint64_t gen, vecfs_cluster_info **out, uint32_t *n)
{
	vf_txn *txn;
	vf_genmeta m;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	if ((rc = vf_load_genmeta(txn, v->store, gen, &m)))
		goto out;
	vecfs_cluster_info *ci = vf_calloc(m.nlist ? m.nlist : 1, sizeof *ci);
	if (!ci) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t c = 0; c < m.nlist && rc == 0; c++) {
		vf_manifest mf;
		if ((rc = vf_load_manifest(txn, v->store, gen, c, &mf)))
			break;
		ci[c].id = c;
		ci[c].blocks = mf.blocks;
		ci[c].deltas = mf.deltas;
		ci[c].tombstones = mf.tombstones;
		uint64_t live = mf.vectors + mf.deltas;
		ci[c].vectors = live > mf.tombstones ? live - mf.tombstones : 0;
	}
	if (rc) {
		free(ci);
		goto out;
	}
	*out = ci;
	*n = m.state == VECFS_GEN_READY ? m.nlist : 0;
out:
	vf_read_end(v->store, txn);
	return rc;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

void vf_retire_generations(vecfs *v, uint64_t keep)
{
	vecfs_config c;
	uint64_t ids[1024];
	size_t n = 0;
	if (vecfs_config_get(v, &c) || vecfs_gen_list(v, ids, 1024, &n))
		return;
	if (n > 1024)
		n = 1024;
	uint64_t active = vecfs_active(v);
	qsort(ids, n, sizeof ids[0], cmp_u64);
	size_t others = 0; /* `keep` counts among them, but stays */
	for (size_t i = 0; i < n; i++)
		others += ids[i] != active;
	/* oldest first, until keep_generations others are left */
	for (size_t i = 0; i < n && others > c.keep_generations; i++) {
		if (ids[i] == active || ids[i] == keep)
			continue;
		vecfs_gen_info gi;
		if (vecfs_gen_info_get(v, ids[i], &gi) || gi.state == VECFS_GEN_BUILDING)
			continue;
		if (vecfs_gen_remove(v, ids[i]) == 0)
			others--;
	}
}
