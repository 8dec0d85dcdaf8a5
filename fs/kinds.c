/*
 * fs/kinds.c - one row for each kind of file under the mount (kinds.h).
 *
 * The modes are what the kernel enforces (default_permissions): only the
 * owner writes anything or reads backup, errors, records/, ingest/ and
 * query/; README, stats, config and generations/ are readable by all
 * (other users reach them only with allow_other).
 */
#include "kinds.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ahead.h"
#include "control.h"
#include "daemon.h"
#include "errors.h"
#include "generations.h"
#include "render.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define KIND(k) static const fs_kind kind_##k

#define DIR_MODE(perm) (S_IFDIR | (perm))
#define REG_MODE(perm) (S_IFREG | (perm))
#define LNK_MODE (S_IFLNK | 0777)

/* ---------------------------------------------------------------- shared by several kinds */

/* When the store was made, or the configuration, the records or the
 * generations last changed. */
static uint64_t time_created(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	return sa->created_ns;
}

static uint64_t time_gens(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	return fs_content_time(dm, n, 0, sa->gens_ns);
}

static uint64_t time_records(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	return sa->records_ns;
}

/* Changes only with a commit, which changes the store's version. */
static uint64_t version_snapshot(fs_daemon *dm, node *n)
{
	return vecfs_snapshot(dm->store);
}

/* The fixed entries of a directory (the rows whose parent it is), in the
 * order of their kinds: the fixed nodes' own inodes, else an inode for the
 * listing (fs_listed_ino()). */
static int list_fixed(fs_daemon *dm, node *n, fs_dir_add add, void *d)
{
	int rc = 0;
	for (int k = K_NONE + 1; k < K_COUNT; k++) {
		const fs_kind *r = fs_kind_row(k);
		if (r->parent != n->kind || !r->name)
			continue;
		fuse_ino_t ino = k <= FIXED_MAX ? (fuse_ino_t)k : fs_listed_ino(r->name, strlen(r->name), n->ino);
		rc |= add(d, r->name, ino, r->mode & S_IFMT);
	}
	return rc ? -ENOMEM : 0;
}

/* A file linked in a directory (KF_LINKED), by its name. */
static node *lookup_linked(fs_daemon *dm, node *p, const char *name, int *err)
{
	return fs_find_name(dm, p->ino, name);
}

/* The files linked in a directory (KF_LINKED). */
static int list_linked(fs_daemon *dm, node *n, fs_dir_add add, void *d)
{
	int rc = 0;
	pthread_mutex_lock(&dm->tree.mu);
	for (node *c = dm->tree.children[n->ino]; c; c = c->sib_next)
		rc |= add(d, c->name, c->ino, kind_of(c)->mode & S_IFMT);
	pthread_mutex_unlock(&dm->tree.mu);
	return rc ? -ENOMEM : 0;
}

/* ---------------------------------------------------------------- the root and its files */

KIND(NONE) = {0};

static int render_readme_file(fs_daemon *dm, node *n, sbuf *b)
{
	fs_render_readme(b);
	return b->oom ? -ENOMEM : 0;
}

/* README never changes. */
static uint64_t version_readme(fs_daemon *dm, node *n)
{
	return 1;
}

static int render_config_file(fs_daemon *dm, node *n, sbuf *b)
{
	return fs_render_config(dm->store, b);
}

static uint64_t time_config(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	return sa->config_ns;
}

static int render_stats_file(fs_daemon *dm, node *n, sbuf *b)
{
	fs_loop_stats ls;
	int rc = fs_render_stats(dm->store, b);
	if (rc == 0) {
		fs_sb_printf(b, "last_delete = %llu\n", (unsigned long long)atomic_load(&dm->last_delete));
		rc = b->oom ? -ENOMEM : 0;
	}
	if (rc == 0 && fs_fc_loop_counts(dm->fuse, &ls)) {
		fs_sb_printf(b, "queries_searched_ahead = %llu\n", (unsigned long long)fs_ahead_taken(dm->ahead));
		rc = b->oom ? -ENOMEM : 0;
	}
	return rc;
}

static int render_errors(fs_daemon *dm, node *n, sbuf *b)
{
	size_t len;
	char *p = fs_errors_render(&dm->errors, &len);
	if (!p)
		return -ENOMEM;
	fs_sb_add(b, p, len);
	free(p);
	return b->oom ? -ENOMEM : 0;
}

static int size_errors(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	*size = fs_errors_size(&dm->errors, NULL);
	return 0;
}

