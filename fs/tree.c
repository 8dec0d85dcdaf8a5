/*
 * fs/tree.c - inodes, the directory tree and the FUSE low-level operations.
 *
 * Inodes 1..12 are the fixed entries (the root, its files and directories,
 * generations/active).  Everything else gets a node with a fresh inode
 * number when the kernel first looks it up: records/KEY, generations/GEN
 * and its files, query sessions and their files, ingest files and the
 * transient symlinks made while flipping generations/active.  Nodes live
 * while the kernel holds a lookup reference, a handle is open, or (for
 * ingest files, sessions and transient symlinks) while they are linked in
 * their directory.
 *
 * Every file is opened with direct_io: reads return exactly what the
 * handler replies, whatever size getattr reported.  Readable computed files
 * are rendered once at open() into the handle, so one reader sees one
 * consistent snapshot.  A session's out is the exception: it is served
 * from the kernel's page cache or from a file of the daemon's (see
 * push_out()), and changes in place when the session's query runs, so a
 * reader that holds it open across another process's query of the same
 * session may read a mix of both results.
 */
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

enum kind {
	K_ROOT = 1, K_README, K_CONFIG, K_STATS, K_ERRORS, K_CTL, K_BACKUP,
	K_INGEST, K_RECORDS, K_QUERY, K_GENS, K_ACTIVE,
	K_INGEST_FILE, K_RECORD, K_SESSION, K_QIN, K_QOUT, K_QJSON, K_QSTATS,
	K_GEN, K_GMETA, K_GCENT, K_GCLUST, K_GPROG, K_TMPLINK,
};
#define FIXED_MAX K_ACTIVE

typedef struct named {
	const char *name;
	int kind;
} named;

static const named root_entries[] = {
	{"README", K_README}, {"config", K_CONFIG},   {"stats", K_STATS},
	{"errors", K_ERRORS}, {"ctl", K_CTL},         {"backup", K_BACKUP},
	{"ingest", K_INGEST}, {"records", K_RECORDS}, {"query", K_QUERY},
	{"generations", K_GENS},
};
static const named session_entries[] = {
	{"in", K_QIN}, {"out", K_QOUT}, {"out.json", K_QJSON}, {"stats", K_QSTATS},
};
static const named gen_entries[] = {
	{"meta", K_GMETA}, {"centroids.fvecs", K_GCENT}, {"clusters", K_GCLUST}, {"progress", K_GPROG},
};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

typedef struct node {
	fuse_ino_t ino;
	int kind;
	uint64_t nlookup;
	int opens;
	int linked;           /* in the name table under its parent */
	int kids;             /* session files referring to this session */
	fuse_ino_t parent;
	char *name;
	size_t namelen;
	uint64_t gen;         /* generation of K_GEN and its files */
	ingest *ing;          /* K_INGEST_FILE */
	qsession *qs;         /* K_SESSION */
	int out_bid;          /* K_SESSION: backing file id of out (passthrough), or 0 */
	int out_fd;           /* K_SESSION: that backing file, while out_bid > 0 */
	size_t out_len;       /* K_SESSION: its size (SIZE_MAX: not known) */
	atomic_int out_attrs; /* K_SESSION: out's attributes were given to the
			       * kernel since push_out() last dropped them */
	struct node *session; /* session files: their session node */
	char *target;         /* K_TMPLINK */
	uint64_t bsize;       /* K_BACKUP: size of the backup open handles read */
	struct node *next[2];  /* chains of the tables: by ino, by (parent, name) */
	struct node *sib_prev, *sib_next; /* children list of stateful dirs */
} node;

static pthread_mutex_t tree_mu = PTHREAD_MUTEX_INITIALIZER;
static node fixed[FIXED_MAX + 1];
/* Chained hash tables of nodes: every node by ino, linked names by
 * (parent, name).  Each uses its own chain pointer of the node. */
enum { BY_INO, BY_NAME };
typedef struct table {
	node **slot;
	size_t cap, count;
	int by;
} table;
static table inos = {.by = BY_INO}, names = {.by = BY_NAME};
static fuse_ino_t next_ino = 1000;
static node *children[FIXED_MAX + 1]; /* of K_INGEST, K_QUERY, K_GENS */
static uid_t my_uid;
static gid_t my_gid;
static struct fuse_session *tree_se;
static fs_mount *mnt; /* what is served; set by tree_init() */
static int cache_out_wanted, cache_out; /* see push_out() */
static int passthrough_out;               /* see out_backing_open() */
static unsigned out_files, out_files_max; /* sessions with a backing file */
static unsigned sessions;                 /* linked K_SESSION nodes */
static pthread_mutex_t push_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---------------------------------------------------------------- tables */

static size_t hash_ino(fuse_ino_t ino, size_t cap)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ULL) >> 20) & (cap - 1);
}

