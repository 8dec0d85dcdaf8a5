/*
 * engine/gen/prepare.c - the rows of a write prepared before they are written:
 * their nearest centroids and RaBitQ codes, found on every CPU.
 */
#include "io.h"
#include "prepare.h"
#include "math/math.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
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
	free(p->src);
	memset(p, 0, sizeof *p);
}

/* Rows are claimed PREP_PIECE at a time, and each thread does all of a
 * piece (index space, nearest centroids, codes): a split fixed in advance
 * left one thread idle at the end while another, sharing its CPU with the
 * writer, finished its part. */
#define PREP_PIECE 256

/* Room for n rows in p; the rows of the n given that skip does not mark go
 * to p->src in order, and their number to p->n.  0 or -ENOMEM. */
static int prep_setup(const vf_gen *g, size_t n, const uint8_t *skip, vf_prepared *p)
{
	uint32_t dim = g->meta.dim;
	size_t pbytes = (size_t)g->meta.bits * g->meta.pdim / 8, m = 0;
	if (n > UINT32_MAX)
		return -ENOMEM;
	if (p->cap < n) {
		vf_prepared_free(p);
		p->pc = vf_malloc(sizeof *p->pc * n);
		p->planes = vf_malloc(pbytes * n);
		p->near = vf_malloc(sizeof *p->near * n);
		p->x = vf_malloc(sizeof *p->x * dim * n);
		p->bad = vf_malloc(n);
		p->src = vf_malloc(sizeof *p->src * n);
		if (!p->pc || !p->planes || !p->near || !p->x || !p->bad || !p->src) {
			vf_prepared_free(p);
			return -ENOMEM;
		}
		p->cap = n;
	}
	for (size_t i = 0; i < n; i++)
		if (!(skip && skip[i]))
			p->src[m++] = (uint32_t)i;
	p->n = m;
	p->next = 0;
	return 0;
}

/* Prepare p's rows [from, to) of rows: into index space, then their
 * nearest centroids, then their codes. */
static void prep_piece(const vf_gen *g, vf_encoder *enc, const vecfs_row *rows, vf_prepared *p,
		       size_t from, size_t to)
{
	uint32_t dim = g->meta.dim, pdim = g->meta.pdim;
	size_t pbytes = (size_t)g->meta.bits * pdim / 8;
	for (size_t i = from; i < to; i++) {
		p->bad[i] = vf_to_index_space((vecfs_metric)g->meta.metric, rows[p->src[i]].vec,
					      p->x + i * dim, dim) != 0;
		if (p->bad[i])
			memset(p->x + i * dim, 0, sizeof(float) * dim);
		p->pc[i].code.planes = NULL;
	}
	vf_nearest_bounded(&g->ai, p->x + from * dim, to - from, p->near + from);
	for (size_t i = from; i < to; i++) {
		uint32_t c = p->near[i];
		if (p->bad[i] || c >= g->meta.nlist)
			continue;
		p->pc[i].cluster = c;
		vf_encode(enc, p->x + i * dim, g->centroids + (size_t)c * dim,
			  g->rc + (size_t)c * pdim, p->planes + i * pbytes, &p->pc[i].code);
	}
}

typedef struct prep_shared {
	const vf_gen *g;
	const vecfs_row *rows;
	vf_prepared *p;
	atomic_size_t next; /* the first row not claimed yet */
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
	vf_encoder enc;
	j->rc = vf_gen_encoder_init(&enc, g);
	if (j->rc)
		return NULL;
	for (;;) {
		size_t from = atomic_fetch_add_explicit(&j->sh->next, PREP_PIECE, memory_order_relaxed);
		if (from >= p->n)
			break;
		prep_piece(g, &enc, j->sh->rows, p, from,
			   from + PREP_PIECE < p->n ? from + PREP_PIECE : p->n);
	}
	vf_encoder_free(&enc);
	return NULL;
}