/* Its last line. */
static uint64_t time_errors(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	uint64_t t = 0;
	fs_errors_size(&dm->errors, &t);
	return t ? t : dm->mount_ns;
}

static int render_ctl(fs_daemon *dm, node *n, sbuf *b)
{
	return fs_ctl_render(dm, b);
}

/* What an open now would stream. */
static int size_backup(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	*size = sa->backup_bytes;
	return 0;
}

/* Every commit changes it: seen by the store's version. */
static uint64_t time_backup(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	uint64_t m = sa->records_ns > sa->config_ns ? sa->records_ns : sa->config_ns;
	return fs_content_time(dm, n, vecfs_snapshot(dm->store), m > sa->gens_ns ? m : sa->gens_ns);
}

/* delete reads empty. */
static int size_empty(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	*size = 0;
	return 0;
}

static int size_export(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	*size = sa->export_bytes;
	return 0;
}

KIND(ROOT) = {
	.name = "", .parent = K_NONE, .mode = DIR_MODE(0755),
	.flags = KF_STORE_ATTRS | KF_ATTRS_KEPT | KF_ENTRY_KEPT,
	.time = time_created, .list = list_fixed,
	.dops = &fs_root_dir_ops,
};
KIND(README) = {
	.name = "README", .parent = K_ROOT, .mode = REG_MODE(0444),
	.flags = KF_READ | KF_STORE_ATTRS | KF_ENTRY_KEPT,
	.render = render_readme_file, .version = version_readme, .time = time_created,
};
KIND(CONFIG) = {
	.name = "config", .parent = K_ROOT, .mode = REG_MODE(0644),
	.flags = KF_READ | KF_WRITE | KF_STORE_ATTRS | KF_ENTRY_KEPT,
	.render = render_config_file, .version = version_snapshot, .time = time_config,
	.fops = &fs_config_file_ops,
};
KIND(STATS) = {
	.name = "stats", .parent = K_ROOT, .mode = REG_MODE(0444),
	.flags = KF_READ | KF_ENTRY_KEPT,
	.render = render_stats_file,
};
KIND(ERRORS) = {
	.name = "errors", .parent = K_ROOT, .mode = REG_MODE(0400),
	.flags = KF_READ | KF_ENTRY_KEPT,
	.render = render_errors, .size = size_errors, .time = time_errors,
	.fops = &fs_errors_file_ops,
};
KIND(CTL) = {
	.name = "ctl", .parent = K_ROOT, .mode = REG_MODE(0600),
	.flags = KF_READ | KF_WRITE | KF_ENTRY_KEPT,
	.render = render_ctl,
	.fops = &fs_ctl_file_ops,
};
KIND(BACKUP) = {
	.name = "backup", .parent = K_ROOT, .mode = REG_MODE(0400),
	.flags = KF_READ | KF_STORE_ATTRS | KF_ENTRY_KEPT,
	.size = size_backup, .time = time_backup,
	.fops = &fs_backup_file_ops,
};
KIND(DELETE) = {
	.name = "delete", .parent = K_ROOT, .mode = REG_MODE(0600),
	.flags = KF_READ | KF_WRITE | KF_STORE_ATTRS | KF_ENTRY_KEPT,
	.size = size_empty, .time = time_created,
	.fops = &fs_delete_file_ops,
};
KIND(EXPORT) = {
	.name = "export.jsonl", .parent = K_ROOT, .mode = REG_MODE(0400),
	.flags = KF_READ | KF_STORE_ATTRS | KF_ENTRY_KEPT,
	.size = size_export, .time = time_records,
	.fops = &fs_export_file_ops,
};

/* ---------------------------------------------------------------- ingest/ */

static int size_ingest_file(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	*size = fs_ingest_size(n->ing);
	return 0;
}

KIND(INGEST) = {
	.name = "ingest", .parent = K_ROOT, .mode = DIR_MODE(0700),
	.flags = KF_ATTRS_KEPT | KF_ENTRY_KEPT,
	.list = list_linked,
	.lookup = lookup_linked,
	.dops = &fs_ingest_dir_ops,
};
KIND(INGEST_FILE) = {
	.parent = K_INGEST, .mode = REG_MODE(0200),
	.flags = KF_WRITE | KF_LINKED,
	.size = size_ingest_file,
	.fops = &fs_ingest_file_ops,
};

/* ---------------------------------------------------------------- records/ */

