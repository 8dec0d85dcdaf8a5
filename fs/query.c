/*
 * fs/query.c - query sessions (query/ID/): `in` collects option lines and
 * query vectors (text, or binary fvecs rows); closing it runs the search
 * and replaces the session's out, out.json and stats.
 */
#include "query.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "ahead.h"
#include "daemon.h"
#include "errors.h"
#include "fuse_compat.h"
#include "held.h"
#include "sbuf.h"

#define IN_MAX ((size_t)256 << 20)

struct qsession {
	pthread_mutex_t mu;
	fs_daemon *dm;
	vecfs *v;      /* the store queried (dm's) */
	qbudget *budget; /* dm's */
	char id[72];
	sbuf in;
	int dirty;
	/* write-time checks of text input: lines checked so far */
	size_t checked;
	int kind;      /* 0 unknown, 1 text, 2 binary */
	int bad;       /* a line failed its check, or a write was refused: the
			* next close fails */
	int ended;     /* the session was removed (rmdir): no more input */
	vecfs_query_input acc; /* text: options and vectors of the lines checked */
	/* the last query's results: out is rendered when the query runs (it is
	 * written where readers read it, see fs_push_out() in out_cache.c), out.json
	 * and stats when first read */
	vecfs_results *r;
	int exact;     /* how the last query ran */
	int filtered;  /* with a filter */
	uint32_t dim;
	double secs;
	char *res[3];  /* NULL: not rendered yet; each counts in dm's
			* query_output */
	size_t reslen[3];
	size_t results_held; /* of dm's query_results: vectors x k of r */
	/* for searching ahead (ahead.c): the session, the version of its input
	 * (changed by every write and reset) */
	uint64_t serial, ver;
};

qsession *fs_qs_new(fs_daemon *dm, const char *id)
{
	qsession *q = calloc(1, sizeof *q);
	if (!q)
		return NULL;
	q->dm = dm;
	q->v = dm->store;
	q->budget = &dm->query_input;
	q->serial = atomic_fetch_add(&dm->query_serial, 1) + 1;
	pthread_mutex_init(&q->mu, NULL);
	snprintf(q->id, sizeof q->id, "%s", id);
	return q;
}

static void reset_input(qsession *q);

static void budget_give(qbudget *b, size_t n);

static void clear_results(qsession *q)
{
	for (int i = 0; i < 3; i++) {
		if (q->res[i])
			budget_give(&q->dm->query_output, q->reslen[i]);
		free(q->res[i]);
		q->res[i] = NULL;
		q->reslen[i] = 0;
	}
	vecfs_results_free(q->r);
	q->r = NULL;
	budget_give(&q->dm->query_results, q->results_held);
	q->results_held = 0;
}

