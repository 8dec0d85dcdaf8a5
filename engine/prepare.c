/*
 * engine/prepare.c - the rows of a write prepared before they are written:
 * their nearest centroids and RaBitQ codes, found on every CPU.
 */
#include "io.h"
#include "write.h"
#include "parallel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const vf_precode *vf_prepared_next(vf_prepared *p)
{
	if (!p || p->next >= p->n)
		return NULL;
	const vf_precode *c = &p->pc[p->next++];
	return c->code.planes ? c : NULL;
}

void vf_prepared_free(vf_prepared *p)
{
	free(p->pc);
	free(p->planes);
	free(p->near);
	free(p->x);
	free(p->bad);
	memset(p, 0, sizeof *p);
}

/* The rows of a preparation, claimed PREP_PIECE at a time by its threads
 * (nearest centroids, then codes): a split fixed in advance left one
 * thread idle at the end while the other, sharing its CPU with the writer,
 * finished its half. */
#define PREP_PIECE 256
typedef struct prep_shared {
	const vf_gen *g;
	vf_prepared *p;
	size_t n;
	size_t next; /* the first row not claimed yet (atomic) */
} prep_shared;

typedef struct prep_job {
	prep_shared *sh;
	int rc;
} prep_job;

static void *prep_run(void *arg)
{
	prep_job *j = arg;
	const vf_gen *g = j->sh->g;
	vf_prepared *p = j->sh->p;
	uint32_t dim = g->meta.dim, pdim = g->meta.pdim;
	size_t pbytes = (size_t)g->meta.bits * pdim / 8;
	vf_encoder enc;
	j->rc = vf_encoder_init(&enc, &g->rot, g->meta.bits, g->meta.metric == VECFS_DOT);
	if (j->rc)
		return NULL;
	for (;;) {
		size_t from = __atomic_fetch_add(&j->sh->next, PREP_PIECE, __ATOMIC_RELAXED);
		if (from >= j->sh->n)
			break;
		size_t to = from + PREP_PIECE < j->sh->n ? from + PREP_PIECE : j->sh->n;
		vf_nearest(&g->ci, p->x + from * dim, to - from, p->near + from, NULL, 1);
		for (size_t i = from; i < to; i++) {
			uint32_t c = p->near[i];
			if (p->bad[i] || c >= g->meta.nlist)
				continue;
			p->pc[i].cluster = c;
			vf_encode(&enc, p->x + i * dim, g->centroids + (size_t)c * dim,
				  g->rc + (size_t)c * pdim, p->planes + i * pbytes, &p->pc[i].code);
		}
	}
	vf_encoder_free(&enc);
	return NULL;
}

/* Prepare rows[0..n) but those `skip` marks (superseded later in the same
 * write, so vf_put_row never sees them).  Returns 0 or -ENOMEM. */
int vf_prepare(vecfs *v, const vf_gen *g, const vecfs_row *rows, size_t n,
		   const uint8_t *skip, vf_prepared *p)
{
	uint32_t dim = g->meta.dim;
	size_t pbytes = (size_t)g->meta.bits * g->meta.pdim / 8, m = 0;
	if (p->cap < n) {
		vf_prepared_free(p);
		p->pc = vf_malloc(sizeof *p->pc * n);
		p->planes = vf_malloc(pbytes * n);
		p->near = vf_malloc(sizeof *p->near * n);
		p->x = vf_malloc(sizeof *p->x * dim * n);
		p->bad = vf_malloc(n);
		if (!p->pc || !p->planes || !p->near || !p->x || !p->bad) {
			vf_prepared_free(p);
			return -ENOMEM;
		}
		p->cap = n;
	}
	for (size_t i = 0; i < n; i++) {
		if (skip && skip[i])
			continue;
		p->bad[m] = vf_to_index_space((vecfs_metric)g->meta.metric, rows[i].vec,
					      p->x + m * dim, dim) != 0;
		if (p->bad[m])
			memset(p->x + m * dim, 0, sizeof(float) * dim);
		p->pc[m].code.planes = NULL;
		m++;
	}
	p->n = m;
	p->next = 0;
	int threads = m <= PREP_PIECE ? 1 : v->threads;
	prep_shared sh = {g, p, m, 0};
	prep_job jobs[VF_PARALLEL_MAX];
	int rc = 0;
	if (threads > VF_PARALLEL_MAX)
		threads = VF_PARALLEL_MAX;
	for (int t = 0; t < threads; t++)
		jobs[t] = (prep_job){&sh, 0};
	vf_parallel(prep_run, jobs, sizeof *jobs, threads);
	for (int t = 0; t < threads; t++)
		if (jobs[t].rc)
			rc = jobs[t].rc;
	if (rc)
		p->n = 0; /* vf_pw_apply() encodes them itself */
	return rc == -ENOMEM ? 0 : rc;
}

static void *prepare_run(void *arg)
{
	vf_prepare_ahead *a = arg;
	a->rc = vf_prepare(a->v, a->g, a->rows, a->n, a->skip, a->p);
	return NULL;
}

void vf_prepare_start(vf_prepare_ahead *a, vecfs *v, const vf_gen *g, const vecfs_row *rows,
		      size_t n, const uint8_t *skip, vf_prepared *p)
{
	*a = (vf_prepare_ahead){v, g, rows, n, skip, p, 0, 0, 0};
	a->running = vf_thread_start(&a->th, prepare_run, a) == 0;
	if (!a->running)
		prepare_run(a);
}

int vf_prepare_wait(vf_prepare_ahead *a)
{
	if (a->running)
		pthread_join(a->th, NULL);
	a->running = 0;
	return a->rc;
}