static size_t hash_name(fuse_ino_t parent, const char *name, size_t len, size_t cap)
{
	uint64_t h = 1469598103934665603ULL ^ parent;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
	return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static size_t node_hash(const table *t, const node *n, size_t cap)
{
	return t->by == BY_INO ? hash_ino(n->ino, cap) : hash_name(n->parent, n->name, n->namelen, cap);
}

static void tab_grow(table *t)
{
	size_t nc = t->cap ? t->cap * 2 : 4096;
	node **nt = calloc(nc, sizeof *nt);
	if (!nt)
		return;
	for (size_t i = 0; i < t->cap; i++)
		for (node *n = t->slot[i], *nx; n; n = nx) {
			nx = n->next[t->by];
			size_t h = node_hash(t, n, nc);
			n->next[t->by] = nt[h];
			nt[h] = n;
		}
	free(t->slot);
	t->slot = nt;
	t->cap = nc;
}

/* 0, or -ENOMEM when the table cannot grow. */
static int tab_insert(table *t, node *n)
{
	if (t->count + 1 > t->cap / 2)
		tab_grow(t);
	if (!t->cap)
		return -ENOMEM;
	size_t h = node_hash(t, n, t->cap);
	n->next[t->by] = t->slot[h];
	t->slot[h] = n;
	t->count++;
	return 0;
}

static void tab_remove(table *t, node *n)
{
	for (node **pp = &t->slot[node_hash(t, n, t->cap)]; *pp; pp = &(*pp)->next[t->by])
		if (*pp == n) {
			*pp = n->next[t->by];
			t->count--;
			return;
		}
}

static node *get_node(fuse_ino_t ino)
{
	if (ino >= 1 && ino <= FIXED_MAX)
		return &fixed[ino];
	if (!inos.cap)
		return NULL;
	for (node *n = inos.slot[hash_ino(ino, inos.cap)]; n; n = n->next[BY_INO])
		if (n->ino == ino)
			return n;
	return NULL;
}

static node *find_name(fuse_ino_t parent, const char *name)
{
	size_t len = strlen(name);
	if (!names.cap)
		return NULL;
	for (node *n = names.slot[hash_name(parent, name, len, names.cap)]; n; n = n->next[BY_NAME])
		if (n->parent == parent && n->namelen == len && !memcmp(n->name, name, len))
			return n;
	return NULL;
}

static int stateful(const node *n)
{
	return n->kind == K_INGEST_FILE || n->kind == K_SESSION || n->kind == K_TMPLINK;
}

static void link_name(node *n)
{
	if (n->linked || tab_insert(&names, n))
		return;
	n->linked = 1;
	if (n->kind == K_SESSION)
		sessions++;
	if (stateful(n) && n->parent <= FIXED_MAX) {
		n->sib_prev = NULL;
		n->sib_next = children[n->parent];
		if (n->sib_next)
			n->sib_next->sib_prev = n;
		children[n->parent] = n;
	}
}

static void unlink_name(node *n)
{
	if (!n->linked)
		return;
	if (n->kind == K_SESSION)
		sessions--;
	tab_remove(&names, n);
	n->linked = 0;
	if (stateful(n) && n->parent <= FIXED_MAX) {
		if (n->sib_prev)
			n->sib_prev->sib_next = n->sib_next;
		else
			children[n->parent] = n->sib_next;
		if (n->sib_next)
			n->sib_next->sib_prev = n->sib_prev;
		n->sib_prev = n->sib_next = NULL;
	}
}

static node *new_node(int kind, fuse_ino_t parent, const char *name)
{
	node *n = calloc(1, sizeof *n);
	if (!n)
		return NULL;
	n->name = strdup(name);
	if (!n->name) {
		free(n);
		return NULL;
	}
	n->namelen = strlen(name);
	n->kind = kind;
	n->parent = parent;
	n->ino = next_ino;
	if (tab_insert(&inos, n)) {
		free(n->name);
		free(n);
		return NULL;
	}
	next_ino++;
	return n;
}

static void out_backing_close(node *session);

/* Free a node and what it owns (not the tables' links). */
static void node_destroy(node *n)
{
	if (n->ing)
		ingest_free(n->ing);
	if (n->qs)
		qs_free(n->qs);
	out_backing_close(n);
	free(n->target);
	free(n->name);
	free(n);
}

static void maybe_free(node *n)
{
	if (!n || n->ino <= FIXED_MAX)
		return;
	if (n->nlookup || n->opens || n->kids || (n->linked && stateful(n)))
		return;
	unlink_name(n);
	tab_remove(&inos, n);
	node *sess = n->session;
	node_destroy(n);
	if (sess) {
		sess->kids--;
		maybe_free(sess);
	}
}

/* Keep node ino while a request uses it outside tree_mu (NULL: no such
 * node); unpin() lets it go (freed once nothing refers to it). */
static node *pin(fuse_ino_t ino)
{
	pthread_mutex_lock(&tree_mu);
	node *n = get_node(ino);
	if (n)
		n->opens++;
	pthread_mutex_unlock(&tree_mu);
	return n;
}

static void unpin(node *n)
{
	pthread_mutex_lock(&tree_mu);
	n->opens--;
	maybe_free(n);
	pthread_mutex_unlock(&tree_mu);
}

/* ---------------------------------------------------------------- content */

static int render_record(const char *key, size_t klen, sbuf *b)
{
	float *vec = malloc(sizeof(float) * VECFS_DIM_MAX);
	uint32_t dim = 0;
	char num[40];
	if (!vec)
		return -ENOMEM;
	int rc = vecfs_get(mnt->store, key, klen, vec, VECFS_DIM_MAX, &dim, NULL, 0, NULL);
	if (rc == 0) {
		sb_reserve(b, (size_t)dim * 16 + 1);
		for (uint32_t i = 0; i < dim; i++) {
			int n = fmt_float(num, sizeof num, vec[i]);
			if (i)
				sb_add(b, " ", 1);
			sb_add(b, num, (size_t)n);
		}
		sb_add(b, "\n", 1);
		if (b->oom)
			rc = -ENOMEM;
	}
	free(vec);
	return rc;
}

/* The whole content of a readable file. */
static int render(node *n, sbuf *b)
{
	char *p;
	size_t len;
	switch (n->kind) {
	case K_README:
		render_readme(b);
		return b->oom ? -ENOMEM : 0;
	case K_CONFIG:
		return render_config(mnt->store, b);
	case K_STATS: {
		fs_loop_stats ls;
		int rc = render_stats(mnt->store, b);
		if (rc == 0 && fs_loop_counts(&ls)) {
			sb_printf(b, "workers = %u\n", ls.workers);
			sb_printf(b, "workers_started = %llu\n", (unsigned long long)ls.extra_started);
			sb_printf(b, "workers_listening = %u\n", ls.listening);
			sb_printf(b, "workers_listening_cpus = %s\n", ls.listening_cpus);
			sb_printf(b, "queries_searched_ahead = %llu\n",
				  (unsigned long long)ahead_taken());
			rc = b->oom ? -ENOMEM : 0;
		}
		return rc;
	}
	case K_ERRORS:
		p = errors_render(&len);
		if (!p)
			return -ENOMEM;
		sb_add(b, p, len);
		free(p);
		return b->oom ? -ENOMEM : 0;
	case K_RECORD:
		return render_record(n->name, n->namelen, b);
	case K_QOUT:
	case K_QJSON:
	case K_QSTATS:
		p = qs_render(n->session->qs, n->kind == K_QOUT ? QS_OUT : n->kind == K_QJSON ? QS_JSON : QS_STATS,
			      &len);
		if (!p)
			return -ENOMEM;
		sb_add(b, p, len);
		free(p);
		return b->oom ? -ENOMEM : 0;
	case K_GMETA:
		return gen_render(mnt->store, n->gen, GF_META, b);
	case K_GCENT:
		return gen_render(mnt->store, n->gen, GF_CENTROIDS, b);
	case K_GCLUST:
		return gen_render(mnt->store, n->gen, GF_CLUSTERS, b);
	case K_GPROG:
		return gen_render(mnt->store, n->gen, GF_PROGRESS, b);
	}
	return 0;
}

static int readable(int kind)
{
	switch (kind) {
	case K_README: case K_CONFIG: case K_STATS: case K_ERRORS: case K_BACKUP:
	case K_RECORD: case K_QOUT: case K_QJSON: case K_QSTATS:
	case K_GMETA: case K_GCENT: case K_GCLUST: case K_GPROG:
		return 1;
	}
	return 0;
}

static int writable(int kind)
{
	return kind == K_CONFIG || kind == K_CTL || kind == K_INGEST_FILE || kind == K_QIN;
}

static const char *kind_path(const node *n, char *buf, size_t cap)
{
	const node *p = n->parent ? get_node(n->parent) : NULL;
	if (n->ino == K_ROOT)
		snprintf(buf, cap, "/");
	else if (n->ino <= FIXED_MAX)
		snprintf(buf, cap, "%s", n->name);
	else if (p && p->kind == K_SESSION)
		snprintf(buf, cap, "query/%s/%s", p->name, n->name);
	else if (p && p->kind == K_GEN)
		snprintf(buf, cap, "generations/%s/%s", p->name, n->name);
	else if (p)
		snprintf(buf, cap, "%s/%s", p->name, n->name);
	else
		snprintf(buf, cap, "%s", n->name);
	return buf;
}

/* ---------------------------------------------------------------- attributes */

static int node_attr(node *n, struct stat *st)
{
	sbuf b;
	int rc = 0;
	memset(st, 0, sizeof *st);
	st->st_ino = n->ino;
	st->st_uid = my_uid;
	st->st_gid = my_gid;
	st->st_nlink = 1;
	st->st_blksize = 4096;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	st->st_atim = st->st_mtim = st->st_ctim = now;
	switch (n->kind) {
	case K_ROOT: case K_INGEST: case K_RECORDS: case K_QUERY: case K_GENS: case K_SESSION:
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	case K_GEN:
		if (!gen_exists(mnt->store, n->gen))
			return -ENOENT;
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return 0;
	case K_ACTIVE: {
		uint64_t a = vecfs_active(mnt->store);
		char t[32];
		if (!a)
			return -ENOENT;
		st->st_mode = S_IFLNK | 0777;
		st->st_size = snprintf(t, sizeof t, "%llu", (unsigned long long)a);
		return 0;
	}
	case K_TMPLINK:
		st->st_mode = S_IFLNK | 0777;
		st->st_size = (off_t)strlen(n->target);
		return 0;
	case K_CTL:
		st->st_mode = S_IFREG | 0200;
		return 0;
	case K_QIN: /* what was written, so that O_APPEND writes append */
		st->st_mode = S_IFREG | 0200;
		st->st_size = (off_t)qs_in_size(n->session->qs);
		return 0;
	case K_INGEST_FILE:
		st->st_mode = S_IFREG | 0200;
		st->st_size = (off_t)ingest_size(n->ing);
		return 0;
	case K_BACKUP:
		/* 0 unless a backup is open: then its size, for tools that trust
		 * the size (sendfile-based copies) */
		st->st_mode = S_IFREG | 0444;
		pthread_mutex_lock(&tree_mu);
		st->st_size = (off_t)n->bsize;
		pthread_mutex_unlock(&tree_mu);
		return 0;
	case K_QOUT: case K_QJSON: case K_QSTATS:
		if (n->kind == K_QOUT) /* before the size: see push_out() */
			atomic_store(&n->session->out_attrs, 1);
		st->st_mode = S_IFREG | 0444;
		st->st_size = (off_t)qs_size(n->session->qs,
					     n->kind == K_QOUT ? QS_OUT : n->kind == K_QJSON ? QS_JSON : QS_STATS);
		return 0;
	case K_GMETA: case K_GCENT: case K_GCLUST: case K_GPROG: {
		int64_t s = gen_file_size(mnt->store, n->gen, n->kind == K_GMETA ? GF_META
						 : n->kind == K_GCENT ? GF_CENTROIDS
						 : n->kind == K_GCLUST ? GF_CLUSTERS : GF_PROGRESS);
		if (s < 0)
			return (int)s;
		st->st_mode = S_IFREG | 0444;
		st->st_size = s;
		return 0;
	}
	}
	/* README, config, stats, errors, records/KEY: the exact size */
	sb_init(&b);
	rc = render(n, &b);
	st->st_mode = S_IFREG | (n->kind == K_CONFIG ? 0644 : 0444);
	st->st_size = (off_t)b.len;
	sb_free(&b);
	return rc;
}

/* out is served from a file of the daemon's (passthrough) */
static int out_passthrough(const node *n)
{
	return n->kind == K_QOUT && n->session && n->session->out_bid > 0;
}

/* out is served from the kernel's page cache */
static int out_cached(const node *n)
{
	return cache_out && n->kind == K_QOUT && !out_passthrough(n);
}

/* Attributes are computed afresh on every stat (0), but for a session's
 * out, whose every change push_out() announces. */
static double attr_timeout(const node *n)
{
	return out_cached(n) || out_passthrough(n) ? 60.0 : 0;
}

static void reply_entry(fuse_req_t req, node *n, const struct stat *st)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = n->ino;
	e.attr = *st;
	e.attr_timeout = attr_timeout(n);
	/* the fixed names never go away; a query session and its files go only
	 * by rmdir (which drops the kernel's entry); everything else may at any
	 * time */
	switch (n->kind) {
	case K_SESSION: case K_QIN: case K_QOUT: case K_QJSON: case K_QSTATS:
		e.entry_timeout = 60.0;
		break;
	default:
		e.entry_timeout = n->ino <= FIXED_MAX && n->kind != K_ACTIVE ? 60.0 : 0;
	}
	if (fuse_reply_entry(req, &e) != 0) {
		pthread_mutex_lock(&tree_mu);
		if (n->nlookup)
			n->nlookup--;
		maybe_free(n);
		pthread_mutex_unlock(&tree_mu);
	}
}

