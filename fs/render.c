/*
 * fs/render.c - what the readable files of the tree read (README, config
 * and stats here; each kind's render function in kinds.c), and the
 * renderings open handles share.
 */
#include "render.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#include "ahead.h"
#include "control.h"
#include "daemon.h"
#include "errors.h"
#include "fuse_compat.h"
#include "generations.h"
#include "inode.h"

/* ---------------------------------------------------------------- README */

void fs_render_readme(sbuf *b)
{
	fs_sb_adds(b,
		"vecfs " VECFS_VERSION " - a vector-search index used through plain files.\n"
		"\n"
		"  ingest/          create NAME.csv|.tsv|.txt|.jsonl|.ndjson|.fvecs|.bvecs|.npy here,\n"
		"                   write it, close it: every row is committed at once, or none\n"
		"  records/KEY      one stored vector as text; `rm records/KEY` deletes it\n"
		"  query/ID/        `mkdir query/ID`, write vectors (and a line like\n"
		"                   `k=10 recall=0.95 mode=ann|exact`) to in, close it,\n"
		"                   read out (KEY<TAB>DISTANCE), out.json or stats\n"
		"  generations/     index generations; `ln -sfn GEN generations/active` flips\n"
		"  ctl              write a command: build, build stage, compact, rebalance,\n"
		"                   verify, salvage; read it for how each one last ran\n"
		"  config           settings as `key = value` lines; write lines to change them\n"
		"  stats            counters as `key = value` lines\n"
		"  errors           error messages, oldest first, each after its UTC time;\n"
		"                   lines are appended (`tail -f errors`)\n"
		"  delete           write keys (a line each) and/or `filter=JSON`: all deleted at\n"
		"                   the close, at once\n"
		"  export.jsonl     every record as a .jsonl ingest line, from one snapshot\n"
		"  backup           read it for a consistent copy of the store (save as data.mdb)\n");
}

/* ---------------------------------------------------------------- config */

int fs_render_config(vecfs *v, sbuf *b)
{
	vecfs_config c;
	int rc = vecfs_config_get(v, &c);
	if (rc)
		return rc;
	size_t n;
	const vecfs_setting *rows = vecfs_settings(&n);
	for (size_t i = 0; i < n; i++) {
		char value[32];
		vecfs_setting_format(&rows[i], &c, value, sizeof value);
		fs_sb_printf(b, "%s = %s\n", rows[i].name, value);
	}
	return b->oom ? -ENOMEM : 0;
}

/* ---------------------------------------------------------------- stats */

int fs_render_stats(vecfs *v, sbuf *b)
{
	vecfs_stats s;
	int rc = vecfs_stats_get(v, &s);
	if (rc)
		return rc;
	fs_sb_printf(b, "dim = %u\n", s.dim);
	fs_sb_printf(b, "metric = %s\n", vecfs_metric_name(s.metric));
	fs_sb_printf(b, "records = %llu\n", (unsigned long long)s.records);
	fs_sb_printf(b, "deleted = %llu\n", (unsigned long long)s.deleted);
	fs_sb_printf(b, "generations = %llu\n", (unsigned long long)s.generations);
	if (s.active)
		fs_sb_printf(b, "active = %llu\n", (unsigned long long)s.active);
	else
		fs_sb_adds(b, "active = none\n");
	fs_sb_printf(b, "unindexed = %llu\n", (unsigned long long)s.unindexed);
	fs_sb_printf(b, "delta_postings = %llu\n", (unsigned long long)s.delta_postings);
	fs_sb_printf(b, "store_bytes = %llu\n", (unsigned long long)s.store_bytes);
	fs_sb_printf(b, "ingest_rows = %llu\n", (unsigned long long)s.ingest_rows);
	fs_sb_printf(b, "queries = %llu\n", (unsigned long long)s.queries);
	fs_sb_printf(b, "p50_us = %llu\n", (unsigned long long)s.p50_us);
	fs_sb_printf(b, "p99_us = %llu\n", (unsigned long long)s.p99_us);
	fs_sb_printf(b, "pages_read = %llu\n", (unsigned long long)s.pages_read);
	if (s.recall_estimate < 0) {
		fs_sb_adds(b, "recall_estimate = none\n");
		fs_sb_printf(b, "recall_samples = %llu\n", (unsigned long long)s.recall_samples);
		fs_sb_adds(b, "recall_interval = none\n");
	} else {
		fs_sb_printf(b, "recall_estimate = %.4f\n", s.recall_estimate);
		fs_sb_printf(b, "recall_samples = %llu\n", (unsigned long long)s.recall_samples);
		fs_sb_printf(b, "recall_interval = %.4f %.4f\n", s.recall_low, s.recall_high);
	}
	fs_sb_printf(b, "next_key = %llu\n", (unsigned long long)s.next_key);
	fs_sb_printf(b, "compactions = %llu\n", (unsigned long long)s.compactions);
	fs_sb_printf(b, "rebalances = %llu\n", (unsigned long long)s.rebalances);
	fs_sb_printf(b, "cluster_imbalance = %.3f\n", s.cluster_imbalance);
	fs_sb_printf(b, "maintenance = %s\n", s.maintenance ? "running" : "idle");
	fs_sb_printf(b, "kernels = %s\n", vecfs_kernel_name());
	return b->oom ? -ENOMEM : 0;
}

/* The session loop's workers: gauges that reading them moves (the worker
 * answering is busy; a tool's parallel reads start more), so not in
 * `stats`, whose content changes only with what it counts. */