static int render_record(fs_daemon *dm, node *n, sbuf *b)
{
	float *vec = malloc(sizeof(float) * VECFS_DIM_MAX);
	uint32_t dim = 0;
	char num[40];
	if (!vec)
		return -ENOMEM;
	int rc = vecfs_get(dm->store, n->name, n->namelen, vec, VECFS_DIM_MAX, &dim, NULL, 0, NULL);
	if (rc == 0) {
		fs_sb_reserve(b, (size_t)dim * 16 + 1);
		for (uint32_t i = 0; i < dim; i++) {
			int len = vecfs_format_float(num, sizeof num, vec[i]);
			if (i)
				fs_sb_add(b, " ", 1);
			fs_sb_add(b, num, (size_t)len);
		}
		fs_sb_add(b, "\n", 1);
		if (b->oom)
			rc = -ENOMEM;
	}
	free(vec);
	return rc;
}

/* A record that fails its checksum is there, damaged: reading it fails
 * with EIO, and rm (or ctl salvage) removes it. */
static int size_record(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	int rc = fs_render_size(dm, n, size);
	return rc == -EIO ? 0 : rc;
}

/* records/KEY: a node for any key, which getattr and open look up in
 * the store. */
static node *lookup_record(fs_daemon *dm, node *p, const char *name, int *err)
{
	node *n = fs_find_name(dm, p->ino, name);
	if (!n && (n = fs_new_node(dm, K_RECORD, p->ino, name)))
		fs_link_name(dm, n);
	if (!n)
		*err = ENOMEM;
	return n;
}

static uint64_t time_record(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	uint64_t t = 0;
	return vecfs_record_time(dm->store, n->name, n->namelen, &t) == 0 ? t : dm->mount_ns;
}

KIND(RECORDS) = {
	.name = "records", .parent = K_ROOT, .mode = DIR_MODE(0700),
	.flags = KF_STORE_ATTRS | KF_ATTRS_KEPT | KF_ENTRY_KEPT,
	.time = time_records,
	.lookup = lookup_record,
	.dops = &fs_records_dir_ops,
};
KIND(RECORD) = {
	.parent = K_RECORDS, .mode = REG_MODE(0400),
	.flags = KF_READ,
	.render = render_record, .version = version_snapshot, .size = size_record,
	.time = time_record,
};

/* ---------------------------------------------------------------- query/ */

/* What was written (a read returns it), so that O_APPEND writes append. */
static int size_qin(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	*size = fs_qs_in_size(n->session->qs);
	return 0;
}

static int render_qin(fs_daemon *dm, node *n, sbuf *b)
{
	return fs_qs_in_render(n->session->qs, b);
}

/* The session's results: which of them a file of the session shows. */
static int results_of(const node *n)
{
	return n->kind == K_QOUT ? QS_OUT : n->kind == K_QJSON ? QS_JSON : QS_STATS;
}

static int render_results(fs_daemon *dm, node *n, sbuf *b)
{
	return fs_qs_render_into(n->session->qs, results_of(n), b);
}

static int size_results(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	if (n->kind == K_QOUT) /* before the size: see fs_push_out() */
		atomic_store(&n->session->out_attrs, 1);
	*size = fs_qs_size(n->session->qs, results_of(n));
	return 0;
}

/* The session's last query. */
static uint64_t time_session_file(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	return fs_content_time(dm, n->session, 0, dm->mount_ns);
}

KIND(QUERY) = {
	.name = "query", .parent = K_ROOT, .mode = DIR_MODE(0700),
	.flags = KF_ATTRS_KEPT | KF_ENTRY_KEPT,
	.list = list_linked,
	.lookup = lookup_linked,
	.dops = &fs_query_dir_ops,
};
KIND(SESSION) = {
	.parent = K_QUERY, .mode = DIR_MODE(0700),
	.flags = KF_ATTRS_KEPT | KF_ENTRY_KEPT | KF_LINKED,
	.list = list_fixed,
	.dops = &fs_session_dir_ops,
};
KIND(QIN) = {
	.name = "in", .parent = K_SESSION, .mode = REG_MODE(0600),
	.flags = KF_READ | KF_WRITE | KF_ENTRY_KEPT,
	.render = render_qin, .size = size_qin, .time = time_session_file,
	.fops = &fs_query_in_file_ops,
};
KIND(QOUT) = {
	.name = "out", .parent = K_SESSION, .mode = REG_MODE(0400),
	.flags = KF_READ | KF_ENTRY_KEPT,
	.render = render_results, .size = size_results, .time = time_session_file,
	.fops = &fs_results_file_ops,
};
KIND(QJSON) = {
	.name = "out.json", .parent = K_SESSION, .mode = REG_MODE(0400),
	.flags = KF_READ | KF_ENTRY_KEPT,
	.render = render_results, .size = size_results, .time = time_session_file,
	.fops = &fs_results_file_ops,
};
KIND(QSTATS) = {
	.name = "stats", .parent = K_SESSION, .mode = REG_MODE(0400),
	.flags = KF_READ | KF_ENTRY_KEPT,
	.render = render_results, .size = size_results, .time = time_session_file,
	.fops = &fs_results_file_ops,
};