/* Take a lookup reference on n (lock held) and answer with its attributes;
 * drop the reference again when the attributes cannot be had. */
static void answer_entry_locked(fuse_req_t req, node *n)
{
	struct stat st;
	n->nlookup++;
	pthread_mutex_unlock(&tree_mu);
	int rc = node_attr(n, &st);
	if (rc) {
		pthread_mutex_lock(&tree_mu);
		n->nlookup--;
		maybe_free(n);
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, -rc);
		return;
	}
	reply_entry(req, n, &st);
}

/* ---------------------------------------------------------------- lookup */

static int lookup_named(const named *tab, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(tab[i].name, name))
			return tab[i].kind;
	return 0;
}

/* Find or make the child `name` of p (lock held).  NULL with *err set when
 * there is none. */
static node *child_locked(node *p, const char *name, int *err)
{
	node *n;
	int k;
	uint64_t gen;
	*err = ENOENT;
	switch (p->kind) {
	case K_ROOT:
		k = lookup_named(root_entries, NELEM(root_entries), name);
		return k ? &fixed[k] : NULL;
	case K_INGEST:
	case K_QUERY:
		return find_name(p->ino, name);
	case K_RECORDS:
		n = find_name(p->ino, name);
		if (!n && (n = new_node(K_RECORD, p->ino, name)))
			link_name(n);
		if (!n)
			*err = ENOMEM;
		return n;
	case K_SESSION:
		k = lookup_named(session_entries, NELEM(session_entries), name);
		if (!k)
			return NULL;
		n = find_name(p->ino, name);
		if (!n && (n = new_node(k, p->ino, name))) {
			n->session = p;
			p->kids++;
			link_name(n);
		}
		if (!n)
			*err = ENOMEM;
		return n;
	case K_GENS:
		if (!strcmp(name, "active"))
			return &fixed[K_ACTIVE];
		n = find_name(p->ino, name);
		if (n)
			return n;
		if (gen_parse_name(name, &gen))
			return NULL;
		if ((n = new_node(K_GEN, p->ino, name))) {
			n->gen = gen;
			link_name(n);
		} else {
			*err = ENOMEM;
		}
		return n;
	case K_GEN:
		k = lookup_named(gen_entries, NELEM(gen_entries), name);
		if (!k)
			return NULL;
		n = find_name(p->ino, name);
		if (!n && (n = new_node(k, p->ino, name))) {
			n->gen = p->gen;
			link_name(n);
		}
		if (!n)
			*err = ENOMEM;
		return n;
	}
	*err = ENOTDIR;
	return NULL;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int err;
	pthread_mutex_lock(&tree_mu);
	node *p = get_node(parent);
	node *n = p ? child_locked(p, name, &err) : (err = ENOENT, NULL);
	if (!n) {
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, err);
		return;
	}
	answer_entry_locked(req, n);
}

static void forget_one(fuse_ino_t ino, uint64_t nlookup)
{
	node *n = get_node(ino);
	if (!n || ino <= FIXED_MAX)
		return;
	n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
	maybe_free(n);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	pthread_mutex_lock(&tree_mu);
	forget_one(ino, nlookup);
	pthread_mutex_unlock(&tree_mu);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	pthread_mutex_lock(&tree_mu);
	for (size_t i = 0; i < count; i++)
		forget_one(forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&tree_mu);
	fuse_reply_none(req);
}

/* Take tree_mu and find directory node `parent`: NULL (unlocked, ENOENT
 * answered) when there is none. */
static node *lock_parent(fuse_req_t req, fuse_ino_t parent)
{
	pthread_mutex_lock(&tree_mu);
	node *p = get_node(parent);
	if (!p) {
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, ENOENT);
	}
	return p;
}