int fs_render_workers(fs_daemon *dm, sbuf *b)
{
	fs_loop_stats ls;
	if (!fs_fc_loop_counts(dm->fuse, &ls))
		return -ENODATA;
	fs_sb_printf(b, "workers = %u\n", ls.workers);
	fs_sb_printf(b, "workers_started = %llu\n", (unsigned long long)ls.extra_started);
	fs_sb_printf(b, "workers_listening = %u\n", ls.listening);
	fs_sb_printf(b, "workers_listening_cpus = %s\n", ls.listening_cpus);
	return b->oom ? -ENOMEM : 0;
}

/* ---------------------------------------------------------------- the tree's files */

int fs_render_node(fs_daemon *dm, node *n, sbuf *b)
{
	int (*render)(fs_daemon *, node *, sbuf *) = kind_of(n)->render;
	atomic_fetch_add_explicit(&dm->rendered, 1, memory_order_relaxed);
	return render ? render(dm, n, b) : 0;
}

/* ---------------------------------------------------------------- shared renderings */

/* The version of n's content now (its row's), or 0 when it has none
 * (rendered for each handle). */
static uint64_t content_version(fs_daemon *dm, node *n)
{
	uint64_t (*version)(fs_daemon *, node *) = kind_of(n)->version;
	return version ? version(dm, n) : 0;
}

/* The share of n's rendering of version v, with one more handle on it;
 * NULL when there is none (dm->reads.mu held). */
static rendering *shared_of(node *n, uint64_t v)
{
	rendering *r = n->shared;
	if (!v || !r || r->version != v)
		return NULL;
	r->refs++;
	return r;
}

/* The open of n past the room of dm->reads: -ENOMEM, with an errors line. */
static int room_refused(fs_daemon *dm, node *n, size_t len)
{
	char path[600];
	pthread_mutex_lock(&dm->tree.mu);
	fs_kind_path(dm, n, path, sizeof path);
	pthread_mutex_unlock(&dm->tree.mu);
	fs_errlog_err(&dm->errors, -ENOMEM,
		   "%s: cannot be read now: its %zu bytes would pass the room for the contents of "
		   "files open for reading (%zu MiB for all of them, -o read_buffer_mb); close some",
		   path, len, dm->reads.max >> 20);
	return -ENOMEM;
}

static void rendering_free(rendering *r)
{
	if (r) {
		free(r->data);
		free(r);
	}
}

int fs_rendering_get(fs_daemon *dm, node *n, rendering **out)
{
	uint64_t v = content_version(dm, n);
	pthread_mutex_lock(&dm->reads.mu);
	rendering *r = shared_of(n, v);
	size_t known = v && n->size_version == v ? (size_t)n->size : 0;
	int full = !r && known > dm->reads.max - dm->reads.used;
	pthread_mutex_unlock(&dm->reads.mu);
	if (r) {
		*out = r;
		return 0;
	}
	if (full) /* refused before it is rendered */
		return room_refused(dm, n, known);
	sbuf b;
	fs_sb_init(&b);
	int rc = fs_render_node(dm, n, &b);
	if (rc == 0)
		fs_node_seen(n, XXH3_64bits(b.p, b.len));
	if (rc == 0 && !(r = calloc(1, sizeof *r)))
		rc = -ENOMEM;
	if (rc == 0 && !(r->data = fs_sb_take(&b, &r->len)))
		rc = -ENOMEM;
	fs_sb_free(&b);
	if (rc == -EIO && n->kind == K_RECORD)
		/* stat passes over it (ls -l shows it); a read tells */
		fs_errlog_err(&dm->errors, rc, "records/%s: %s", n->name, RECORD_DAMAGED);
	if (rc) {
		rendering_free(r);
		return rc;
	}
	if (v && content_version(dm, n) != v)
		v = 0; /* changed while it was rendered: this handle's own */
	pthread_mutex_lock(&dm->reads.mu);
	rendering *same = shared_of(n, v); /* another open rendered it meanwhile */
	if (!same && r->len > dm->reads.max - dm->reads.used) {
		pthread_mutex_unlock(&dm->reads.mu);
		size_t len = r->len;
		rendering_free(r);
		return room_refused(dm, n, len);
	}
	if (!same) {
		dm->reads.used += r->len;
		r->refs = 1;
		r->version = v;
		if (v) {
			if (n->shared)
				n->shared->owner = NULL; /* an older version's, held on */
			n->shared = r;
			r->owner = n;
			n->size_version = v;
			n->size = r->len;
		}
	}
	pthread_mutex_unlock(&dm->reads.mu);
	if (same) {
		rendering_free(r);
		r = same;
	}
	*out = r;
	return 0;
}

void fs_rendering_put(fs_daemon *dm, rendering *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&dm->reads.mu);
	int last = --r->refs == 0;
	if (last) {
		dm->reads.used -= r->len;
		if (r->owner && r->owner->shared == r)
			r->owner->shared = NULL;
	}
	pthread_mutex_unlock(&dm->reads.mu);
	if (last)
		rendering_free(r);
}

int fs_render_size(fs_daemon *dm, node *n, uint64_t *size)
{
	uint64_t v = content_version(dm, n);
	int known = 0;
	if (v) {
		pthread_mutex_lock(&dm->reads.mu);
		if (n->size_version == v) {
			*size = n->size;
			known = 1;
		}
		pthread_mutex_unlock(&dm->reads.mu);
	}
	if (known)
		return 0;
	sbuf b;
	fs_sb_init(&b);
	int rc = fs_render_node(dm, n, &b);
	*size = b.len;
	if (rc == 0)
		fs_node_seen(n, XXH3_64bits(b.p, b.len));
	fs_sb_free(&b);
	if (rc == 0 && v && content_version(dm, n) == v) {
		pthread_mutex_lock(&dm->reads.mu);
		n->size_version = v;
		n->size = *size;
		pthread_mutex_unlock(&dm->reads.mu);
	}
	return rc;
}
