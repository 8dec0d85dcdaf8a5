/*
 * engine/query/sampler.c - the recall the live workload gets: a share of the
 * served ANN queries is run again exactly, in the background, on the
 * snapshot the query read (a sample whose snapshot is gone by then is
 * dropped), and its recall@k kept over a window of the latest samples.
 *
 * A served query vector is taken with probability 1/SAMPLE_EVERY into a
 * queue of at most QUEUE (then it replaces a random one: the queue stays
 * a uniform sample of recent queries).  The sampler thread runs at the
 * lowest scheduling priority (SCHED_IDLE: only when a CPU would be idle)
 * and runs the queued samples of the current snapshot as one exact batch
 * (one pass over the records for all of them); after a batch of t seconds
 * of its CPU time it sleeps 19 t: it uses at most 5% of one CPU (the batch
 * runs on this thread alone; split over the store's threads, their time
 * went uncounted: 12% of a busy query thread's, measured on glove-100).
 * A query's recall is the share of its
 * results no farther than the exact k-th distance (ties count as found).
 * The estimate is the mean over the window, with a Wilson 95% interval
 * whose number of trials is the window's effective number of results:
 * p(1-p) over the variance of the mean (between the number of queries,
 * were each query's results all found or all missed together, and the
 * number of results, were they independent).  When the interval lies
 * wholly below recall_target,
 * one line goes to the notice callback (errors), again only after the
 * estimate has come back up.
 *
 * A store whose file does not fit in the memory the process may hold
 * (vf_store_exceeds_memory()) is not sampled: each exact batch would read
 * all of it through the page cache and push out the pages the searches
 * read (measured on the 1M set with the daemon capped at 25% of its store:
 * batched warm QPS 1.3-1.5x higher without it).
 */
#include "handle.h"
#include "query.h"
#include "math/math.h"
#include "io.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SAMPLE_EVERY 8  /* one query vector in this many, on average */
#define QUEUE 64        /* waiting samples at most */
#define WINDOW 500      /* the estimate rests on the latest this many */
#define SAMPLE_K_MAX 1000
#define DUTY 20         /* one CPU-second of exact runs in DUTY seconds */
#define ALERT_MIN 50    /* samples before an alert */

typedef struct sample {
	float *q;          /* dim floats (the query as given) */
	float *d;          /* the served results' distances */
	uint32_t dim, k, n;
	uint64_t snapshot;
} sample;

struct vf_sampler {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	int started, stop;
	int waiting;           /* the thread waits for samples (not pausing) */
	uint64_t rng;          /* with mu held */
	_Atomic uint64_t ticket; /* which served queries are sampled */
	sample queue[QUEUE];
	uint32_t nqueue;
	float window[WINDOW];  /* recall of each sample, a ring */
	uint32_t wk[WINDOW];   /* its number of results wanted */
	uint64_t samples;      /* taken into the window, ever */
	uint64_t dropped;      /* snapshot gone before the exact run */
	int alerted;
};

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Is the served query of this ticket left out (SAMPLE_EVERY - 1 in
 * SAMPLE_EVERY are)? */
static int sampled_not(uint64_t ticket)
{
	return mix(ticket * 0x9e3779b97f4a7c15ULL) % SAMPLE_EVERY != 0;
}

static uint64_t next_rand(vf_sampler *s)
{
	return mix(s->rng += 0x9e3779b97f4a7c15ULL);
}

static void sample_free(sample *e)
{
	free(e->q);
	free(e->d);
	memset(e, 0, sizeof *e);
}

static double thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wilson score interval of a mean p over n, at 95%. */
static void wilson(double p, double n, double *lo, double *hi)
{
	double z = 1.96, z2 = z * z, den = 1 + z2 / n;
	double c = (p + z2 / (2 * n)) / den;
	double h = z * sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / den;
	*lo = c - h < 0 ? 0 : c - h;
	*hi = c + h > 1 ? 1 : c + h;
}

