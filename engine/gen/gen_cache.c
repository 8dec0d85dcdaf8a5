/*
 * engine/gen/gen_cache.c - the in-memory cache of generations: routing state
 * (centroids, rotation, cluster index) loaded once and shared by reference,
 * and made from a new generation's centroids (vf_gen_routing).
 */
#include "handle.h"
#include "gen.h"
#include "io.h"
#include "calibrate.h"
#include "math/math.h"

#include <stdlib.h>
#include <string.h>

static void gen_free(vf_gen *g)
{
	float *centroids = g->centroids;
	vf_gen_routing_free(g);
	free(centroids);
	free(g->located);
	free(g->cal);
	pthread_mutex_destroy(&g->located_mu);
	free(g);
}

static int gen_load(vf_txn *txn, vf_store *s, uint64_t id, vf_gen **out)
{
	vf_genmeta m;
	float *centroids = NULL;
	int rc;
	if ((rc = vf_load_genmeta(txn, s, id, &m)))
		return rc;
	size_t n = (size_t)m.nlist * m.dim;
	if (m.nlist == 0)
		return -EIO;
	vf_gen *g = vf_calloc(1, sizeof *g);
	if (!g || !(centroids = vf_malloc(sizeof *centroids * n))) {
		free(g);
		return -ENOMEM;
	}
	float *center = NULL;
	rc = vf_store_err(vf_load_centroids(txn, s, id, centroids, n));
	if (rc == 0 && (m.flags & VF_GEN_QUERY_TABLE)) {
		/* (a generation with the flag and no centre is damaged) */
		center = vf_malloc(sizeof *center * m.dim);
		rc = !center ? -ENOMEM : vf_store_err(vf_load_center(txn, s, id, center, m.dim));
		if (rc == -ENOENT)
			rc = -EIO;
	}
	if (rc) {
		free(center);
		free(centroids);
		free(g);
		return rc;
	}
	pthread_mutex_init(&g->located_mu, NULL);
	/* routing state (rotation, centroid index, rotated centroids) */
	rc = vf_gen_routing(g, &m, centroids, center);
	free(center);
	if (rc) {
		free(centroids);
		free(g);
		return rc;
	}
	/* the recall calibration, if it was built with one */
	g->cal = vf_malloc(sizeof *g->cal);
	rc = g->cal ? vf_load_calib(txn, s, id, g->cal, sizeof *g->cal) : -ENOMEM;
	if (rc == -ENOENT || (rc == 0 && g->cal->version != 1)) {
		free(g->cal);
		g->cal = NULL;
	} else if (rc) {
		gen_free(g);
		return vf_store_err(rc);
	}
	*out = g;
	return 0;
}

int vf_gen_get(vecfs *v, vf_txn *txn, uint64_t id, vf_gen **out)
{
	pthread_mutex_lock(&v->gen_mu);
	for (vf_gen *g = v->gens; g; g = g->next)
		if (g->id == id) {
			g->refs++;
			pthread_mutex_unlock(&v->gen_mu);
			*out = g;
			return 0;
		}
	pthread_mutex_unlock(&v->gen_mu);
	vf_gen *g = NULL;
	int rc = gen_load(txn, v->store, id, &g);
	if (rc)
		return rc;
	if (g->meta.state != VECFS_GEN_READY && g->meta.state != VECFS_GEN_BUILDING) {
		gen_free(g);
		return -EINVAL;
	}
	pthread_mutex_lock(&v->gen_mu);
	for (vf_gen *h = v->gens; h; h = h->next)
		if (h->id == id) { /* loaded concurrently */
			h->refs++;
			pthread_mutex_unlock(&v->gen_mu);
			gen_free(g);
			*out = h;
			return 0;
		}
	g->refs = 2; /* the cache's and the caller's */
	g->next = v->gens;
	v->gens = g;
	pthread_mutex_unlock(&v->gen_mu);
	*out = g;
	return 0;
}

void vf_gen_put(vecfs *v, vf_gen *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&v->gen_mu);
	int last = --g->refs == 0;
	pthread_mutex_unlock(&v->gen_mu);
	if (last)
		gen_free(g);
}

void vf_gen_forget(vecfs *v, uint64_t id)
{
	vf_gen *found = NULL;
	pthread_mutex_lock(&v->gen_mu);
	for (vf_gen **pp = &v->gens; *pp; pp = &(*pp)->next)
		if ((*pp)->id == id) {
			found = *pp;
			*pp = found->next;
			break;
		}
	pthread_mutex_unlock(&v->gen_mu);
	vf_gen_put(v, found);
}

uint32_t vf_gen_nearest(const vf_gen *g, const float *x)
{
	uint32_t best = 0;
	float bd = 0;
	vf_nearest(&g->ci, x, 1, &best, &bd, 1);
	return best;
}

int vf_gen_routing(vf_gen *g, const vf_genmeta *m, float *centroids, const float *center)
{
	memset(g, 0, sizeof *g);
	g->id = m->id;
	g->meta = *m;
	g->centroids = centroids;
	int rc;
	if (!(m->flags & VF_GEN_QUERY_TABLE) != !center)
		return -EIO;
	/* (a padded dimension the rotation refuses: the meta is damaged) */
	if ((rc = vf_rotation_init(&g->rot, m->dim, m->pdim, m->seed)) == -EINVAL)
		rc = -EIO;
	if (rc ||
	    (rc = vf_cindex_init(&g->ci, g->centroids, m->nlist, m->dim)) ||
	    (rc = vf_cindex_add_half(&g->ci)) ||
	    (rc = vf_cindex_assign_init(&g->ai, &g->ci)))
		goto fail;
	g->rc = vf_malloc(sizeof(float) * m->nlist * m->pdim);
	g->rc_sum = vf_malloc(sizeof(float) * m->nlist);
	if (!g->rc || !g->rc_sum) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t c = 0; c < m->nlist; c++) {
		float *r = g->rc + (size_t)c * m->pdim, sm = 0;
		vf_rotate(&g->rot, g->centroids + (size_t)c * m->dim, r);
		for (uint32_t i = 0; i < m->pdim; i++)
			sm += r[i];
		g->rc_sum[c] = sm;
	}
	if (center) {
		g->center = vf_malloc(sizeof(float) * m->dim);
		g->rmu = vf_malloc(sizeof(float) * m->pdim);
		if (!g->center || !g->rmu) {
			rc = -ENOMEM;
			goto fail;
		}
		memcpy(g->center, center, sizeof(float) * m->dim);
		vf_rotate(&g->rot, center, g->rmu);
	}
	return 0;
fail:
	vf_gen_routing_free(g);
	return rc;
}

void vf_gen_routing_free(vf_gen *g)
{
	vf_cindex_assign_free(&g->ai);
	vf_cindex_free(&g->ci);
	vf_rotation_free(&g->rot);
	free(g->rc);
	free(g->rc_sum);
	free(g->center);
	free(g->rmu);
	g->rc = g->rc_sum = g->center = g->rmu = NULL;
}