static node *get_locked(fuse_ino_t ino)
{
	pthread_mutex_lock(&tree_mu);
	node *n = get_node(ino);
	pthread_mutex_unlock(&tree_mu);
	return n;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	node *n = get_locked(ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = node_attr(n, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, attr_timeout(n));
}

/* ---------------------------------------------------------------- handles */

typedef struct handle {
	node *n;
	/* held while a reply points into the handle: libfuse may see the
	 * RELEASE of a reader woken by that very reply before writev returns */
	pthread_mutex_t mu;
	char *data;    /* read snapshot */
	size_t len;
	int fresh;     /* data was rendered by open and not read yet */
	int fd;        /* backup */
	sbuf wbuf;     /* config and ctl writes */
	int wdirty;
	size_t checked; /* config: bytes of wbuf whose lines were checked */
	unsigned lines;
	int bad;        /* config: a line failed its check */
} handle;

/* Render a readable file into its handle.  A read at offset 0 renders it
 * anew (except right after open), so a descriptor held open and read again
 * from 0 sees the file as it is now (a session's out after the next query,
 * stats, errors), as /proc files do; reads at other offsets continue the
 * snapshot. */
static int rerender(handle *h)
{
	sbuf b;
	sb_init(&b);
	int rc = render(h->n, &b);
	if (rc == 0) {
		char *p = sb_take(&b, &h->len);
		if (!p) {
			rc = -ENOMEM;
			h->len = 0;
		}
		free(h->data);
		h->data = p;
	}
	sb_free(&b);
	return rc;
}

static handle *handle_of(struct fuse_file_info *fi)
{
	return (handle *)(uintptr_t)fi->fh;
}

/* Forget what was written to a config or ctl handle. */
static void wbuf_reset(handle *h)
{
	sb_reset(&h->wbuf);
	h->checked = 0;
	h->lines = 0;
	h->bad = 0;
}

static void handle_free(handle *h)
{
	if (!h)
		return;
	if (h->fd >= 0)
		close(h->fd);
	free(h->data);
	sb_free(&h->wbuf);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

/* Open n (a reference on it is already counted in n->opens). */
static int open_node(node *n, struct fuse_file_info *fi, handle **out)
{
	int acc = fi->flags & O_ACCMODE;
	char path[600];
	if (n->kind == K_ROOT || n->kind == K_INGEST || n->kind == K_RECORDS || n->kind == K_QUERY ||
	    n->kind == K_GENS || n->kind == K_SESSION || n->kind == K_GEN)
		return -EISDIR;
	if (acc != O_RDONLY && !writable(n->kind)) {
		pthread_mutex_lock(&tree_mu);
		kind_path(n, path, sizeof path);
		pthread_mutex_unlock(&tree_mu);
		errlog("%s: cannot be written (read-only)", path);
		return -EACCES;
	}
	if (acc == O_RDONLY && !readable(n->kind))
		return -EACCES;
	handle *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	h->n = n;
	h->fd = -1;
	pthread_mutex_init(&h->mu, NULL);
	int rc = 0;
	if (acc != O_WRONLY && readable(n->kind)) {
		if (n->kind == K_BACKUP) {
			struct stat bst;
			h->fd = backup_open(mnt);
			if (h->fd < 0)
				rc = h->fd;
			else if (fstat(h->fd, &bst) == 0) {
				pthread_mutex_lock(&tree_mu);
				n->bsize = (uint64_t)bst.st_size;
				pthread_mutex_unlock(&tree_mu);
			}
		} else if (n->kind != K_QOUT && n->kind != K_QJSON && n->kind != K_QSTATS) {
			/* rendered now, so that open fails when the file cannot be
			 * (a record deleted meanwhile); a session's results cannot
			 * fail and are rendered by the first read */
			rc = rerender(h);
			h->fresh = 1;
		}
	}
	if (rc == 0 && n->kind == K_QIN && (fi->flags & O_TRUNC))
		qs_in_truncate(n->session->qs);
	if (rc) {
		handle_free(h);
		return rc;
	}
	fi->direct_io = !out_cached(n) && !out_passthrough(n);
	fi->keep_cache = out_cached(n);
	/* nothing happens when a reader closes: spare it the FLUSH round trip */
	fi->noflush = acc == O_RDONLY;
	fi->fh = (uintptr_t)h;
	*out = h;
	return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	handle *h;
	node *n = pin(ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = open_node(n, fi, &h);
	if (rc == 0 && n->kind == K_INGEST_FILE && ingest_done(n->ing)) {
		/* reopened after it left ingest/ (through a descriptor path) */
		handle_free(h);
		rc = -ENOENT;
	}
	if (rc) {
		unpin(n);
		fuse_reply_err(req, -rc);
		return;
	}
	/* one reading of the backing file: rmdir may release it meanwhile */
	pthread_mutex_lock(&tree_mu);
	int bid = out_passthrough(n) ? n->session->out_bid : 0;
	pthread_mutex_unlock(&tree_mu);
	if (bid > 0)
		fi->direct_io = fi->keep_cache = 0;
	if ((bid > 0 ? pt_reply_open(req, fi, bid) : fuse_reply_open(req, fi)) != 0) {
		handle_free(h);
		unpin(n);
	}
}

/* A READ of a cached out fills part of the kernel's copy, whose other
 * pages push_out() stored: it must see the content of now, at any offset. */
static int read_fills_cache(const handle *h)
{
	return out_cached(h->n);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)ino;
	handle *h = handle_of(fi);
	pthread_mutex_lock(&h->mu);
	if (h->fd >= 0) {
		char *buf = malloc(size ? size : 1);
		ssize_t r = buf ? pread(h->fd, buf, size, off) : -1;
		if (!buf)
			fuse_reply_err(req, ENOMEM);
		else if (r < 0)
			fuse_reply_err(req, errno);
		else
			fuse_reply_buf(req, buf, (size_t)r);
		free(buf);
	} else if (((off == 0 && !h->fresh) || read_fills_cache(h)) && rerender(h) != 0) {
		fuse_reply_err(req, ENOMEM);
	} else if (off < 0 || (size_t)off >= h->len) {
		h->fresh = 0;
		fuse_reply_buf(req, NULL, 0);
	} else {
		h->fresh = 0;
		size_t n = h->len - (size_t)off;
		fuse_reply_buf(req, h->data + off, n < size ? n : size);
	}
	pthread_mutex_unlock(&h->mu);
}

/* Remove an ingest file from ingest/ once it committed or failed. */
static void ingest_leave(node *n)
{
	if (!ingest_done(n->ing))
		return;
	pthread_mutex_lock(&tree_mu);
	if (n->linked)
		unlink_name(n);
	maybe_free(n);
	pthread_mutex_unlock(&tree_mu);
}

/* Run the complete ctl lines in h->wbuf; keep a partial last line. */
static int ctl_run_lines(handle *h, int all)
{
	int rc = 0;
	size_t pos = 0;
	while (pos < h->wbuf.len && rc == 0) {
		const char *s = h->wbuf.p + pos;
		const char *nl = memchr(s, '\n', h->wbuf.len - pos);
		if (!nl && !all)
			break;
		size_t n = nl ? (size_t)(nl - s) : h->wbuf.len - pos;
		pos += n + (nl ? 1 : 0);
		rc = ctl_exec(mnt, s, n);
	}
	if (rc)
		pos = h->wbuf.len; /* a failed command drops what follows it */
	memmove(h->wbuf.p, h->wbuf.p + pos, h->wbuf.len - pos);
	h->wbuf.len -= pos;
	if (h->wbuf.p)
		h->wbuf.p[h->wbuf.len] = 0;
	return rc;
}

/* Check the config lines completed by this write, so that a bad one fails
 * the write() (which a shell's builtin echo reports) as well as the close. */
static int config_check_lines(handle *h)
{
	vecfs_config scratch;
	if (h->bad)
		return -EINVAL;
	vecfs_config_defaults(&scratch);
	while (h->checked < h->wbuf.len) {
		const char *s = h->wbuf.p + h->checked;
		const char *nl = memchr(s, '\n', h->wbuf.len - h->checked);
		if (!nl)
			break;
		h->checked += (size_t)(nl - s) + 1;
		h->lines++;
		if (config_line(s, (size_t)(nl - s), h->lines, &scratch)) {
			h->bad = 1;
			return -EINVAL;
		}
	}
	return 0;
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino;
	handle *h = handle_of(fi);
	node *n = h->n;
	int rc = 0;
	switch (n->kind) {
	case K_INGEST_FILE:
		rc = ingest_write(n->ing, buf, size);
		if (rc)
			ingest_leave(n);
		break;
	case K_QIN:
		rc = qs_in_write(n->session->qs, buf, size, (uint64_t)off);
		break;
	case K_CONFIG:
	case K_CTL:
		if (h->wbuf.len + size > ((size_t)1 << 20)) {
			errlog("%s: more than 1 MiB written at once", n->kind == K_CTL ? "ctl" : "config");
			rc = -EFBIG;
			break;
		}
		sb_add(&h->wbuf, buf, size);
		if (h->wbuf.oom) {
			rc = -ENOMEM;
			break;
		}
		h->wdirty = 1;
		if (n->kind == K_CTL)
			rc = ctl_run_lines(h, 0);
		else
			rc = config_check_lines(h);
		break;
	default:
		rc = -EBADF;
	}
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_write(req, size);
}

/* Give a new session a backing file for out when passthrough works; else
 * its out is served as the other computed files are. */
static void out_backing_open(node *session)
{
	if (!passthrough_out || out_files >= out_files_max || !pt_usable())
		return;
	int fd = memfd_create("vecfs-out", MFD_CLOEXEC);
	if (fd < 0)
		return;
	int id = pt_backing_open(fd);
	if (id > 0) {
		session->out_fd = fd;
		session->out_bid = id;
		session->out_len = 0;
		out_files++;
	} else {
		close(fd);
	}
}

/* With tree_mu held: the session no longer needs its backing file (its
 * readers, if any, keep the kernel's own reference to it). */
static void out_backing_close(node *session)
{
	if (session->out_bid <= 0)
		return;
	pthread_mutex_lock(&push_mu); /* no push is writing to it */
	if (ftruncate(session->out_fd, 0) != 0) {
		/* the memory goes with the last reference anyway */
	}
	pt_backing_close(session->out_bid);
	close(session->out_fd);
	session->out_bid = 0;
	session->out_fd = -1;
	out_files--;
	pthread_mutex_unlock(&push_mu);
}

/* A session whose out is passed through: write out into its backing
 * file, so that every reader sees it once the close() that ran the query
 * returns.  A file that cannot take it is emptied, and the close fails. */
static int push_out_backing(node *session)
{
	size_t len = 0;
	int rc = 0;
	/* with push_mu held (the last push writes the latest out) */
	char *p = qs_render(session->qs, QS_OUT, &len);
	if (!p) {
		rc = -ENOMEM;
		len = 0;
	}
	for (size_t done = 0; done < len;) {
		ssize_t w = pwrite(session->out_fd, p + done, len - done, (off_t)done);
		if (w <= 0) {
			rc = w < 0 ? -errno : -EIO;
			len = 0;
			break;
		}
		done += (size_t)w;
	}
	/* what a longer out before left past the end goes */
	if (len < session->out_len || rc) {
		if (ftruncate(session->out_fd, (off_t)len) != 0) {
			if (!rc)
				rc = -errno;
			len = SIZE_MAX;
		}
	}
	session->out_len = len;
	free(p);
	if (rc) {
		/* out reads empty: so must stat, out.json and stats */
		qs_clear(session->qs);
		errlog("query/%s/out: cannot store the results: %s", session->name, strerror(-rc));
	}
	return rc;
}

/* With push_mu held: the kernel's copy of out (inode ino) replaced. */
static void push_out_cache(node *session, fuse_ino_t ino)
{
	size_t len = 0;
	char *p = qs_render(session->qs, QS_OUT, &len);
	fuse_lowlevel_notify_inval_inode(tree_se, ino, 0, 0);
	if (p && len) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);
		bv.buf[0].mem = p;
		if (fuse_lowlevel_notify_store(tree_se, ino, 0, &bv, 0) != 0)
			fuse_lowlevel_notify_inval_inode(tree_se, ino, 0, 0);
	}
	free(p);
}