void fs_qs_free(qsession *q)
{
	if (!q)
		return;
	clear_results(q);
	reset_input(q);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

/* Count n more bytes of input against the budget: 0, or -ENOSPC. */
static int budget_take(qbudget *b, size_t n)
{
	int rc = 0;
	pthread_mutex_lock(&b->mu);
	if (b->used + n > b->max)
		rc = -ENOSPC;
	else
		b->used += n;
	pthread_mutex_unlock(&b->mu);
	return rc;
}

static void budget_give(qbudget *b, size_t n)
{
	pthread_mutex_lock(&b->mu);
	b->used -= n;
	pthread_mutex_unlock(&b->mu);
}

static void reset_input(qsession *q)
{
	q->ver++;
	budget_give(q->budget, q->in.len);
	fs_sb_free(&q->in);
	q->checked = 0;
	q->kind = 0;
	q->bad = 0;
	vecfs_query_input_free(&q->acc);
}

void fs_qs_in_truncate(qsession *q)
{
	pthread_mutex_lock(&q->mu);
	reset_input(q);
	pthread_mutex_unlock(&q->mu);
}

/* Forget input and results; `ended`: and take no more input. */
static void forget(qsession *q, int ended)
{
	pthread_mutex_lock(&q->mu);
	q->ended |= ended;
	reset_input(q);
	q->dirty = 0;
	clear_results(q);
	pthread_mutex_unlock(&q->mu);
}

void fs_qs_end(qsession *q)
{
	forget(q, 1);
}

void fs_qs_clear(qsession *q)
{
	forget(q, 0);
}

static int check_lines(qsession *q);

static void search_ahead(qsession *q);

/* q->mu: a synchronous write of in, which makes no standby worker (the
 * session loop, loop.c), asks for one when the session is busy, another
 * query of it maybe running long. */
static void lock_session(qsession *q)
{
	if (pthread_mutex_trylock(&q->mu) != 0) {
		fs_fc_request_long(q->dm->fuse);
		pthread_mutex_lock(&q->mu);
	}
}

static int in_write(qsession *q, const char *buf, size_t len, uint64_t off, int go_ahead)
{
	int rc = 0;
	lock_session(q);
	/* a write at offset 0 starts the input over: a descriptor held open
	 * for a loop of queries pwrite()s each one there (also after a refused
	 * first write, which left nothing but `bad`) */
	if (off == 0 && (q->in.len || q->bad))
		reset_input(q);
	int first = q->in.len == 0 && !q->bad; /* the input's first write */
	q->ver++;
	if (q->ended) {
		fs_errlog(&q->dm->errors, "query/%s/in: the session was removed (rmdir)", q->id);
		rc = -ENOENT;
	} else if (q->bad) {
		rc = -EINVAL;
	} else if (q->in.len + len > IN_MAX) {
		fs_errlog(&q->dm->errors, "query/%s/in: more than %zu MiB of query input", q->id, IN_MAX >> 20);
		rc = -EFBIG;
	} else if (budget_take(q->budget, len)) {
		fs_errlog(&q->dm->errors, "query/%s/in: the query input of all sessions together is at its "
		       "bound (%zu MiB, -o query_input_mb); remove other sessions or "
		       "truncate their in", q->id, q->budget->max >> 20);
		rc = -ENOSPC;
	} else {
		fs_sb_add(&q->in, buf, len);
		if (q->in.oom) {
			budget_give(q->budget, len); /* not added */
			reset_input(q);
			fs_errlog_err(&q->dm->errors, -ENOMEM, "query/%s/in: out of memory", q->id);
			rc = -ENOMEM;
		}
		q->dirty = 1;
		if (rc == 0)
			rc = check_lines(q);
		if (rc == 0 && first && !q->bad && go_ahead)
			search_ahead(q);
	}
	if (rc == -EFBIG || rc == -ENOSPC || rc == -ENOMEM) {
		/* part of the input is missing: its close must not run the rest */
		q->bad = 1;
		q->dirty = 1;
	}
	pthread_mutex_unlock(&q->mu);
	return rc;
}

int fs_qs_in_write(qsession *q, const char *buf, size_t len, uint64_t off)
{
	return in_write(q, buf, len, off, 1);
}

int fs_qs_in_write_run(qsession *q, const char *buf, size_t len, int *ran)
{
	*ran = 0;
	/* searched here, on the worker: nothing is left to overlap with it
	 * (see "One round trip a query" in DESIGN.md) */
	int rc = in_write(q, buf, len, 0, 0);
	if (rc == -ENOENT)
		return rc; /* the session was removed: nothing to run */
	/* as the close would: a refused input clears the results it replaced,
	 * and the write's own errno is the one returned */
	int frc = fs_qs_in_flush(q, ran);
	return rc ? rc : frc;
}

/* ---------------------------------------------------------------- parsing in */


static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Before text is added to qi: the store's dimension, which its first
 * vector must have (0: none yet), asked of the store only while qi holds
 * no vector. */
static void want_store_dim(const qsession *q, vecfs_query_input *qi)
{
	vecfs_config c;
	if (!qi->nq)
		qi->want_dim = vecfs_config_get(q->v, &c) == 0 ? c.dim : 0;
}

/* Text a CPU parses at least when the lines a write completes are parsed
 * in pieces at once (a batch of 1,000 sift-128 queries is 331 KB of
 * text, 1.2 ms to parse on one CPU), and the most pieces. */
#define SPLIT_MIN ((size_t)64 << 10)
#define SPLIT_MAX 8

typedef struct piece {
	const char *s;
	size_t n;
	vecfs_query_input *into; /* the first: the session's; the others: qi */
	vecfs_query_input qi;    /* from zero */
	int rc;
	char why[300];
} piece;

static void parse_piece(void *arg)
{
	piece *p = arg;
	p->rc = vecfs_query_input_text(p->into, p->s, p->n, p->why, sizeof p->why);
}

/* vecfs_query_input_text(qi, s, n, ...), the same outcome, with long text
 * cut at newlines into pieces parsed at once on the library's threads
 * (vecfs_parallel(): the first on this worker, into qi) and joined in
 * order (vecfs_query_input_append()).  From the first piece that fails or
 * cannot be joined (an option line in it) on, the text is parsed again in
 * order, so that an error names the line it would have. */
static int parse_text(vecfs *v, vecfs_query_input *qi, const char *s, size_t n, char *why,
		      size_t wl)
{
	size_t want = n / SPLIT_MIN, cpus = (size_t)vecfs_cpus(v);
	want = want < cpus ? want : cpus;
	want = want < SPLIT_MAX ? want : SPLIT_MAX;
	if (want < 2)
		return vecfs_query_input_text(qi, s, n, why, wl);
	piece p[SPLIT_MAX];
	size_t np = 0, from = 0;
	while (from < n) {
		size_t to = n;
		if (np + 1 < want) {
			size_t aim = (np + 1) * (n / want);
			aim = aim > from ? aim : from;
			const char *nl = memchr(s + aim, '\n', n - aim);
			to = nl ? (size_t)(nl - s) + 1 : n;
		}
		p[np] = (piece){.s = s + from, .n = to - from};
		p[np].into = np ? &p[np].qi : qi;
		np++;
		from = to;
	}
	vecfs_parallel(v, parse_piece, p, sizeof p[0], (int)np);
	int rc = p[0].rc;
	if (rc)
		snprintf(why, wl, "%s", p[0].why);
	for (size_t i = 1; i < np && rc == 0; i++) {
		int j = p[i].rc == 0 ? vecfs_query_input_append(qi, &p[i].qi) : 0;
		if (j < 0) {
			snprintf(why, wl, "out of memory");
			rc = -ENOMEM;
		} else if (j == 0) {
			rc = vecfs_query_input_text(qi, p[i].s, (size_t)(s + n - p[i].s), why, wl);
			break;
		}
	}
	for (size_t i = 1; i < np; i++)
		vecfs_query_input_free(&p[i].qi);
	return rc;
}

/* Parse the text lines completed since the last write into q->acc, so that
 * a bad line fails the write() that completes it (a shell's builtin echo
 * reports write errors, not close errors) and close() parses only what
 * follows the last newline.  Binary fvecs input is parsed at close. */
static int check_lines(qsession *q)
{
	char why[300] = "";
	if (q->kind == 0 && q->in.len >= 4) {
		const unsigned char *p = (const unsigned char *)q->in.p;
		uint32_t d = le32(p);
		q->kind = d >= 1 && d <= VECFS_DIM_MAX ? 2 : 1;
	}
	if (q->kind != 1)
		return 0;
	const char *s = q->in.p + q->checked;
	const char *nl = memrchr(s, '\n', q->in.len - q->checked);
	if (!nl)
		return 0;
	size_t n = (size_t)(nl - s) + 1;
	q->checked += n;
	want_store_dim(q, &q->acc);
	int rc = parse_text(q->v, &q->acc, s, n, why, sizeof why);
	if (rc) {
		q->bad = 1;
		fs_errlog(&q->dm->errors, "query/%s/in: line %u: %s", q->id, q->acc.lines, why);
	}
	return rc;
}

/* ---------------------------------------------------------------- results */

/* One line a hit, KEY<TAB>DISTANCE; an empty line between queries.  The
 * renderers stop once more than `room` bytes are out.  A query's lines
 * are written in place, in room reserved for all of them (a batch of
 * 1,000 queries prints 10,000 lines: appended piece by piece they took
 * 0.7 ms of its 11). */
static void render_out(sbuf *out, const vecfs_results *r, size_t room)
{
	for (size_t i = 0; i < r->nq && out->len <= room; i++) {
		/* each line at most: its key, a tab, the room
		 * vecfs_format_float() wants (32 bytes) and a newline */
		size_t need = 1;
		for (size_t j = 0; j < r->count[i]; j++)
			need += r->hits[i][j].keylen + 34;
		if (fs_sb_reserve(out, need))
			return;
		char *p = out->p + out->len;
		if (i)
			*p++ = '\n';
		for (size_t j = 0; j < r->count[i] && (size_t)(p - out->p) <= room; j++) {
			const vecfs_hit *h = &r->hits[i][j];
			if (h->keylen)
				memcpy(p, h->key, h->keylen);
			p += h->keylen;
			*p++ = '\t';
			p += vecfs_format_float(p, 32, h->distance);
			*p++ = '\n';
		}
		out->len = (size_t)(p - out->p);
		out->p[out->len] = 0;
	}
}

static void render_json(sbuf *js, const vecfs_results *r, size_t room)
{
	char num[40];
	if (r->generation)
		fs_sb_printf(js, "{\"generation\": %llu, \"results\": [", (unsigned long long)r->generation);
	else
		fs_sb_adds(js, "{\"generation\": null, \"results\": [");
	for (size_t i = 0; i < r->nq && js->len <= room; i++) {
		fs_sb_adds(js, i ? ", [" : "[");
		for (size_t j = 0; j < r->count[i] && js->len <= room; j++) {
			const vecfs_hit *h = &r->hits[i][j];
			/* JSON has no infinity: a distance that overflowed float32
			 * is 1e999, which JSON readers take for one */
			int nn = isinf(h->distance)
				 ? snprintf(num, sizeof num, "%s", h->distance > 0 ? "1e999" : "-1e999")
				 : vecfs_format_float(num, sizeof num, h->distance);
			fs_sb_adds(js, j ? ", {\"key\": " : "{\"key\": ");
			fs_sb_json_string(js, h->key, h->keylen);
			fs_sb_adds(js, ", \"distance\": ");
			fs_sb_add(js, num, (size_t)nn);
			fs_sb_adds(js, ", \"payload\": ");
			if (h->payload && h->payload_len)
				fs_sb_add(js, h->payload, h->payload_len);
			else
				fs_sb_adds(js, "null");
			fs_sb_adds(js, "}");
		}
		fs_sb_adds(js, "]");
	}
	fs_sb_adds(js, "]}\n");
}

static void render_session_stats(sbuf *st, const qsession *q)
{
	const vecfs_results *r = q->r;
	const vecfs_explain *e = &r->explain;
	if (r->generation)
		fs_sb_printf(st, "generation = %llu\n", (unsigned long long)r->generation);
	else
		fs_sb_adds(st, "generation = none\n");
	fs_sb_printf(st, "mode = %s\n", q->exact ? "exact" : "ann");
	fs_sb_printf(st, "queries = %zu\n", r->nq);
	fs_sb_printf(st, "dim = %u\n", q->dim);
	fs_sb_printf(st, "k = %u\n", e->k);
	fs_sb_printf(st, "nprobe = %u\n", e->nprobe);
	if (e->recall_target > 0)
		fs_sb_printf(st, "recall_target = %.6g\n", (double)e->recall_target);
	fs_sb_printf(st, "refine = %u\n", e->refine);
	fs_sb_printf(st, "clusters_probed = %llu\n", (unsigned long long)e->clusters_probed);
	fs_sb_printf(st, "pass1_scored = %llu\n", (unsigned long long)e->pass1_scored);
	fs_sb_printf(st, "pass1_pruned = %llu\n", (unsigned long long)e->pass1_pruned);
	fs_sb_printf(st, "pass2_scored = %llu\n", (unsigned long long)e->pass2_scored);
	fs_sb_printf(st, "pass2_pruned = %llu\n", (unsigned long long)e->pass2_pruned);
	fs_sb_printf(st, "reranked = %llu\n", (unsigned long long)e->reranked);
	fs_sb_printf(st, "delta_scanned = %llu\n", (unsigned long long)e->delta_scanned);
	fs_sb_printf(st, "unindexed_scanned = %llu\n", (unsigned long long)e->uncovered_scanned);
	fs_sb_printf(st, "stale_skipped = %llu\n", (unsigned long long)e->stale_skipped);
	fs_sb_printf(st, "pages_read = %llu\n", (unsigned long long)e->pages_read);
	if (q->filtered) {
		fs_sb_printf(st, "filter_passed = %llu\n", (unsigned long long)e->filter_passed);
		fs_sb_printf(st, "filter_tested = %llu\n", (unsigned long long)e->filter_tested);
	}
	fs_sb_printf(st, "search_us = %llu\n", (unsigned long long)e->micros);
	fs_sb_printf(st, "total_us = %llu\n", (unsigned long long)(q->secs * 1e6));
}

/* Render one of the session's files unless it is already: with q->mu held.
 * Returns 0, -ENOMEM, or -E2BIG past the room left in dm's query_output
 * (the file then reads as empty). */
static int ensure_rendered(qsession *q, int which)
{
	FS_ASSERT_HELD(&q->mu);
	if (q->res[which] || !q->r)
		return 0;
	qbudget *ob = &q->dm->query_output;
	pthread_mutex_lock(&ob->mu);
	size_t room = ob->max > ob->used ? ob->max - ob->used : 0;
	pthread_mutex_unlock(&ob->mu);
	sbuf b;
	fs_sb_init(&b);
	if (which == QS_OUT)
		render_out(&b, q->r, room);
	else if (which == QS_JSON)
		render_json(&b, q->r, room);
	else
		render_session_stats(&b, q);
	int rc = b.oom ? -ENOMEM : b.len > room || budget_take(ob, b.len) ? -E2BIG : 0;
	if (rc) {
		fs_sb_free(&b);
		return rc;
	}
	q->res[which] = fs_sb_take(&b, &q->reslen[which]);
	return 0;
}

/* Results a query asks for: its vectors times its k (or config's: cfg, or
 * NULL to read it). */
static size_t results_asked(qsession *q, const vecfs_query_input *qi, const vecfs_config *cfg,
			    uint32_t *k)
{
	vecfs_config c;
	*k = qi->opts.k;
	if (!*k && cfg)
		*k = cfg->k;
	else if (!*k && vecfs_config_get(q->v, &c) == 0)
		*k = c.k;
	return qi->nq * (size_t)*k;
}

/* Count the results qi asks for against dm's query_results: 0, or
 * -E2BIG with the reason in why. */
static int results_reserve(qsession *q, const vecfs_query_input *qi, const vecfs_config *cfg,
			   size_t *held, char *why, size_t wl)
{
	qbudget *rb = &q->dm->query_results;
	uint32_t k;
	size_t want = results_asked(q, qi, cfg, &k);
	if (want > rb->max) {
		snprintf(why, wl, "%zu query vectors x k=%u = %zu results, more than the bound of %zu "
			 "(-o query_results): ask for fewer vectors or a smaller k", qi->nq, k, want, rb->max);
		return -E2BIG;
	}
	if (budget_take(rb, want)) {
		snprintf(why, wl, "the results of all sessions together are at their bound of %zu "
			 "(-o query_results): remove other sessions, or ask for fewer", rb->max);
		return -E2BIG;
	}
	*held = want;
	return 0;
}

/* The same for the input of q's in (q->mu held, q's own results cleared). */
static int results_take(qsession *q, const vecfs_query_input *qi, size_t *held, char *why, size_t wl)
{
	FS_ASSERT_HELD(&q->mu);
	return results_reserve(q, qi, NULL, held, why, wl);
}

/* Text input at close: the lines check_lines() parsed, and the last line
 * if no newline ended it, as a query input of its own. */
static int text_tail(qsession *q, vecfs_query_input *qi, unsigned *line, char *why, size_t wl)
{
	if (vecfs_query_input_copy(qi, &q->acc)) {
		snprintf(why, wl, "out of memory");
		return -ENOMEM;
	}
	if (q->checked >= q->in.len)
		return 0;
	want_store_dim(q, qi);
	int rc = vecfs_query_input_text(qi, q->in.p + q->checked, q->in.len - q->checked, why, wl);
	*line = rc ? qi->lines : 0;
	return rc;
}

/* Most query vectors an input searched ahead may hold: a longer one is a
 * batch, whose first write may end at a line by chance. */
#define AHEAD_MAX_QUERIES 64

/* With q->mu held, after the first write of an input: when that write
 * made it complete (text whose every line is checked, or whole fvecs
 * rows), its search starts now (ahead.c); the close takes the results if
 * they still hold.  Inputs written in several writes are searched at the
 * close only: a search a write would repeat for ever more of the input. */
static void search_ahead(qsession *q)
{
	FS_ASSERT_HELD(&q->mu);
	vecfs_query_input qi;
	memset(&qi, 0, sizeof qi);
	if (q->kind == 1) {
		unsigned line;
		char why[8];
		/* every line checked: text_tail() only copies what they gave */
		if (q->checked != q->in.len || q->acc.nq == 0 || q->acc.nq > AHEAD_MAX_QUERIES ||
		    text_tail(q, &qi, &line, why, sizeof why)) {
			vecfs_query_input_free(&qi);
			return;
		}
	} else if (vecfs_query_input_fvecs(&qi, q->in.p, q->in.len) != 1 ||
		   qi.nq > AHEAD_MAX_QUERIES) {
		vecfs_query_input_free(&qi);
		return;
	}
	if ((qi.opts.k && qi.nq * (size_t)qi.opts.k > q->dm->query_results.max) ||
	    qi.filter) {
		/* refused at the close; or filtered, searched at the close where
		 * the filter's text stays */
		vecfs_query_input_free(&qi);
		return;
	}
	/* the vectors are the search's from here on */
	fs_ahead_submit(q->dm->ahead, q->serial, q->ver, q->v, &qi.opts, qi.vecs, qi.nq, qi.dim);
	qi.vecs = NULL;
	vecfs_query_input_free(&qi);
}

/* One errors line for an input of q that failed with rc (what: "in", or
 * "in (call)"): the line of text it names (0: none), why (else the
 * errno's text), and for EIO how to find and remove the damage. */
static void log_input_failure(const qsession *q, const char *what, int rc, unsigned line,
			      const char *why)
{
	const char *text = why[0] ? why : strerror(-rc);
	if (line)
		fs_errlog_err(&q->dm->errors, rc, "query/%s/%s: line %u: %s", q->id, what, line, text);
	else
		fs_errlog_err(&q->dm->errors, rc, "query/%s/%s: %s%s", q->id, what, text,
			      rc == -EIO ? " (echo verify > ctl names it; echo salvage > ctl removes it)"
					 : "");
}

/* One query through the index answers in microseconds: a standby worker
 * would cost more than another client could wait for it (the session
 * loop, loop.c); a batch, a filter or an exact scan may not, nor a query
 * of a store with no active generation (scanned exactly). */
static int may_run_long(const qsession *q, const vecfs_query_input *qi)
{
	return qi->nq > 1 || qi->opts.exact || qi->opts.filter || !vecfs_active(q->v);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int fs_qs_in_flush(qsession *q, int *ran)
{
	vecfs_query_input qi;
	char why[300] = "";
	unsigned line = 0;
	int rc;
	lock_session(q);
	*ran = q->dirty;
	if (!q->dirty) {
		pthread_mutex_unlock(&q->mu);
		return 0;
	}
	q->dirty = 0;
	if (q->bad) {
		/* the reason went to errors when the write failed */
		clear_results(q);
		pthread_mutex_unlock(&q->mu);
		return -EINVAL;
	}
	double t0 = now_s();
	memset(&qi, 0, sizeof qi);
	if (q->kind == 1) {
		rc = text_tail(q, &qi, &line, why, sizeof why);
	} else {
		want_store_dim(q, &qi);
		rc = vecfs_query_input_parse(&qi, q->in.p, q->in.len, &line, why, sizeof why);
	}
	if (rc == 0 && qi.nq == 0) {
		snprintf(why, sizeof why, q->in.len ? "no query vector" : "no query vector (empty)");
		rc = -EINVAL;
	}
	size_t held = 0;
	if (rc == 0) {
		clear_results(q); /* replaced either way: their room counts no more */
		rc = results_take(q, &qi, &held, why, sizeof why);
	}
	if (rc) {
		clear_results(q);
		log_input_failure(q, "in", rc, line, why);
		vecfs_query_input_free(&qi);
		pthread_mutex_unlock(&q->mu);
		return rc;
	}
	/* searched ahead at the write, if that still holds */
	vecfs_results *r = fs_ahead_take(q->dm->ahead, q->serial, q->ver, q->v);
	if (!r && may_run_long(q, &qi))
		fs_fc_request_long(q->dm->fuse);
	if (!r)
		rc = vecfs_search(q->v, qi.vecs, qi.nq, qi.dim, &qi.opts, &r, why, sizeof why);
	clear_results(q);
	if (rc) {
		budget_give(&q->dm->query_results, held);
		log_input_failure(q, "in", rc, vecfs_query_input_line_of(&qi, why), why);
	} else {
		q->r = r;
		q->results_held = held;
		q->exact = qi.opts.exact;
		q->filtered = qi.opts.filter != NULL;
		q->dim = qi.dim;
		q->secs = now_s() - t0;
		rc = ensure_rendered(q, QS_OUT);
		if (rc) {
			clear_results(q);
			if (rc == -E2BIG)
				fs_errlog(&q->dm->errors, "query/%s/in: the results' text is past the room left for "
				       "rendered results (%zu MiB for all sessions, -o query_output_mb)",
				       q->id, q->dm->query_output.max >> 20);
			else
				fs_errlog_err(&q->dm->errors, rc, "query/%s/in: out of memory formatting the results", q->id);
		}
	}
	vecfs_query_input_free(&qi);
	pthread_mutex_unlock(&q->mu);
	return rc;
}

int fs_qs_in_flush_empty(qsession *q, int *ran)
{
	pthread_mutex_lock(&q->mu);
	if (q->in.len == 0 && !q->ended)
		q->dirty = 1;
	pthread_mutex_unlock(&q->mu);
	return fs_qs_in_flush(q, ran);
}

int fs_qs_call(qsession *q, const char *in, size_t len, sbuf *out, size_t room)
{
	vecfs_query_input qi;
	vecfs_results *r = NULL;
	char why[300] = "";
	unsigned line = 0;
	size_t held = 0;
	lock_session(q); /* (a query of the session's in may hold it long) */
	int ended = q->ended;
	pthread_mutex_unlock(&q->mu);
	if (ended) {
		fs_errlog(&q->dm->errors, "query/%s/in: the session was removed (rmdir)", q->id);
		return -ENOENT;
	}
	/* the config read once: the dimension the input must have, the k
	 * its results count with when it sets none */
	vecfs_config c;
	int have = vecfs_config_get(q->v, &c) == 0;
	memset(&qi, 0, sizeof qi);
	qi.want_dim = have ? c.dim : 0;
	int rc = vecfs_query_input_parse(&qi, in, len, &line, why, sizeof why);
	if (rc == 0)
		rc = results_reserve(q, &qi, have ? &c : NULL, &held, why, sizeof why);
	if (rc == 0) {
		if (may_run_long(q, &qi))
			fs_fc_request_long(q->dm->fuse);
		rc = vecfs_search(q->v, qi.vecs, qi.nq, qi.dim, &qi.opts, &r, why, sizeof why);
		if (rc && !line)
			line = vecfs_query_input_line_of(&qi, why);
	}
	if (rc == 0) {
		/* room for all of it at once (render_out() stops past room) */
		if (fs_sb_reserve(out, room + 128) == 0)
			render_out(out, r, room);
		if (out->oom) {
			rc = -ENOMEM;
			snprintf(why, sizeof why, "out of memory formatting the results");
		} else if (out->len > room) {
			rc = -ERANGE; /* the caller's to size: no errors line (as getxattr's) */
		}
	}
	if (rc && rc != -ERANGE)
		log_input_failure(q, "in (call)", rc, line, why);
	vecfs_results_free(r);
	budget_give(&q->dm->query_results, held);
	vecfs_query_input_free(&qi);
	return rc;
}

int fs_qs_render_into(qsession *q, int which, sbuf *b)
{
	static const char *const names[] = {"out", "out.json", "stats"};
	pthread_mutex_lock(&q->mu);
	int rc = ensure_rendered(q, which);
	if (rc == 0 && q->reslen[which])
		fs_sb_add(b, q->res[which], q->reslen[which]);
	if (rc == -E2BIG)
		fs_errlog(&q->dm->errors, "query/%s/%s: past the room left for rendered results (%zu MiB "
		       "for all sessions, -o query_output_mb): remove other sessions", q->id,
		       names[which], q->dm->query_output.max >> 20);
	pthread_mutex_unlock(&q->mu);
	return rc ? rc : b->oom ? -ENOMEM : 0;
}

char *fs_qs_render(qsession *q, int which, size_t *len)
{
	sbuf b;
	fs_sb_init(&b);
	if (fs_qs_render_into(q, which, &b)) {
		fs_sb_free(&b);
		return NULL;
	}
	return fs_sb_take(&b, len);
}

int fs_qs_in_render(qsession *q, sbuf *b)
{
	pthread_mutex_lock(&q->mu);
	fs_sb_add(b, q->in.p ? q->in.p : "", q->in.len);
	pthread_mutex_unlock(&q->mu);
	return b->oom ? -ENOMEM : 0;
}

size_t fs_qs_in_size(qsession *q)
{
	pthread_mutex_lock(&q->mu);
	size_t n = q->in.len;
	pthread_mutex_unlock(&q->mu);
	return n;
}

size_t fs_qs_size(qsession *q, int which)
{
	pthread_mutex_lock(&q->mu);
	ensure_rendered(q, which);
	size_t n = q->reslen[which];
	pthread_mutex_unlock(&q->mu);
	return n;
}

/* The device (MAJ:MIN) of mount `mnt_id` in /proc/PID/mountinfo: 0 when
 * found. */
static int mount_id_dev(pid_t pid, unsigned long mnt_id, char *dev, size_t len)
{
	char path[64], line[8192];
	snprintf(path, sizeof path, "/proc/%d/mountinfo", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int found = -1;
	while (found && fgets(line, sizeof line, f)) {
		unsigned long id;
		char d[32];
		if (sscanf(line, "%lu %*s %31s", &id, d) == 2 && id == mnt_id) {
			snprintf(dev, len, "%s", d);
			found = 0;
		}
	}
	fclose(f);
	return found;
}

int fs_proc_holds_file(pid_t pid, const char *dev, uint64_t ino)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/proc/%d/fdinfo", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int held = 0;
	struct dirent *e;
	while (!held && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		char info[512];
		ssize_t l = read(fd, info, sizeof info - 1);
		close(fd);
		if (l <= 0)
			continue;
		info[l] = 0;
		const char *m = strstr(info, "\nmnt_id:"), *i = strstr(info, "\nino:");
		if (!m || !i || strtoull(i + 5, NULL, 10) != ino)
			continue;
		char fdev[32];
		held = !dev[0] ||
		       (mount_id_dev(pid, strtoul(m + 8, NULL, 10), fdev, sizeof fdev) == 0 &&
			!strcmp(fdev, dev));
	}
	closedir(d);
	return held;
}