int vf_prepare(vecfs *v, const vf_gen *g, const vecfs_row *rows, size_t n,
	       const uint8_t *skip, vf_prepared *p)
{
	if (prep_setup(g, n, skip, p)) {
		p->n = 0;
		return 0; /* vf_pw_apply() encodes them itself */
	}
	int threads = p->n <= PREP_PIECE ? 1 : v->threads;
	prep_shared sh = {g, rows, p, 0};
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

/* The preparer.  A slot holds one chunk; chunk k is in slot k % PREP_DEPTH,
 * set up (room, which rows) by whoever comes first once chunk k - DEPTH is
 * released.  Its pieces are claimed with a compare-and-swap of `claim`,
 * chunk << 32 | first unclaimed row: a thread still looking at a chunk that
 * was released and whose slot now holds another cannot claim rows of the
 * other one.  `done` counts the rows prepared; the thread that completes a
 * chunk wakes the writer. */
#define PREP_DEPTH 3 /* chunks prepared at once: the writer's and two more */
#define PREP_THREADS_MAX (VF_PARALLEL_MAX - 1)
#define PREP_ROOM_BYTES ((size_t)16 << 20) /* a room's size, rows of high dimension */

typedef struct prep_slot {
	vf_prepared p;
	_Atomic uint64_t claim;
	_Atomic size_t done;
	_Atomic size_t n;    /* rows to prepare (p.n) */
	size_t chunk;        /* with mu held; SIZE_MAX: none yet */
} prep_slot;

struct vf_preparer {
	vecfs *v;
	const vf_gen *g;
	const vecfs_row *rows;
	const uint8_t *skip;
	size_t n, chunk, chunks; /* rows, rows a chunk, chunks */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t set_up;       /* chunks whose setup was claimed (mu) */
	size_t released;     /* chunks the writer is done with (mu) */
	int stop;            /* (mu) */
	prep_slot slot[PREP_DEPTH];
	int nthreads;
	pthread_t th[PREP_THREADS_MAX];
	vf_encoder enc[PREP_THREADS_MAX + 1]; /* [0]: the writer's */
	int nenc;
};

typedef struct prep_worker {
	vf_preparer *pp;
	vf_encoder *enc;
} prep_worker;

static uint64_t claim_word(size_t chunk, size_t row)
{
	return (uint64_t)chunk << 32 | row;
}

/* Set up chunk k, whose setup the caller claimed (mu not held). */
static void slot_setup(vf_preparer *pp, size_t k)
{
	prep_slot *s = &pp->slot[k % PREP_DEPTH];
	size_t from = k * pp->chunk;
	size_t n = pp->n - from < pp->chunk ? pp->n - from : pp->chunk;
	if (prep_setup(pp->g, n, pp->skip ? pp->skip + from : NULL, &s->p))
		s->p.n = 0; /* no memory: the writer encodes these rows itself */
	atomic_store_explicit(&s->done, 0, memory_order_relaxed);
	atomic_store_explicit(&s->n, s->p.n, memory_order_relaxed);
	atomic_store_explicit(&s->claim, claim_word(k, 0), memory_order_release);
	pthread_mutex_lock(&pp->mu);
	s->chunk = k;
	pthread_cond_broadcast(&pp->cv);
	pthread_mutex_unlock(&pp->mu);
}

/* Prepare pieces of chunk k while there are any to claim. */
static void slot_work(vf_preparer *pp, size_t k, vf_encoder *enc)
{
	prep_slot *s = &pp->slot[k % PREP_DEPTH];
	const vecfs_row *rows = pp->rows + k * pp->chunk;
	uint64_t w = atomic_load_explicit(&s->claim, memory_order_acquire);
	for (;;) {
		if (w >> 32 != k)
			return;
		size_t from = (size_t)(w & UINT32_MAX);
		size_t n = atomic_load_explicit(&s->n, memory_order_relaxed);
		if (from >= n)
			return;
		size_t to = from + PREP_PIECE < n ? from + PREP_PIECE : n;
		if (!atomic_compare_exchange_weak_explicit(&s->claim, &w, claim_word(k, to),
							   memory_order_acq_rel, memory_order_acquire))
			continue; /* w is the current word now */
		prep_piece(pp->g, enc, rows, &s->p, from, to);
		if (atomic_fetch_add_explicit(&s->done, to - from, memory_order_acq_rel) + (to - from) ==
		    n) {
			pthread_mutex_lock(&pp->mu);
			pthread_cond_broadcast(&pp->cv);
			pthread_mutex_unlock(&pp->mu);
		}
		w = atomic_load_explicit(&s->claim, memory_order_acquire);
	}
}

/* With mu held: is every chunk whose setup was claimed set up? */
static int all_set_up(vf_preparer *pp)
{
	for (size_t k = pp->released; k < pp->set_up; k++)
		if (pp->slot[k % PREP_DEPTH].chunk != k)
			return 0;
	return 1;
}

/* With mu held: the first chunk set up and not released that has rows to
 * claim, SIZE_MAX if none. */
static size_t claimable(vf_preparer *pp)
{
	for (size_t k = pp->released; k < pp->set_up; k++) {
		prep_slot *s = &pp->slot[k % PREP_DEPTH];
		if (s->chunk != k)
			continue; /* being set up */
		uint64_t w = atomic_load_explicit(&s->claim, memory_order_relaxed);
		if (w >> 32 == k && (w & UINT32_MAX) < atomic_load_explicit(&s->n, memory_order_relaxed))
			return k;
	}
	return SIZE_MAX;
}

static void *preparer_run(void *arg)
{
	prep_worker *wk = arg;
	vf_preparer *pp = wk->pp;
	pthread_mutex_lock(&pp->mu);
	while (!pp->stop) {
		size_t k = claimable(pp);
		if (k != SIZE_MAX) {
			pthread_mutex_unlock(&pp->mu);
			slot_work(pp, k, wk->enc);
			pthread_mutex_lock(&pp->mu);
		} else if (pp->set_up < pp->chunks && pp->set_up < pp->released + PREP_DEPTH) {
			k = pp->set_up++;
			pthread_mutex_unlock(&pp->mu);
			slot_setup(pp, k);
			pthread_mutex_lock(&pp->mu);
		} else if (pp->set_up == pp->chunks && all_set_up(pp)) {
			break; /* every chunk set up, and every row claimed */
		} else {
			pthread_cond_wait(&pp->cv, &pp->mu);
		}
	}
	pthread_mutex_unlock(&pp->mu);
	free(wk);
	return NULL;
}

size_t vf_preparer_chunk_rows(uint32_t dim, uint32_t pdim, uint32_t bits)
{
	size_t row = sizeof(float) * dim + (size_t)bits * pdim / 8 + sizeof(vf_precode) +
		     2 * sizeof(uint32_t) + 1; /* x, planes, pc, near and src, bad */
	size_t rows = VF_NEAR_CHUNK;
	while (rows > PREP_PIECE && rows * row > PREP_ROOM_BYTES)
		rows /= 2;
	return rows;
}

size_t vf_preparer_chunk(const vf_preparer *pp)
{
	return pp->chunk;
}

int vf_preparer_start(vf_preparer **out, vecfs *v, const vf_gen *g, const vecfs_row *rows,
		      size_t n, const uint8_t *skip)
{
	*out = NULL;
	vf_preparer *pp = vf_calloc(1, sizeof *pp);
	if (!pp)
		return -ENOMEM;
	size_t chunk = vf_preparer_chunk_rows(g->meta.dim, g->meta.pdim, g->meta.bits);
	*pp = (vf_preparer){.v = v, .g = g, .rows = rows, .skip = skip, .n = n, .chunk = chunk,
			    .chunks = (n + chunk - 1) / chunk};
	pthread_mutex_init(&pp->mu, NULL);
	pthread_cond_init(&pp->cv, NULL);
	for (int i = 0; i < PREP_DEPTH; i++)
		pp->slot[i].chunk = SIZE_MAX;
	/* the writer takes a CPU; a write of one piece is prepared by it alone */
	int threads = n <= PREP_PIECE ? 0 : v->threads - 1;
	if (threads > PREP_THREADS_MAX)
		threads = PREP_THREADS_MAX;
	for (; pp->nenc <= threads; pp->nenc++)
		if (vf_gen_encoder_init(&pp->enc[pp->nenc], g)) {
			vf_preparer_stop(pp);
			return -ENOMEM;
		}
	for (int t = 0; t < threads; t++) {
		prep_worker *wk = vf_malloc(sizeof *wk);
		if (!wk)
			break;
		*wk = (prep_worker){pp, &pp->enc[t + 1]};
		/* off the writer's CPU: it works on as they prepare */
		if (vf_thread_start_away(&pp->th[pp->nthreads], preparer_run, wk)) {
			free(wk);
			break; /* fewer threads: the writer prepares the rest */
		}
		pp->nthreads++;
	}
	*out = pp;
	return 0;
}

vf_prepared *vf_preparer_take(vf_preparer *pp, size_t k)
{
	prep_slot *s = &pp->slot[k % PREP_DEPTH];
	pthread_mutex_lock(&pp->mu);
	while (s->chunk != k) {
		if (pp->set_up == k) { /* nobody has set it up: the writer does */
			pp->set_up++;
			pthread_mutex_unlock(&pp->mu);
			slot_setup(pp, k);
			pthread_mutex_lock(&pp->mu);
		} else {
			pthread_cond_wait(&pp->cv, &pp->mu);
		}
	}
	pthread_mutex_unlock(&pp->mu);
	slot_work(pp, k, &pp->enc[0]);
	size_t n = atomic_load_explicit(&s->n, memory_order_relaxed);
	if (atomic_load_explicit(&s->done, memory_order_acquire) != n) {
		pthread_mutex_lock(&pp->mu);
		while (atomic_load_explicit(&s->done, memory_order_acquire) != n)
			pthread_cond_wait(&pp->cv, &pp->mu);
		pthread_mutex_unlock(&pp->mu);
	}
	s->p.next = 0;
	return &s->p;
}

void vf_preparer_release(vf_preparer *pp, size_t k)
{
	pthread_mutex_lock(&pp->mu);
	if (pp->released < k + 1)
		pp->released = k + 1;
	pthread_cond_broadcast(&pp->cv);
	pthread_mutex_unlock(&pp->mu);
}

void vf_preparer_stop(vf_preparer *pp)
{
	if (!pp)
		return;
	pthread_mutex_lock(&pp->mu);
	pp->stop = 1;
	pthread_cond_broadcast(&pp->cv);
	pthread_mutex_unlock(&pp->mu);
	for (int t = 0; t < pp->nthreads; t++)
		pthread_join(pp->th[t], NULL);
	for (int i = 0; i < pp->nenc; i++)
		vf_encoder_free(&pp->enc[i]);
	for (int i = 0; i < PREP_DEPTH; i++)
		vf_prepared_free(&pp->slot[i].p);
	pthread_cond_destroy(&pp->cv);
	pthread_mutex_destroy(&pp->mu);
	free(pp);
}