static void estimate_locked(const vf_sampler *s, double *est, uint64_t *n, double *lo,
			    double *hi)
{
	uint64_t m = s->samples < WINDOW ? s->samples : WINDOW;
	double sum = 0, ss = 0, results = 0;
	for (uint64_t i = 0; i < m; i++) {
		sum += s->window[i];
		results += s->wk[i];
	}
	*n = m;
	*est = m ? sum / (double)m : -1;
	if (!m) {
		*lo = *hi = -1;
		return;
	}
	for (uint64_t i = 0; i < m; i++)
		ss += (s->window[i] - *est) * (s->window[i] - *est);
	double var_mean = m > 1 ? ss / (double)(m - 1) / (double)m : 0;
	double trials = var_mean > 0 ? *est * (1 - *est) / var_mean : results;
	if (trials < (double)m)
		trials = (double)m;
	if (trials > results)
		trials = results;
	wilson(*est, trials, lo, hi);
}

/* The exact run of samples e[0..n), all on one snapshot and one dim, as
 * one batch (one pass over the records): each one's recall in rec[i]
 * and the results it should have in want[i]; 0, or -1 when the snapshot
 * is gone. */
static int run_exact(vecfs *v, const sample *e, uint32_t n, double *rec, uint32_t *want)
{
	uint32_t dim = e[0].dim, k = 0;
	float *q = vf_malloc(sizeof(float) * dim * n);
	if (!q)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(q + (size_t)i * dim, e[i].q, sizeof(float) * dim);
		if (e[i].k > k)
			k = e[i].k;
	}
	vecfs_query_opts o = {.k = k, .exact = 1, .uncounted = 1};
	vecfs_results *r = NULL;
	char err[128];
	int rc = -1;
	/* on this thread only: its CPU time below is then the whole run's */
	if (vf_search_threads(v, q, n, dim, &o, 1, &r, err, sizeof err) == 0 &&
	    r->snapshot == e[0].snapshot) {
		rc = 0;
		for (uint32_t i = 0; i < n; i++) {
			size_t w = r->count[i] < e[i].k ? r->count[i] : e[i].k;
			want[i] = w ? (uint32_t)w : 1;
			if (w == 0) {
				rec[i] = 1;
				continue;
			}
			float kth = r->hits[i][w - 1].distance;
			float tol = fabsf(kth) * 1e-6f + 1e-30f;
			uint32_t found = 0;
			for (uint32_t j = 0; j < e[i].n; j++)
				found += e[i].d[j] <= kth + tol;
			rec[i] = (double)(found < w ? found : w) / (double)w;
		}
	}
	vecfs_results_free(r);
	free(q);
	return rc;
}

static void alert(vecfs *v, vf_sampler *s)
{
	double est, lo, hi;
	uint64_t n;
	vecfs_config c;
	pthread_mutex_unlock(&s->mu); /* (as above: not while reading the store) */
	int rc = vecfs_config_get(v, &c);
	pthread_mutex_lock(&s->mu);
	estimate_locked(s, &est, &n, &lo, &hi);
	if (n < ALERT_MIN || rc)
		return;
	if (hi < c.recall_target && !s->alerted) {
		s->alerted = 1;
		char msg[256];
		snprintf(msg, sizeof msg,
			 "recall %.3f [%.3f, %.3f] over the last %llu sampled queries is below "
			 "recall_target %g",
			 est, lo, hi, (unsigned long long)n,
			 (double)c.recall_target);
		pthread_mutex_unlock(&s->mu);
		if (v->notice_fn)
			v->notice_fn(v->notice_arg, msg);
		pthread_mutex_lock(&s->mu);
	} else if (est >= c.recall_target) {
		s->alerted = 0;
	}
}