/* ---------------------------------------------------------------- generations/ */

/* The generations (an entry each), active while there is one, and the
 * symlinks made while flipping it. */
static int list_gens(fs_daemon *dm, node *n, fs_dir_add add, void *d)
{
	size_t total = 0, cap = 64;
	uint64_t *ids = NULL;
	char num[32];
	int rc = 0;
	if (vecfs_active(dm->store))
		rc |= add(d, fs_kind_row(K_ACTIVE)->name, K_ACTIVE, fs_kind_row(K_ACTIVE)->mode & S_IFMT);
	for (;;) {
		free(ids);
		ids = malloc(cap * sizeof *ids);
		if (!ids)
			return -ENOMEM;
		int r = vecfs_gen_list(dm->store, ids, cap, &total);
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
		rc |= add(d, num, fs_listed_ino(num, (size_t)l, n->ino), fs_kind_row(K_GEN)->mode & S_IFMT);
	}
	free(ids);
	return list_linked(dm, n, add, d) || rc ? -ENOMEM : 0;
}

/* generations/GEN and the symlinks made while flipping active. */
static node *lookup_gens(fs_daemon *dm, node *p, const char *name, int *err)
{
	uint64_t gen;
	node *n = fs_find_name(dm, p->ino, name);
	if (n)
		return n;
	if (fs_gen_parse_name(name, &gen))
		return NULL;
	if ((n = fs_new_node(dm, K_GEN, p->ino, name))) {
		n->gen = gen;
		fs_link_name(dm, n);
	} else {
		*err = ENOMEM;
	}
	return n;
}

/* The generation's target. */
static int size_active(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	char t[32];
	uint64_t a = vecfs_active(dm->store);
	if (!a)
		return -ENOENT;
	*size = (uint64_t)snprintf(t, sizeof t, "%llu", (unsigned long long)a);
	return 0;
}

static int size_tmplink(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	*size = strlen(n->target);
	return 0;
}

static int readlink_active(fs_daemon *dm, node *n, char **target)
{
	uint64_t a = vecfs_active(dm->store);
	if (!a)
		return -ENOENT;
	return asprintf(target, "%llu", (unsigned long long)a) < 0 ? -ENOMEM : 0;
}

static int readlink_tmplink(fs_daemon *dm, node *n, char **target)
{
	pthread_mutex_lock(&dm->tree.mu);
	*target = strdup(n->target);
	pthread_mutex_unlock(&dm->tree.mu);
	return *target ? 0 : -ENOMEM;
}

/* A generation's directory is there while the generation is. */
static int size_gen(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	*size = 0;
	return fs_gen_exists(dm->store, n->gen) ? 0 : -ENOENT;
}

static int list_gen(fs_daemon *dm, node *n, fs_dir_add add, void *d)
{
	return fs_gen_exists(dm->store, n->gen) ? list_fixed(dm, n, add, d) : -ENOENT;
}

/* When the generation was made (when the daemon mounted, if not known). */
static uint64_t gen_made(fs_daemon *dm, node *n)
{
	vecfs_gen_info gi;
	return vecfs_gen_info_get(dm->store, n->gen, &gi) == 0 ? gi.created * 1000000000u : dm->mount_ns;
}

static uint64_t time_gen(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	return gen_made(dm, n);
}

/* meta, clusters, progress: what the daemon saw change since it was made. */
static uint64_t time_gen_seen(fs_daemon *dm, node *n, const vecfs_attrs *sa)
{
	return fs_content_time(dm, n, 0, gen_made(dm, n));
}

static int render_gmeta(fs_daemon *dm, node *n, sbuf *b)
{
	return fs_gen_render(dm, n->gen, GF_META, b);
}