/* A session's out is read through the kernel's page cache (keep_cache, a
 * long attribute timeout): after a query the reader gets it in one GETATTR
 * round trip, with no READ and no read at the end of file.  So each time
 * out changes, drop the kernel's copy and store the new one, before the
 * close() that ran the query returns.  The kernel keeps the stored pages
 * when the size changes (EXPLICIT_INVAL_DATA).  An out never looked up has
 * nothing cached: the notifications then fail, harmlessly.  A passed
 * through out has its own file instead; only its attributes are dropped
 * (a stat then asks for the new size, a read does not need it). */
static int push_out(node *session)
{
	int rc = 0, passed;
	pthread_mutex_lock(&tree_mu);
	node *o = find_name(session->ino, "out");
	fuse_ino_t ino = o ? o->ino : 0;
	pthread_mutex_unlock(&tree_mu);
	pthread_mutex_lock(&push_mu); /* the last push stores the latest out */
	passed = session->out_bid > 0;
	if (passed)
		rc = push_out_backing(session);
	else if (cache_out && ino)
		push_out_cache(session, ino);
	pthread_mutex_unlock(&push_mu);
	/* its size: the kernel keeps a passed-through out's attributes, if it
	 * was given them since they were last dropped (a getattr that began
	 * before this push and answers after it is not kept: the drop
	 * outdates it) */
	if (passed && ino && atomic_exchange(&session->out_attrs, 0))
		fuse_lowlevel_notify_inval_inode(tree_se, ino, -1, 0);
	return rc;
}

static int flush_handle(handle *h)
{
	node *n = h->n;
	int rc = 0;
	switch (n->kind) {
	case K_INGEST_FILE:
		fs_loop_long(); /* a commit */
		rc = ingest_commit(n->ing);
		ingest_leave(n);
		break;
	case K_QIN: {
		int ran;
		rc = qs_in_flush(n->session->qs, &ran);
		if (ran) {
			int prc = push_out(n->session);
			if (!rc)
				rc = prc;
		}
		break;
	}
	case K_CONFIG:
		if (h->wdirty) {
			fs_loop_long();
			h->wdirty = 0;
			if (h->bad)
				rc = -EINVAL; /* already in errors: nothing is applied */
			else
				rc = config_apply_text(mnt->store, h->wbuf.p ? h->wbuf.p : "", h->wbuf.len);
			wbuf_reset(h);
		}
		break;
	case K_CTL:
		if (h->wdirty) {
			fs_loop_long();
			h->wdirty = 0;
			rc = ctl_run_lines(h, 1);
			sb_reset(&h->wbuf);
		}
		break;
	}
	return rc;
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fuse_reply_err(req, -flush_handle(handle_of(fi)));
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	handle *h = handle_of(fi);
	node *n = h->n;
	/* the last resort: data written and never flushed */
	flush_handle(h);
	pthread_mutex_lock(&h->mu); /* a read may still be replying */
	pthread_mutex_unlock(&h->mu);
	handle_free(h);
	pthread_mutex_lock(&tree_mu);
	n->opens--;
	if (n->kind == K_INGEST_FILE && n->opens == 0 && n->linked)
		unlink_name(n); /* a closed file leaves ingest/ */
	if (n->kind == K_BACKUP && n->opens == 0)
		n->bsize = 0;
	maybe_free(n);
	pthread_mutex_unlock(&tree_mu);
	fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct stat st;
	node *n = get_locked(ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		char path[600];
		switch (n->kind) {
		case K_QIN:
			if (attr->st_size == 0)
				qs_in_truncate(n->session->qs);
			break;
		case K_CONFIG:
		case K_CTL:
			if (fi && attr->st_size == 0) {
				wbuf_reset(handle_of(fi));
			}
			break;
		case K_INGEST_FILE:
			if ((uint64_t)attr->st_size != ingest_size(n->ing)) {
				errlog("ingest/%s: cannot truncate a file being ingested", n->name);
				fuse_reply_err(req, EINVAL);
				return;
			}
			break;
		default:
			pthread_mutex_lock(&tree_mu);
			kind_path(n, path, sizeof path);
			pthread_mutex_unlock(&tree_mu);
			errlog("%s: cannot be truncated (read-only)", path);
			fuse_reply_err(req, EACCES);
			return;
		}
	}
	/* modes, owners and times are fixed: accepted and ignored */
	int rc = node_attr(n, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, 0);
}

/* ---------------------------------------------------------------- links */

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char t[32];
	pthread_mutex_lock(&tree_mu);
	node *n = get_node(ino);
	char *target = n && n->kind == K_TMPLINK ? strdup(n->target) : NULL;
	pthread_mutex_unlock(&tree_mu);
	if (n && n->kind == K_ACTIVE) {
		uint64_t a = vecfs_active(mnt->store);
		if (!a) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		snprintf(t, sizeof t, "%llu", (unsigned long long)a);
		fuse_reply_readlink(req, t);
		return;
	}
	if (!target) {
		fuse_reply_err(req, n && n->kind == K_TMPLINK ? ENOMEM : EINVAL);
		return;
	}
	fuse_reply_readlink(req, target);
	free(target);
}