static void *sampler_run(void *arg)
{
	vecfs *v = arg;
	vf_sampler *s = v->sampler;
	struct sched_param sp = {0};
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		if (s->nqueue == 0) {
			s->waiting = 1;
			pthread_cond_wait(&s->cv, &s->mu);
			s->waiting = 0;
			continue;
		}
		/* the queued samples of the current snapshot (the others are
		 * dropped: no exact answer for them any more), of the first
		 * one's dim, as one batch (the store is read without the
		 * sampler's lock held: a search holds the store, then it) */
		pthread_mutex_unlock(&s->mu);
		uint64_t snap = vecfs_snapshot(v);
		pthread_mutex_lock(&s->mu);
		sample batch[QUEUE];
		uint32_t nb = 0;
		for (uint32_t i = 0; i < s->nqueue;) {
			if (s->queue[i].snapshot != snap) {
				sample_free(&s->queue[i]);
				s->queue[i] = s->queue[--s->nqueue];
				s->dropped++;
			} else if (nb == 0 || s->queue[i].dim == batch[0].dim) {
				batch[nb++] = s->queue[i];
				s->queue[i] = s->queue[--s->nqueue];
			} else {
				i++;
			}
		}
		pthread_mutex_unlock(&s->mu);
		double t0 = thread_cpu(), rec[QUEUE];
		uint32_t want[QUEUE];
		int rc = nb ? run_exact(v, batch, nb, rec, want) : -1;
		double t = thread_cpu() - t0;
		for (uint32_t i = 0; i < nb; i++)
			sample_free(&batch[i]);
		pthread_mutex_lock(&s->mu);
		if (rc) {
			s->dropped += nb;
		} else {
			for (uint32_t i = 0; i < nb; i++) {
				s->wk[s->samples % WINDOW] = want[i];
				s->window[s->samples++ % WINDOW] = (float)rec[i];
			}
			alert(v, s);
		}
		/* at most 1/DUTY of one CPU */
		if (t > 0 && !s->stop) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			double pause = t * (DUTY - 1);
			until.tv_sec += (time_t)pause;
			until.tv_nsec += (long)((pause - floor(pause)) * 1e9);
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT)
				;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int vf_sampler_init(vecfs *v)
{
	vf_sampler *s = vf_calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->rng = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)s;
	s->ticket = s->rng;
	v->sampler = s;
	v->on_search = vf_sampler_offer;
	return 0;
}

void vf_sampler_fini(vecfs *v)
{
	vf_sampler *s = v->sampler;
	v->on_search = NULL;
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (s->started)
		pthread_join(s->thread, NULL);
	for (uint32_t i = 0; i < s->nqueue; i++)
		sample_free(&s->queue[i]);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	v->sampler = NULL;
}

void vf_sampler_offer(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		      const vecfs_results *r)
{
	vf_sampler *s = v->sampler;
	/* an exact run reads every record: of a store larger than the memory
	 * it may hold, that would push the pages searches read out of the
	 * page cache at each batch, so such a store is not sampled */
	if (!s || r->generation == 0 || r->explain.k > SAMPLE_K_MAX ||
	    vf_store_exceeds_memory(v->store))
		return;
	/* which query vectors are sampled, decided without the lock: most
	 * calls take none and return here, with no lock and no wake-up */
	uint64_t t0 = atomic_fetch_add_explicit(&s->ticket, nq, memory_order_relaxed);
	size_t first = 0;
	while (first < nq && sampled_not(t0 + first))
		first++;
	if (first == nq)
		return;
	pthread_mutex_lock(&s->mu);
	for (size_t i = first; i < nq && !s->stop; i++) {
		if (sampled_not(t0 + i))
			continue;
		sample e = {vf_malloc(sizeof(float) * dim),
			    vf_malloc(sizeof(float) * (r->count[i] ? r->count[i] : 1)), dim,
			    r->explain.k, (uint32_t)r->count[i], r->snapshot};
		if (!e.q || !e.d) {
			sample_free(&e);
			break;
		}
		memcpy(e.q, queries + i * dim, sizeof(float) * dim);
		for (size_t h = 0; h < r->count[i]; h++)
			e.d[h] = r->hits[i][h].distance;
		if (s->nqueue < QUEUE) {
			s->queue[s->nqueue++] = e;
		} else {
			uint32_t j = (uint32_t)(next_rand(s) % QUEUE);
			sample_free(&s->queue[j]);
			s->queue[j] = e;
		}
	}
	if (s->nqueue && !s->started && !s->stop) {
		if (vf_thread_start(&s->thread, sampler_run, v) == 0)
			s->started = 1;
	}
	/* a thread pausing between batches is not woken: it looks at the
	 * queue when its pause ends */
	if (s->waiting)
		pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void vf_sampler_stats(vecfs *v, vecfs_stats *st)
{
	vf_sampler *s = v->sampler;
	st->recall_estimate = st->recall_low = st->recall_high = -1;
	st->recall_samples = 0;
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	estimate_locked(s, &st->recall_estimate, &st->recall_samples, &st->recall_low,
			&st->recall_high);
	pthread_mutex_unlock(&s->mu);
}