static int render_gcent(fs_daemon *dm, node *n, sbuf *b)
{
	return fs_gen_render(dm, n->gen, GF_CENTROIDS, b);
}

/* A ready generation's centroids never change. */
static uint64_t version_gcent(fs_daemon *dm, node *n)
{
	vecfs_gen_info gi;
	if (vecfs_gen_info_get(dm->store, n->gen, &gi) == 0 && gi.state == VECFS_GEN_READY)
		return (UINT64_C(1) << 63) | gi.created;
	return vecfs_snapshot(dm->store);
}

/* Known without rendering it. */
static int size_gcent(fs_daemon *dm, node *n, const vecfs_attrs *sa, uint64_t *size)
{
	int64_t s = fs_gen_file_size(dm, n->gen, GF_CENTROIDS);
	if (s < 0)
		return (int)s;
	*size = (uint64_t)s;
	return 0;
}

static int render_gclust(fs_daemon *dm, node *n, sbuf *b)
{
	return fs_gen_render(dm, n->gen, GF_CLUSTERS, b);
}

static int render_gprog(fs_daemon *dm, node *n, sbuf *b)
{
	return fs_gen_render(dm, n->gen, GF_PROGRESS, b);
}

KIND(GENS) = {
	.name = "generations", .parent = K_ROOT, .mode = DIR_MODE(0755),
	.flags = KF_STORE_ATTRS | KF_ATTRS_KEPT | KF_ENTRY_KEPT,
	.time = time_gens, .list = list_gens,
	.lookup = lookup_gens,
	.dops = &fs_gens_dir_ops,
};
KIND(ACTIVE) = {
	.name = "active", .parent = K_GENS, .mode = LNK_MODE,
	.flags = KF_STORE_ATTRS,
	.size = size_active, .time = time_gens,
	.readlink = readlink_active,
};
KIND(TMPLINK) = {
	.parent = K_GENS, .mode = LNK_MODE,
	.flags = KF_LINKED,
	.size = size_tmplink,
	.readlink = readlink_tmplink,
};
KIND(GEN) = {
	.parent = K_GENS, .mode = DIR_MODE(0555),
	.size = size_gen, .time = time_gen, .list = list_gen,
	.dops = &fs_gen_dir_ops,
};
KIND(GMETA) = {
	.name = "meta", .parent = K_GEN, .mode = REG_MODE(0444),
	.flags = KF_READ,
	.render = render_gmeta, .time = time_gen_seen,
};
KIND(GCENT) = {
	.name = "centroids.fvecs", .parent = K_GEN, .mode = REG_MODE(0444),
	.flags = KF_READ,
	.render = render_gcent, .version = version_gcent, .size = size_gcent, .time = time_gen,
};
KIND(GCLUST) = {
	.name = "clusters", .parent = K_GEN, .mode = REG_MODE(0444),
	.flags = KF_READ,
	.render = render_gclust, .version = version_snapshot, .time = time_gen_seen,
};
KIND(GPROG) = {
	.name = "progress", .parent = K_GEN, .mode = REG_MODE(0444),
	.flags = KF_READ,
	.render = render_gprog, .time = time_gen_seen,
};

/* ---------------------------------------------------------------- the table */

#define KIND_ROW(k) [K_##k] = &kind_##k,
static const fs_kind *const kinds[] = {[K_NONE] = &kind_NONE, FS_KINDS(KIND_ROW)};
_Static_assert(NELEM(kinds) == K_COUNT, "a row for every kind");

const fs_kind *fs_kind_row(int kind)
{
	return kinds[kind > K_NONE && kind < K_COUNT ? kind : K_NONE];
}

int fs_entry_kind(int dirkind, const char *name)
{
	for (int k = K_NONE + 1; k < K_COUNT; k++)
		if (kinds[k]->parent == dirkind && kinds[k]->name && !strcmp(kinds[k]->name, name))
			return k;
	return 0;
}

int fs_kinds_check(void)
{
	for (int k = K_NONE + 1; k < K_COUNT; k++) {
		const fs_kind *r = kinds[k];
		int fixed = k == K_ROOT || (r->name && r->parent <= FIXED_MAX);
		if (fixed != (k <= FIXED_MAX) || (S_ISDIR(r->mode) && !r->list && k != K_RECORDS) ||
		    (r->dops && !S_ISDIR(r->mode)) || (S_ISLNK(r->mode) != !!r->readlink))
			return k;
	}
	return 0;
}