static int valid_session_id(const char *id)
{
	size_t n = strlen(id);
	if (n < 1 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)mode;
	node *p = lock_parent(req, parent);
	if (!p)
		return;
	if (p->kind != K_QUERY) {
		char path[600];
		kind_path(p, path, sizeof path);
		pthread_mutex_unlock(&tree_mu);
		if (p->kind == K_GENS || p->kind == K_GEN) {
			errlog("mkdir %s/%s: generations are made by writing `build` to ctl", path, name);
			fuse_reply_err(req, EACCES);
		} else {
			errlog("mkdir %s%s%s: directories can only be made in query/", path,
			       p->kind == K_ROOT ? "" : "/", name);
			fuse_reply_err(req, EPERM);
		}
		return;
	}
	if (!valid_session_id(name)) {
		pthread_mutex_unlock(&tree_mu);
		errlog("mkdir query/%s: a session id is 1-64 of A-Z a-z 0-9 . _ -", name);
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (find_name(parent, name)) {
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (sessions >= mnt->max_sessions) {
		pthread_mutex_unlock(&tree_mu);
		errlog("mkdir query/%s: %u query sessions are open, the most there may be "
		       "(-o max_sessions); rmdir some", name, mnt->max_sessions);
		fuse_reply_err(req, ENOSPC);
		return;
	}
	node *n = new_node(K_SESSION, parent, name);
	if (n && (n->qs = qs_new(mnt->store, name, &mnt->query_input)) != NULL)
		out_backing_open(n);
	if (!n || !n->qs) {
		if (n)
			maybe_free(n);
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	link_name(n);
	answer_entry_locked(req, n);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	node *p = lock_parent(req, parent);
	if (!p)
		return;
	if (p->kind == K_QUERY) {
		node *n = find_name(parent, name);
		if (!n) {
			pthread_mutex_unlock(&tree_mu);
			fuse_reply_err(req, ENOENT);
			return;
		}
		unlink_name(n);
		if (n->kind == K_SESSION) { /* the session ends, open files or not */
			qs_end(n->qs);
			out_backing_close(n);
		}
		maybe_free(n);
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, 0);
		return;
	}
	if (p->kind == K_GENS) {
		uint64_t gen;
		node *n = find_name(parent, name);
		pthread_mutex_unlock(&tree_mu);
		if ((n && n->kind == K_TMPLINK) || !strcmp(name, "active")) {
			fuse_reply_err(req, ENOTDIR);
			return;
		}
		if (gen_parse_name(name, &gen)) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		int rc = vecfs_gen_remove(mnt->store, gen);
		if (rc == -EBUSY)
			errlog("rmdir generations/%s: it is the active generation, or still building", name);
		else if (rc && rc != -ENOENT)
			errlog("rmdir generations/%s: %s", name, strerror(-rc));
		if (rc == 0) {
			pthread_mutex_lock(&tree_mu);
			n = find_name(parent, name);
			if (n && n->kind == K_GEN) {
				unlink_name(n);
				maybe_free(n);
			}
			pthread_mutex_unlock(&tree_mu);
		}
		fuse_reply_err(req, -rc);
		return;
	}
	char path[600];
	kind_path(p, path, sizeof path);
	pthread_mutex_unlock(&tree_mu);
	if (p->kind == K_ROOT && lookup_named(root_entries, NELEM(root_entries), name)) {
		errlog("rmdir %s: part of the fixed tree", name);
		fuse_reply_err(req, EPERM);
		return;
	}
	fuse_reply_err(req, p->kind == K_RECORDS || p->kind == K_INGEST || p->kind == K_GEN ||
				    p->kind == K_SESSION
			    ? ENOTDIR
			    : ENOENT);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	node *p = lock_parent(req, parent);
	if (!p)
		return;
	int pk = p->kind;
	char path[600];
	kind_path(p, path, sizeof path);
	if (pk == K_RECORDS) {
		pthread_mutex_unlock(&tree_mu);
		int rc = vecfs_delete(mnt->store, name, strlen(name));
		if (rc && rc != -ENOENT)
			errlog("rm records/%s: %s", name, strerror(-rc));
		if (rc == 0) {
			pthread_mutex_lock(&tree_mu);
			node *n = find_name(parent, name);
			if (n) {
				unlink_name(n);
				maybe_free(n);
			}
			pthread_mutex_unlock(&tree_mu);
		}
		fuse_reply_err(req, -rc);
		return;
	}
	if (pk == K_INGEST) {
		node *n = find_name(parent, name);
		if (!n) {
			pthread_mutex_unlock(&tree_mu);
			fuse_reply_err(req, ENOENT);
			return;
		}
		unlink_name(n);
		n->opens++; /* keep it while cancelling outside the lock */
		pthread_mutex_unlock(&tree_mu);
		ingest_cancel(n->ing);
		unpin(n);
		fuse_reply_err(req, 0);
		return;
	}
	if (pk == K_GENS) {
		node *n = find_name(parent, name);
		if (n && n->kind == K_TMPLINK) {
			unlink_name(n);
			maybe_free(n);
			pthread_mutex_unlock(&tree_mu);
			fuse_reply_err(req, 0);
			return;
		}
		pthread_mutex_unlock(&tree_mu);
		if (!strcmp(name, "active")) {
			errlog("rm generations/active: active cannot be removed; flip it with `ln -sfn GEN generations/active`");
			fuse_reply_err(req, EPERM);
			return;
		}
		uint64_t gen;
		fuse_reply_err(req, !gen_parse_name(name, &gen) && gen_exists(mnt->store, gen) ? EISDIR : ENOENT);
		return;
	}
	if (pk == K_SESSION && lookup_named(session_entries, NELEM(session_entries), name)) {
		/* the files of a session stay; removing one clears the session, so
		 * that `rm -rf query/ID` ends it */
		qsession *q = p->qs;
		p->opens++;
		pthread_mutex_unlock(&tree_mu);
		qs_clear(q);
		push_out(p);
		unpin(p);
		fuse_reply_err(req, 0);
		return;
	}
	pthread_mutex_unlock(&tree_mu);
	if (pk == K_ROOT && !lookup_named(root_entries, NELEM(root_entries), name)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	errlog("rm %s%s%s: cannot be removed", pk == K_ROOT ? "" : path, pk == K_ROOT ? "" : "/", name);
	fuse_reply_err(req, EPERM);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	pthread_mutex_lock(&tree_mu);
	node *p = get_node(parent);
	if (!p || p->kind != K_GENS) {
		pthread_mutex_unlock(&tree_mu);
		errlog("ln -s %s %s: symlinks can only be made in generations/", link, name);
		fuse_reply_err(req, p ? EPERM : ENOENT);
		return;
	}
	uint64_t gen;
	if (!strcmp(name, "active")) {
		pthread_mutex_unlock(&tree_mu);
		if (vecfs_active(mnt->store)) {
			fuse_reply_err(req, EEXIST);
			return;
		}
		int rc = gen_activate_target(mnt->store, link, "cannot point to");
		if (rc) {
			fuse_reply_err(req, -rc);
			return;
		}
		pthread_mutex_lock(&tree_mu);
		answer_entry_locked(req, &fixed[K_ACTIVE]);
		return;
	}
	if (find_name(parent, name)) {
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, EEXIST);
		return;
	}
	if (!gen_parse_name(name, &gen)) {
		pthread_mutex_unlock(&tree_mu);
		if (gen_exists(mnt->store, gen)) {
			fuse_reply_err(req, EEXIST);
			return;
		}
		errlog("ln -s %s generations/%s: numeric names are reserved for generations", link, name);
		fuse_reply_err(req, EPERM);
		return;
	}
	node *n = new_node(K_TMPLINK, parent, name);
	if (n && !(n->target = strdup(link))) {
		maybe_free(n);
		n = NULL;
	}
	if (!n) {
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	link_name(n);
	answer_entry_locked(req, n);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) || (flags & RENAME_EXCHANGE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	pthread_mutex_lock(&tree_mu);
	node *p = get_node(parent), *np = get_node(newparent);
	if (!p || !np) {
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (p->kind != K_GENS || np->kind != K_GENS) {
		char a[600], b[600];
		kind_path(p, a, sizeof a);
		kind_path(np, b, sizeof b);
		pthread_mutex_unlock(&tree_mu);
		errlog("mv %s/%s %s/%s: only symlinks in generations/ can be renamed (onto active)", a, name,
		       b, newname);
		fuse_reply_err(req, parent != newparent ? EXDEV : EPERM);
		return;
	}
	node *src = find_name(parent, name);
	if (!src || src->kind != K_TMPLINK) {
		pthread_mutex_unlock(&tree_mu);
		uint64_t gen;
		int exists = !strcmp(name, "active") || (!gen_parse_name(name, &gen) && gen_exists(mnt->store, gen));
		if (exists)
			errlog("mv generations/%s: generations and active cannot be renamed", name);
		fuse_reply_err(req, exists ? EPERM : ENOENT);
		return;
	}
	if (!strcmp(newname, "active")) {
		char *target = strdup(src->target);
		src->opens++;
		pthread_mutex_unlock(&tree_mu);
		if (!target) {
			unpin(src);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		int rc;
		if ((flags & RENAME_NOREPLACE) && vecfs_active(mnt->store))
			rc = -EEXIST;
		else
			rc = gen_activate_target(mnt->store, target, "cannot point to");
		free(target);
		pthread_mutex_lock(&tree_mu);
		src->opens--;
		if (rc == 0)
			unlink_name(src);
		maybe_free(src);
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, -rc);
		return;
	}
	uint64_t gen;
	if (!gen_parse_name(newname, &gen)) {
		pthread_mutex_unlock(&tree_mu);
		errlog("mv generations/%s generations/%s: numeric names are reserved for generations", name,
		       newname);
		fuse_reply_err(req, EPERM);
		return;
	}
	node *dst = find_name(parent, newname);
	if (dst == src) {
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, 0);
		return;
	}
	if (dst) {
		if (flags & RENAME_NOREPLACE) {
			pthread_mutex_unlock(&tree_mu);
			fuse_reply_err(req, EEXIST);
			return;
		}
		unlink_name(dst);
		maybe_free(dst);
	}
	char *nn = strdup(newname);
	if (!nn) {
		pthread_mutex_unlock(&tree_mu);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	unlink_name(src);
	free(src->name);
	src->name = nn;
	src->namelen = strlen(nn);
	link_name(src);
	pthread_mutex_unlock(&tree_mu);
	fuse_reply_err(req, 0);
}

/* Take back the lookup and open a failed create made: an ingest file
 * nobody else holds leaves ingest/. */
static void undo_create(node *n)
{
	pthread_mutex_lock(&tree_mu);
	n->nlookup--;
	n->opens--;
	if (n->kind == K_INGEST_FILE && n->opens == 0)
		unlink_name(n);
	maybe_free(n);
	pthread_mutex_unlock(&tree_mu);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	(void)mode;
	handle *h;
	node *p = lock_parent(req, parent);
	if (!p)
		return;
	node *n = NULL;
	if (p->kind == K_INGEST) {
		int fmt = ingest_format_of(name);
		if (fmt < 0) {
			pthread_mutex_unlock(&tree_mu);
			errlog("ingest/%s: unknown file type: the name must end in .csv, .tsv, .txt, .jsonl, .ndjson, .fvecs, .bvecs or .npy",
			       name);
			fuse_reply_err(req, EINVAL);
			return;
		}
		n = find_name(parent, name);
		if (n && (fi->flags & O_EXCL)) {
			pthread_mutex_unlock(&tree_mu);
			fuse_reply_err(req, EEXIST);
			return;
		}
		if (!n) {
			n = new_node(K_INGEST_FILE, parent, name);
			if (n && !(n->ing = ingest_new(mnt, name, fmt))) {
				maybe_free(n);
				n = NULL;
			}
			if (!n) {
				pthread_mutex_unlock(&tree_mu);
				fuse_reply_err(req, ENOMEM);
				return;
			}
			link_name(n);
		}
	} else if (p->kind == K_SESSION && !strcmp(name, "in")) {
		int err;
		n = child_locked(p, name, &err);
		if (!n) {
			pthread_mutex_unlock(&tree_mu);
			fuse_reply_err(req, err);
			return;
		}
	} else {
		char path[600];
		kind_path(p, path, sizeof path);
		pthread_mutex_unlock(&tree_mu);
		if (p->kind == K_GEN || p->kind == K_GENS) {
			errlog("%s/%s: generations are read-only", path, name);
			fuse_reply_err(req, EACCES);
		} else if (p->kind == K_RECORDS) {
			errlog("records/%s: records are made by writing files into ingest/", name);
			fuse_reply_err(req, EPERM);
		} else if (p->kind == K_QUERY) {
			errlog("query/%s: make a session with mkdir query/ID", name);
			fuse_reply_err(req, EPERM);
		} else if (p->kind == K_SESSION) {
			errlog("%s/%s: a session holds only in, out, out.json and stats", path, name);
			fuse_reply_err(req, EPERM);
		} else {
			errlog("%s%s: files cannot be created here (write into ingest/)",
			       p->kind == K_ROOT ? "" : path, name);
			fuse_reply_err(req, p->kind == K_ROOT ? EPERM : ENOTDIR);
		}
		return;
	}
	n->nlookup++;
	n->opens++;
	pthread_mutex_unlock(&tree_mu);
	struct stat st;
	int rc = open_node(n, fi, &h);
	if (rc == 0) {
		rc = node_attr(n, &st);
		if (rc)
			handle_free(h);
	}
	if (rc) {
		undo_create(n);
		fuse_reply_err(req, -rc);
		return;
	}
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = n->ino;
	e.attr = st;
	if (fuse_reply_create(req, &e, fi) != 0) {
		handle_free(h);
		undo_create(n);
	}
}

/* ---------------------------------------------------------------- directories */

typedef struct dent {
	char *name;
	fuse_ino_t ino;
	mode_t type;
} dent;

typedef struct rec_mark {
	uint64_t off;
	size_t len;
	char key[VECFS_KEY_MAX + 1];
} rec_mark;

typedef struct dirh {
	node *n;
	pthread_mutex_t mu;
	dent *ents;
	size_t count, cap;
	/* records/: the entries of the last reply, to resume where the kernel
	 * stopped consuming them */
	rec_mark anchor;   /* the entry before the last reply (off 2 = none) */
	rec_mark *batch;
	size_t nbatch, capbatch;
} dirh;

static int add_dent(dirh *d, const char *name, fuse_ino_t ino, mode_t type)
{
	if (d->count == d->cap) {
		size_t nc = d->cap ? d->cap * 2 : 16;
		dent *ne = realloc(d->ents, nc * sizeof *ne);
		if (!ne)
			return -ENOMEM;
		d->ents = ne;
		d->cap = nc;
	}
	d->ents[d->count].name = strdup(name);
	if (!d->ents[d->count].name)
		return -ENOMEM;
	d->ents[d->count].ino = ino;
	d->ents[d->count].type = type;
	d->count++;
	return 0;
}

static fuse_ino_t pseudo_ino(const char *name, size_t len, fuse_ino_t parent)
{
	uint64_t h = 1469598103934665603ULL ^ parent;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
	return (fuse_ino_t)((h >> 2) | (1ULL << 62));
}

static int snapshot_dir(dirh *d)
{
	node *n = d->n;
	int rc = 0;
	char num[32];
	rc |= add_dent(d, ".", n->ino, S_IFDIR);
	rc |= add_dent(d, "..", n->parent ? n->parent : K_ROOT, S_IFDIR);
	switch (n->kind) {
	case K_ROOT:
		for (size_t i = 0; i < NELEM(root_entries); i++) {
			int k = root_entries[i].kind;
			int dir = k == K_INGEST || k == K_RECORDS || k == K_QUERY || k == K_GENS;
			rc |= add_dent(d, root_entries[i].name, (fuse_ino_t)k, dir ? S_IFDIR : S_IFREG);
		}
		break;
	case K_INGEST:
	case K_QUERY:
		pthread_mutex_lock(&tree_mu);
		for (node *c = children[n->ino]; c; c = c->sib_next)
			rc |= add_dent(d, c->name, c->ino, c->kind == K_SESSION ? S_IFDIR : S_IFREG);
		pthread_mutex_unlock(&tree_mu);
		break;
	case K_SESSION:
		for (size_t i = 0; i < NELEM(session_entries); i++)
			rc |= add_dent(d, session_entries[i].name,
				       pseudo_ino(session_entries[i].name, strlen(session_entries[i].name), n->ino),
				       S_IFREG);
		break;
	case K_GEN:
		for (size_t i = 0; i < NELEM(gen_entries); i++)
			rc |= add_dent(d, gen_entries[i].name,
				       pseudo_ino(gen_entries[i].name, strlen(gen_entries[i].name), n->ino),
				       S_IFREG);
		break;
	case K_GENS: {
		size_t total = 0, cap = 64;
		uint64_t *ids = NULL;
		if (vecfs_active(mnt->store))
			rc |= add_dent(d, "active", K_ACTIVE, S_IFLNK);
		for (;;) {
			free(ids);
			ids = malloc(cap * sizeof *ids);
			if (!ids)
				return -ENOMEM;
			int r = vecfs_gen_list(mnt->store, ids, cap, &total);
			if (r) {
				free(ids);
				return r;
			}
			if (total <= cap)
				break;
			cap = total + 16;
		}
		for (size_t i = 0; i < total; i++) {
			int l = snprintf(num, sizeof num, "%llu", (unsigned long long)ids[i]);
			rc |= add_dent(d, num, pseudo_ino(num, (size_t)l, n->ino), S_IFDIR);
		}
		free(ids);
		pthread_mutex_lock(&tree_mu);
		for (node *c = children[n->ino]; c; c = c->sib_next)
			rc |= add_dent(d, c->name, c->ino, S_IFLNK);
		pthread_mutex_unlock(&tree_mu);
		break;
	}
	}
	return rc ? -ENOMEM : 0;
}

static void dirh_free(dirh *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->count; i++)
		free(d->ents[i].name);
	free(d->ents);
	free(d->batch);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	node *n = pin(ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = 0;
	dirh *d = NULL;
	if (n->kind != K_ROOT && n->kind != K_INGEST && n->kind != K_RECORDS && n->kind != K_QUERY &&
	    n->kind != K_GENS && n->kind != K_SESSION && n->kind != K_GEN)
		rc = -ENOTDIR;
	else if (n->kind == K_GEN && !gen_exists(mnt->store, n->gen))
		rc = -ENOENT;
	else if (!(d = calloc(1, sizeof *d)))
		rc = -ENOMEM;
	if (rc == 0) {
		d->n = n;
		pthread_mutex_init(&d->mu, NULL);
		d->anchor.off = 2;
		if (n->kind != K_RECORDS)
			rc = snapshot_dir(d);
	}
	if (rc) {
		dirh_free(d);
		unpin(n);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uintptr_t)d;
	if (fuse_reply_open(req, fi) != 0) {
		dirh_free(d);
		unpin(n);
	}
}

typedef struct rd_ctx {
	fuse_req_t req;
	dirh *d;
	char *buf;
	size_t size, used;
	uint64_t off;      /* offset of the last entry added */
	fuse_ino_t parent;
	int full;
} rd_ctx;

static int add_entry(rd_ctx *c, const char *name, fuse_ino_t ino, mode_t type, uint64_t off)
{
	struct stat st;
	memset(&st, 0, sizeof st);
	st.st_ino = ino;
	st.st_mode = type;
	size_t need = fuse_add_direntry(c->req, NULL, 0, name, NULL, 0);
	if (c->used + need > c->size) {
		c->full = 1;
		return 0;
	}
	fuse_add_direntry(c->req, c->buf + c->used, c->size - c->used, name, &st, (off_t)off);
	c->used += need;
	return 1;
}

static int rec_cb(void *arg, const char *key, size_t klen)
{
	rd_ctx *c = arg;
	char name[VECFS_KEY_MAX + 1];
	if (klen > VECFS_KEY_MAX)
		return 0;
	memcpy(name, key, klen);
	name[klen] = 0;
	if (!add_entry(c, name, pseudo_ino(key, klen, c->parent), S_IFREG, c->off + 1))
		return 1;
	c->off++;
	dirh *d = c->d;
	if (d->nbatch == d->capbatch) {
		size_t nc = d->capbatch ? d->capbatch * 2 : 64;
		rec_mark *nb = realloc(d->batch, nc * sizeof *nb);
		if (!nb)
			return 1;
		d->batch = nb;
		d->capbatch = nc;
	}
	rec_mark *m = &d->batch[d->nbatch++];
	m->off = c->off;
	m->len = klen;
	memcpy(m->key, key, klen);
	return 0;
}

typedef struct skip_ctx {
	uint64_t left;
	rec_mark *m;
} skip_ctx;

static int skip_cb(void *arg, const char *key, size_t klen)
{
	skip_ctx *s = arg;
	if (klen > VECFS_KEY_MAX)
		return 0;
	memcpy(s->m->key, key, klen);
	s->m->len = klen;
	return --s->left == 0;
}

static void readdir_records(fuse_req_t req, dirh *d, rd_ctx *c, uint64_t off)
{
	/* offsets: "." 1, ".." 2, the i-th key (from 0) 3 + i */
	rec_mark start;
	int rc = 0;
	c->parent = d->n->ino;
	if (off < 1 && !add_entry(c, ".", d->n->ino, S_IFDIR, 1))
		return;
	if (off < 2 && !add_entry(c, "..", K_ROOT, S_IFDIR, 2))
		return;
	if (off <= 2) {
		start.off = 2;
		start.len = 0;
	} else if (off == d->anchor.off) {
		start = d->anchor;
	} else {
		size_t i;
		for (i = 0; i < d->nbatch; i++)
			if (d->batch[i].off == off)
				break;
		if (i < d->nbatch) {
			start = d->batch[i];
		} else {
			/* a seek elsewhere: count keys from the start */
			skip_ctx s = {off - 2, &start};
			start.len = 0;
			rc = vecfs_keys(mnt->store, NULL, 0, (size_t)-1, skip_cb, &s);
			if (rc < 0 || s.left) {
				c->used = 0; /* past the end */
				return;
			}
			start.off = off;
		}
	}
	d->anchor = start;
	d->nbatch = 0;
	c->off = start.off;
	rc = vecfs_keys(mnt->store, start.off > 2 ? start.key : NULL, start.off > 2 ? start.len : 0,
			(size_t)-1, rec_cb, c);
	if (rc < 0 && c->used == 0) {
		fuse_reply_err(req, -rc);
		c->full = -1; /* answered */
	}
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)ino;
	dirh *d = (dirh *)(uintptr_t)fi->fh;
	rd_ctx c;
	memset(&c, 0, sizeof c);
	c.req = req;
	c.d = d;
	c.size = size;
	c.buf = malloc(size ? size : 1);
	if (!c.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&d->mu);
	if (d->n->kind == K_RECORDS) {
		readdir_records(req, d, &c, (uint64_t)off);
	} else {
		for (size_t i = (size_t)off; i < d->count; i++)
			if (!add_entry(&c, d->ents[i].name, d->ents[i].ino, d->ents[i].type, i + 1))
				break;
	}
	pthread_mutex_unlock(&d->mu);
	if (c.full != -1)
		fuse_reply_buf(req, c.buf, c.used);
	free(c.buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	dirh *d = (dirh *)(uintptr_t)fi->fh;
	node *n = d->n;
	dirh_free(d);
	unpin(n);
	fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct statvfs sv;
	if (statvfs(mnt->store_dir, &sv) != 0)
		memset(&sv, 0, sizeof sv);
	sv.f_namemax = 255;
	fuse_reply_statfs(req, &sv);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	/* write errors must reach write()/close(): no writeback cache */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	conn->want &= ~(unsigned)FUSE_CAP_CACHE_SYMLINKS;
	/* only out is cached, and push_out() says when it changes */
	cache_out = cache_out_wanted && (conn->capable & FUSE_CAP_EXPLICIT_INVAL_DATA);
	if (cache_out) {
		conn->want |= FUSE_CAP_EXPLICIT_INVAL_DATA;
		conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	}
}

void tree_set_session(struct fuse_session *se, int want_cache_out, int passthrough)
{
	struct rlimit rl;
	tree_se = se;
	cache_out_wanted = want_cache_out;
	passthrough_out = passthrough;
	/* a backing file is a descriptor held for the session's life: leave
	 * at least half the daemon's descriptors, and 256, to everything else */
	out_files_max = 0;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 512) {
		rlim_t spare = (rl.rlim_cur - 256) / 2;
		out_files_max = spare < (1u << 20) ? (unsigned)spare : 1u << 20;
	}
}

/* ---------------------------------------------------------------- setup */

void tree_init(fs_mount *m)
{
	mnt = m;
	my_uid = getuid();
	my_gid = getgid();
	static const struct {
		int kind;
		const char *name;
		int parent;
	} fx[] = {
		{K_ROOT, "", 0},           {K_README, "README", K_ROOT}, {K_CONFIG, "config", K_ROOT},
		{K_STATS, "stats", K_ROOT}, {K_ERRORS, "errors", K_ROOT}, {K_CTL, "ctl", K_ROOT},
		{K_BACKUP, "backup", K_ROOT}, {K_INGEST, "ingest", K_ROOT}, {K_RECORDS, "records", K_ROOT},
		{K_QUERY, "query", K_ROOT}, {K_GENS, "generations", K_ROOT}, {K_ACTIVE, "active", K_GENS},
	};
	for (size_t i = 0; i < NELEM(fx); i++) {
		node *n = &fixed[fx[i].kind];
		memset(n, 0, sizeof *n);
		n->ino = (fuse_ino_t)fx[i].kind;
		n->kind = fx[i].kind;
		n->name = (char *)fx[i].name;
		n->namelen = strlen(fx[i].name);
		n->parent = (fuse_ino_t)fx[i].parent;
	}
	tab_grow(&inos);
	tab_grow(&names);
}

void tree_destroy(void)
{
	pthread_mutex_lock(&tree_mu);
	for (size_t i = 0; i < inos.cap; i++) {
		node *n = inos.slot[i];
		while (n) {
			node *nx = n->next[BY_INO];
			node_destroy(n);
			n = nx;
		}
		inos.slot[i] = NULL;
	}
	free(inos.slot);
	free(names.slot);
	inos = (table){.by = BY_INO};
	names = (table){.by = BY_NAME};
	pthread_mutex_unlock(&tree_mu);
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.create = op_create,
};
