/*
 * test_powerloss.c - power loss replayed: a workload's writes to a store's
 * files, and the files made and renamed there, are logged in order, with
 * every point at which some of them became durable (an fsync or fdatasync
 * of the file returned, an O_DSYNC write returned; a name, once the
 * directory was fsynced); then
 * for each such point the files are rebuilt as a power loss there could
 * leave them (what was durable, plus none, all, a random subset or a torn
 * prefix of the writes in flight) and opened as the daemon would open them
 * after the crash.  Each image must open, verify, hold every operation
 * acknowledged before the point and be the state after some prefix of the
 * operations (an operation is all there or not at all), and take a write
 * and a search.
 *
 * The file calls LMDB and the store make (open, close, pwrite, write,
 * writev, fsync, fdatasync, ftruncate, msync, rename) are defined here: the executable's
 * definitions take the place of libc's for liblmdb.so too and call libc's
 * through dlsym(RTLD_NEXT).
 *
 * VECFS_POWERLOSS_LONG=1 replays every point (default: a fixed sample when
 * there are many); VECFS_POWERLOSS_SEED=N changes the variants' seed;
 * VECFS_POWERLOSS_DROP_SYNC=N leaves the Nth fdatasync out of the log (its
 * writes count as lost until a later sync): the replay must then fail;
 * VECFS_POWERLOSS_VERBOSE=1 names each image before it is opened (a crash
 * in LMDB says no more than its signal).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PL_SANITIZED 1
#endif
#endif
#ifndef PL_SANITIZED
#define PL_SANITIZED 0
#endif

/* ------------------------------------------------------------ the log */

/* A file's name (EV_CREATE, EV_RENAME) is durable once its directory was
 * synced: a name in the store directory itself, after an fsync of it. */
enum { EV_WRITE, EV_SYNC, EV_TRUNC, EV_CREATE, EV_RENAME, EV_DIRSYNC };
#define PL_FILES 8
#define PL_FDS 4096
#define PL_DIR (-2) /* point_add(): the store directory was synced */

typedef struct ev {
	int kind;
	int file;        /* index into pl_file */
	uint64_t off;    /* EV_WRITE: offset; EV_TRUNC: length */
	uint64_t len;
	size_t data;     /* EV_WRITE: bytes at pl_data + data */
	int dsync;       /* a write on an O_DSYNC/O_SYNC descriptor */
	char name[64];   /* EV_CREATE, EV_RENAME: the file's name from then on */
	long durable;    /* the point that made it durable (-1: none yet) */
} ev;

typedef struct plfile {
	char name[64];
	int created;     /* created by an open of the workload */
	long writes, bytes, syncs, dsync_writes, truncs;
} plfile;

static pthread_mutex_t pl_mu = PTHREAD_MUTEX_INITIALIZER;
static int pl_on;                 /* logging */
static char pl_dir[PATH_MAX];     /* the store directory logged */
static plfile pl_file[PL_FILES];
static int pl_nfile;
static int pl_fd_file[PL_FDS];    /* fd -> file index + 1 (0: not logged) */
static int pl_fd_dsync[PL_FDS];
static int pl_dir_fds[PL_FDS];    /* fds open on the directory itself */
static long pl_dir_syncs, pl_renames;
static char pl_parent[PATH_MAX];  /* a directory whose syncs are counted */
static int pl_parent_fds[PL_FDS];
static long pl_parent_syncs;
static ev *pl_ev;
static size_t pl_nev, pl_cap;
static unsigned char *pl_data;
static size_t pl_ndata, pl_dcap;
static long *pl_point;            /* event index of each durability point */
static size_t pl_npoint, pl_pcap;
static long pl_fdatasyncs;        /* fdatasync calls on logged files */
static long pl_drop_sync;         /* VECFS_POWERLOSS_DROP_SYNC */

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return p;
	size_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	p = realloc(p, c * elem);
	if (!p)
		abort();
	*cap = c;
	return p;
}

/* A durability point at event e (pl_mu held): every earlier write of
 * `file` that is not durable yet becomes durable (-1: only e; PL_DIR: the
 * names made in the store directory). */
static void point_add(size_t e, int file)
{
	long id = (long)pl_npoint;
	pl_point = grow(pl_point, &pl_pcap, pl_npoint + 1, sizeof *pl_point);
	pl_point[pl_npoint++] = (long)e;
	if (file == -1) {
		pl_ev[e].durable = id;
		return;
	}
	for (size_t i = 0; i < e; i++) {
		ev *x = &pl_ev[i];
		if (x->durable >= 0)
			continue;
		if (file == PL_DIR ? (x->kind == EV_CREATE || x->kind == EV_RENAME) &&
				     !strchr(x->name, '/')
				   : (x->kind == EV_WRITE || x->kind == EV_TRUNC) && x->file == file)
			x->durable = id;
	}
}

static size_t ev_add(int kind, int file, uint64_t off, uint64_t len, const void *buf,
		     const struct iovec *iov, int iovcnt)
{
	pl_ev = grow(pl_ev, &pl_cap, pl_nev + 1, sizeof *pl_ev);
	ev *e = &pl_ev[pl_nev];
	memset(e, 0, sizeof *e);
	e->kind = kind;
	e->file = file;
	e->off = off;
	e->len = len;
	e->durable = -1;
	if (kind == EV_WRITE) {
		pl_data = grow(pl_data, &pl_dcap, pl_ndata + len, 1);
		e->data = pl_ndata;
		if (buf) {
			memcpy(pl_data + pl_ndata, buf, len);
		} else {
			size_t at = 0;
			for (int i = 0; i < iovcnt && at < len; i++) {
				size_t c = iov[i].iov_len < len - at ? iov[i].iov_len : len - at;
				memcpy(pl_data + pl_ndata + at, iov[i].iov_base, c);
				at += c;
			}
		}
		pl_ndata += len;
	}
	return pl_nev++;
}

static size_t log_pos(void)
{
	pthread_mutex_lock(&pl_mu);
	size_t n = pl_nev;
	pthread_mutex_unlock(&pl_mu);
	return n;
}

/* ------------------------------------------------------------ the file calls */

static int (*real_open)(const char *, int, ...);
static int (*real_rename)(const char *, const char *);
static int (*real_close)(int);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_msync)(void *, size_t, int);
static off_t (*real_lseek)(int, off_t, int);

__attribute__((constructor)) static void pl_resolve(void)
{
	real_open = (__typeof__(real_open))dlsym(RTLD_NEXT, "open");
	real_close = (__typeof__(real_close))dlsym(RTLD_NEXT, "close");
	real_pwrite = (__typeof__(real_pwrite))dlsym(RTLD_NEXT, "pwrite");
	real_write = (__typeof__(real_write))dlsym(RTLD_NEXT, "write");
	real_writev = (__typeof__(real_writev))dlsym(RTLD_NEXT, "writev");
	real_fsync = (__typeof__(real_fsync))dlsym(RTLD_NEXT, "fsync");
	real_fdatasync = (__typeof__(real_fdatasync))dlsym(RTLD_NEXT, "fdatasync");
	real_ftruncate = (__typeof__(real_ftruncate))dlsym(RTLD_NEXT, "ftruncate");
	real_msync = (__typeof__(real_msync))dlsym(RTLD_NEXT, "msync");
	real_lseek = (__typeof__(real_lseek))dlsym(RTLD_NEXT, "lseek");
	real_rename = (__typeof__(real_rename))dlsym(RTLD_NEXT, "rename");
}

#define RESOLVED(p) do { if (!(p)) pl_resolve(); } while (0)

/* The logged file an fd refers to (pl_mu held), or -1. */
static int fd_file(int fd)
{
	return fd >= 0 && fd < PL_FDS ? pl_fd_file[fd] - 1 : -1;
}

int open(const char *path, int flags, ...)
{
	RESOLVED(real_open);
	mode_t mode = 0;
	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	size_t dl = strlen(pl_dir);
	int logged = __atomic_load_n(&pl_on, __ATOMIC_ACQUIRE) && dl &&
		     !strncmp(path, pl_dir, dl);
	int existed = logged && access(path, F_OK) == 0;
	int fd = real_open(path, flags, mode);
	if (fd >= 0 && fd < PL_FDS && pl_parent[0] && !strcmp(path, pl_parent)) {
		pthread_mutex_lock(&pl_mu);
		pl_parent_fds[fd] = 1;
		pthread_mutex_unlock(&pl_mu);
	}
	if (fd < 0 || fd >= PL_FDS || !logged)
		return fd;
	pthread_mutex_lock(&pl_mu);
	if (path[dl] == '\0') {
		pl_dir_fds[fd] = 1;
	} else if (path[dl] == '/') {
		const char *name = path + dl + 1;
		int f;
		for (f = 0; f < pl_nfile && strcmp(pl_file[f].name, name); f++)
			;
		if (f == pl_nfile && pl_nfile < PL_FILES) {
			snprintf(pl_file[f].name, sizeof pl_file[f].name, "%s", name);
			pl_nfile++;
		}
		if (f < pl_nfile) {
			pl_file[f].created |= !existed;
			if (!existed) {
				size_t e = ev_add(EV_CREATE, f, 0, 0, NULL, NULL, 0);
				snprintf(pl_ev[e].name, sizeof pl_ev[e].name, "%s", name);
			}
			pl_fd_file[fd] = f + 1;
			pl_fd_dsync[fd] = (flags & (O_DSYNC | O_SYNC)) != 0;
		}
	}
	pthread_mutex_unlock(&pl_mu);
	return fd;
}

int close(int fd)
{
	RESOLVED(real_close);
	if (fd >= 0 && fd < PL_FDS) {
		pthread_mutex_lock(&pl_mu);
		pl_fd_file[fd] = 0;
		pl_fd_dsync[fd] = 0;
		pl_dir_fds[fd] = 0;
		pl_parent_fds[fd] = 0;
		pthread_mutex_unlock(&pl_mu);
	}
	return real_close(fd);
}

/* A write of n bytes at off on fd, done: logged if fd is a logged file. */
static void log_write(int fd, off_t off, const void *buf, const struct iovec *iov,
		      int iovcnt, ssize_t n)
{
	if (n <= 0)
		return;
	pthread_mutex_lock(&pl_mu);
	int f = fd_file(fd);
	if (f >= 0 && __atomic_load_n(&pl_on, __ATOMIC_ACQUIRE)) {
		size_t e = ev_add(EV_WRITE, f, (uint64_t)off, (uint64_t)n, buf, iov, iovcnt);
		pl_ev[e].dsync = pl_fd_dsync[fd];
		pl_file[f].writes++;
		pl_file[f].bytes += n;
		if (pl_fd_dsync[fd]) {
			pl_file[f].dsync_writes++;
			point_add(e, -1);
		}
	}
	pthread_mutex_unlock(&pl_mu);
}

static int logged_fd(int fd)
{
	pthread_mutex_lock(&pl_mu);
	int f = __atomic_load_n(&pl_on, __ATOMIC_ACQUIRE) ? fd_file(fd) : -1;
	pthread_mutex_unlock(&pl_mu);
	return f >= 0;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	RESOLVED(real_pwrite);
	ssize_t r = real_pwrite(fd, buf, n, off);
	log_write(fd, off, buf, NULL, 0, r);
	return r;
}

ssize_t write(int fd, const void *buf, size_t n)
{
	RESOLVED(real_write);
	off_t off = logged_fd(fd) ? real_lseek(fd, 0, SEEK_CUR) : 0;
	ssize_t r = real_write(fd, buf, n);
	log_write(fd, off, buf, NULL, 0, r);
	return r;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	RESOLVED(real_writev);
	off_t off = logged_fd(fd) ? real_lseek(fd, 0, SEEK_CUR) : 0;
	ssize_t r = real_writev(fd, iov, cnt);
	log_write(fd, off, NULL, iov, cnt, r);
	return r;
}

/* A sync of fd returned rc. */
static void log_sync(int fd, int rc, int data_only)
{
	if (rc != 0)
		return;
	pthread_mutex_lock(&pl_mu);
	if (fd >= 0 && fd < PL_FDS && pl_parent_fds[fd])
		pl_parent_syncs++;
	int f = __atomic_load_n(&pl_on, __ATOMIC_ACQUIRE) ? fd_file(fd) : -1;
	if (f >= 0) {
		int drop = 0;
		if (data_only)
			drop = ++pl_fdatasyncs == pl_drop_sync;
		size_t e = ev_add(EV_SYNC, f, 0, 0, NULL, NULL, 0);
		pl_file[f].syncs++;
		if (!drop)
			point_add(e, f);
	} else if (__atomic_load_n(&pl_on, __ATOMIC_ACQUIRE) && fd >= 0 && fd < PL_FDS &&
		   pl_dir_fds[fd]) {
		pl_dir_syncs++;
		point_add(ev_add(EV_DIRSYNC, -1, 0, 0, NULL, NULL, 0), PL_DIR);
	}
	pthread_mutex_unlock(&pl_mu);
}

int fsync(int fd)
{
	RESOLVED(real_fsync);
	int rc = real_fsync(fd);
	log_sync(fd, rc, 0);
	return rc;
}

int fdatasync(int fd)
{
	RESOLVED(real_fdatasync);
	int rc = real_fdatasync(fd);
	log_sync(fd, rc, 1);
	return rc;
}

int ftruncate(int fd, off_t len)
{
	RESOLVED(real_ftruncate);
	int rc = real_ftruncate(fd, len);
	if (rc == 0) {
		pthread_mutex_lock(&pl_mu);
		int f = __atomic_load_n(&pl_on, __ATOMIC_ACQUIRE) ? fd_file(fd) : -1;
		if (f >= 0) {
			ev_add(EV_TRUNC, f, (uint64_t)len, 0, NULL, NULL, 0);
			pl_file[f].truncs++;
		}
		pthread_mutex_unlock(&pl_mu);
	}
	return rc;
}

/* A rename within the store directory: the file goes on under its new name
 * (durable with the directory). */
int rename(const char *from, const char *to)
{
	RESOLVED(real_rename);
	int rc = real_rename(from, to);
	size_t dl = strlen(pl_dir);
	if (rc || !__atomic_load_n(&pl_on, __ATOMIC_ACQUIRE) || !dl || strncmp(from, pl_dir, dl) ||
	    strncmp(to, pl_dir, dl) || from[dl] != '/' || to[dl] != '/')
		return rc;
	pthread_mutex_lock(&pl_mu);
	for (int f = 0; f < pl_nfile; f++)
		if (!strcmp(pl_file[f].name, to + dl + 1))
			pl_file[f].name[0] = '\0';
	for (int f = 0; f < pl_nfile; f++) {
		if (strcmp(pl_file[f].name, from + dl + 1))
			continue;
		size_t e = ev_add(EV_RENAME, f, 0, 0, NULL, NULL, 0);
		snprintf(pl_ev[e].name, sizeof pl_ev[e].name, "%s", to + dl + 1);
		snprintf(pl_file[f].name, sizeof pl_file[f].name, "%s", to + dl + 1);
		pl_renames++;
		break;
	}
	pthread_mutex_unlock(&pl_mu);
	return rc;
}

/* Pages written through a map are not in the log: the workload must make
 * none (LMDB without MDB_WRITEMAP writes with pwrite and writev). */
static long pl_msyncs;
int msync(void *addr, size_t len, int flags)
{
	RESOLVED(real_msync);
	if (__atomic_load_n(&pl_on, __ATOMIC_ACQUIRE))
		__atomic_add_fetch(&pl_msyncs, 1, __ATOMIC_RELAXED);
	return real_msync(addr, len, flags);
}

/* ------------------------------------------------------------ the workload */

#define D 8
#define NKEYS 1400

enum { OP_CONFIG, OP_PUT, OP_BATCH, OP_DEL, OP_BUILD, OP_COMPACT, OP_REBALANCE,
       OP_ACTIVATE };
static const char *op_names[] = {"config", "put", "batch", "delete", "build",
				 "compact", "rebalance", "activate"};

typedef struct change {
	uint32_t key;
	int del;
	float vec[D];
} change;

typedef struct op {
	int kind;
	size_t start, ack;  /* events logged when it was called, when it returned */
	size_t first, n;    /* its changes */
	uint64_t active;    /* the active generation after it */
	uint32_t nprobe;    /* the configured nprobe after it */
} op;

typedef struct rec {
	op *ops;
	size_t nops, opcap;
	change *ch;
	size_t nch, chcap;
	uint64_t active;
	uint32_t nprobe;
	unsigned char alive[NKEYS];  /* the recording's own view, to pick deletes */
	uint32_t next_key;
	rng r;
} rec;

static op *op_begin(rec *R, int kind)
{
	R->ops = grow(R->ops, &R->opcap, R->nops + 1, sizeof *R->ops);
	op *o = &R->ops[R->nops];
	memset(o, 0, sizeof *o);
	o->kind = kind;
	o->first = R->nch;
	o->start = log_pos();
	return o;
}

static void op_done(rec *R, op *o)
{
	o->ack = log_pos();
	o->n = R->nch - o->first;
	o->active = R->active;
	o->nprobe = R->nprobe;
	R->nops++;
}

static change *change_add(rec *R, uint32_t key, int del)
{
	R->ch = grow(R->ch, &R->chcap, R->nch + 1, sizeof *R->ch);
	change *c = &R->ch[R->nch++];
	memset(c, 0, sizeof *c);
	c->key = key;
	c->del = del;
	if (!del)
		for (int j = 0; j < D; j++)
			c->vec[j] = (float)(rng_gauss(&R->r) * 3.0 + (key % 5) * 4.0);
	return c;
}

static void key_name(uint32_t k, char *buf)
{
	snprintf(buf, 32, "k%u", k);
}

/* Rows of a put: `fresh` new keys and `over` existing ones rewritten. */
static void rows_pick(rec *R, size_t fresh, size_t over)
{
	for (size_t i = 0; i < fresh && R->next_key < NKEYS; i++)
		change_add(R, R->next_key++, 0);
	for (size_t i = 0; i < over && R->next_key; i++) {
		uint32_t k = (uint32_t)(rng_next(&R->r) % R->next_key);
		if (!R->alive[k])
			continue;
		int dup = 0;
		for (size_t c = R->ops[R->nops].first; c < R->nch; c++)
			dup |= R->ch[c].key == k;
		if (!dup)
			change_add(R, k, 0);
	}
}

static void rows_applied(rec *R, op *o)
{
	for (size_t c = o->first; c < R->nch; c++)
		R->alive[R->ch[c].key] = !R->ch[c].del;
}

static void w_put(rec *R, vecfs *v, size_t fresh, size_t over)
{
	op *o = op_begin(R, OP_PUT);
	rows_pick(R, fresh, over);
	size_t n = R->nch - o->first;
	vecfs_row *rows = calloc(n, sizeof *rows);
	char (*keys)[32] = calloc(n, sizeof *keys);
	assert_non_null(rows);
	assert_non_null(keys);
	for (size_t i = 0; i < n; i++) {
		change *c = &R->ch[o->first + i];
		key_name(c->key, keys[i]);
		rows[i].key = keys[i];
		rows[i].keylen = strlen(keys[i]);
		rows[i].vec = c->vec;
	}
	char err[256] = "";
	int rc = vecfs_put(v, rows, n, D, NULL, err, sizeof err);
	if (rc)
		print_message("put: %s\n", err);
	assert_int_equal(rc, 0);
	rows_applied(R, o);
	op_done(R, o);
	free(rows);
	free(keys);
}

static void w_batch(rec *R, vecfs *v, size_t fresh, size_t over)
{
	op *o = op_begin(R, OP_BATCH);
	rows_pick(R, fresh, over);
	size_t n = R->nch - o->first;
	vecfs_batch *b;
	char err[256] = "";
	assert_int_equal(vecfs_batch_begin(v, D, 0, &b), 0);
	for (size_t i = 0; i < n; i++) {
		change *c = &R->ch[o->first + i];
		char key[32];
		key_name(c->key, key);
		vecfs_row row = {.key = key, .keylen = strlen(key), .vec = c->vec};
		assert_int_equal(vecfs_batch_add(b, &row, NULL, 1, NULL, err, sizeof err), 0);
	}
	int rc = vecfs_batch_commit(b, NULL, err, sizeof err);
	if (rc)
		print_message("batch: %s\n", err);
	assert_int_equal(rc, 0);
	rows_applied(R, o);
	op_done(R, o);
}

static void w_delete(rec *R, vecfs *v, size_t cnt)
{
	for (size_t i = 0; i < cnt; i++) {
		uint32_t k = (uint32_t)(rng_next(&R->r) % R->next_key);
		while (!R->alive[k])
			k = (k + 1) % R->next_key;
		op *o = op_begin(R, OP_DEL);
		change_add(R, k, 1);
		char key[32];
		key_name(k, key);
		assert_int_equal(vecfs_delete(v, key, strlen(key)), 0);
		rows_applied(R, o);
		op_done(R, o);
	}
}

/* A build, or a rebalance (OP_REBALANCE), made active. */
static uint64_t w_generation(rec *R, vecfs *v, int kind)
{
	op *o = op_begin(R, kind);
	char err[256] = "";
	uint64_t gen = 0;
	int rc = kind == OP_REBALANCE ? vecfs_rebalance(v, 1, &gen, NULL, NULL, err, sizeof err)
				      : vecfs_build(v, 1, &gen, NULL, NULL, err, sizeof err);
	if (rc)
		print_message("%s: %s\n", op_names[kind], err);
	assert_int_equal(rc, 0);
	R->active = gen;
	op_done(R, o);
	return gen;
}

static void w_compact(rec *R, vecfs *v)
{
	op *o = op_begin(R, OP_COMPACT);
	char err[256] = "";
	int rc = vecfs_compact(v, NULL, err, sizeof err);
	if (rc)
		print_message("compact: %s\n", err);
	assert_int_equal(rc, 0);
	op_done(R, o);
}

static void w_activate(rec *R, vecfs *v, uint64_t gen)
{
	op *o = op_begin(R, OP_ACTIVATE);
	char err[256] = "";
	assert_int_equal(vecfs_activate(v, gen, err, sizeof err), 0);
	R->active = gen;
	op_done(R, o);
}

static void w_config(rec *R, vecfs *v, uint32_t nprobe, int first)
{
	op *o = op_begin(R, OP_CONFIG);
	vecfs_config c;
	char err[256] = "";
	assert_int_equal(vecfs_config_get(v, &c), 0);
	if (first) {
		c.dim = D;
		c.metric = VECFS_L2;
		c.auto_build = 0;
		c.compact_deltas = UINT32_MAX; /* no maintenance in the background */
		c.rebalance_ratio = 0;
		c.keep_generations = 1000;
		c.nlist = 8;
	}
	c.nprobe = nprobe;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	R->nprobe = nprobe;
	op_done(R, o);
}

/* The workload: puts (new rows and rewrites), a large batch, deletes, a
 * build, puts and deletes as delta postings, a compaction, a rebalance,
 * active flipped back and forth, a configuration change, a second build. */
static void workload(rec *R, vecfs *v)
{
	w_config(R, v, 4, 1);
	for (int i = 0; i < 6; i++)
		w_put(R, v, 80, i ? 10 : 0);
	w_batch(R, v, 300, 20);
	w_delete(R, v, 8);
	uint64_t g1 = w_generation(R, v, OP_BUILD);
	for (int i = 0; i < 5; i++) {
		w_put(R, v, 40, 15);
		w_delete(R, v, 2);
	}
	w_compact(R, v);
	w_put(R, v, 40, 10);
	uint64_t g2 = w_generation(R, v, OP_REBALANCE);
	w_activate(R, v, g1);
	w_put(R, v, 30, 5);
	w_config(R, v, 6, 0);
	w_activate(R, v, g2);
	w_delete(R, v, 4);
	w_batch(R, v, 100, 10);
	w_generation(R, v, OP_BUILD);
	for (int i = 0; i < 4; i++) {
		w_put(R, v, 10, 10);
		w_delete(R, v, 1);
	}
	w_compact(R, v);
}

/* ------------------------------------------------------------ images */

/* A file as a power loss leaves it: its bytes and its name ("": none). */
typedef struct fimg {
	unsigned char *buf;
	size_t len, cap;
	char name[64];
} fimg;

static void fimg_write(fimg *f, uint64_t off, const unsigned char *src, uint64_t len)
{
	if (off + len > f->cap) {
		size_t c = f->cap ? f->cap : 1 << 16;
		while (c < off + len)
			c *= 2;
		f->buf = realloc(f->buf, c);
		assert_non_null(f->buf);
		memset(f->buf + f->cap, 0, c - f->cap);
		f->cap = c;
	}
	memcpy(f->buf + off, src, len);
	if (off + len > f->len)
		f->len = off + len;
}

static void fimg_apply(fimg *files, const ev *e, uint64_t len)
{
	fimg *f = &files[e->file];
	if (e->kind == EV_WRITE) {
		fimg_write(f, e->off, pl_data + e->data, len);
	} else if (e->kind == EV_TRUNC) {
		if (e->off < f->len)
			memset(f->buf + e->off, 0, f->len - e->off);
		if (e->off > f->len) {
			unsigned char zero[4096] = {0};
			for (uint64_t at = f->len; at < e->off; at += sizeof zero)
				fimg_write(f, at, zero, e->off - at < sizeof zero ? e->off - at
										 : sizeof zero);
		}
		f->len = e->off;
	} else if (e->kind == EV_CREATE || e->kind == EV_RENAME) {
		for (int g = 0; g < pl_nfile; g++)
			if (!strcmp(files[g].name, e->name))
				files[g].name[0] = '\0';
		snprintf(f->name, sizeof f->name, "%s", e->name);
	}
}

static void fimg_copy(fimg *dst, const fimg *src)
{
	if (dst->cap < src->cap) {
		dst->buf = realloc(dst->buf, src->cap);
		assert_non_null(dst->buf);
		dst->cap = src->cap;
	}
	if (src->len)
		memcpy(dst->buf, src->buf, src->len);
	if (dst->cap > src->len)
		memset(dst->buf + src->len, 0, dst->cap - src->len);
	dst->len = src->len;
	memcpy(dst->name, src->name, sizeof dst->name);
}

/* The files with a name in the store directory, into dir (emptied). */
static void image_store(const char *dir, const fimg *files)
{
	rm_rf(dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	for (int f = 0; f < pl_nfile; f++) {
		char path[PATH_MAX];
		if (!files[f].name[0] || strchr(files[f].name, '/'))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, files[f].name);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		assert_true(fd >= 0);
		size_t at = 0;
		while (at < files[f].len) {
			ssize_t w = pwrite(fd, files[f].buf + at, files[f].len - at, (off_t)at);
			assert_true(w > 0);
			at += (size_t)w;
		}
		close(fd);
	}
}

/* ------------------------------------------------------------ the check */

typedef struct seen {
	unsigned char alive[NKEYS];
	float x[NKEYS * D];
	char bad[64];       /* a key that is not the workload's */
} seen;

typedef struct keys_arg {
	vecfs *v;
	seen *s;
	int rc;
} keys_arg;

static int keys_fn(void *arg, const char *key, size_t keylen)
{
	keys_arg *a = arg;
	char k[64];
	if (keylen >= sizeof k)
		keylen = sizeof k - 1;
	memcpy(k, key, keylen);
	k[keylen] = 0;
	long i = key_index(k, "k");
	if (i < 0 || i >= NKEYS) {
		snprintf(a->s->bad, sizeof a->s->bad, "%s", k);
		return 0;
	}
	uint32_t dim = 0;
	a->rc = vecfs_get(a->v, k, keylen, a->s->x + (size_t)i * D, D, &dim, NULL, 0, NULL);
	if (a->rc || dim != D)
		return 1;
	a->s->alive[i] = 1;
	return 0;
}

/* The first difference between what the store holds and the state after
 * `k` operations, or 0 when they are equal. */
static int state_diff(const seen *s, const unsigned char *alive, const float *x,
		      uint64_t active, uint32_t nprobe, uint64_t got_active,
		      uint32_t got_nprobe, char *why, size_t wlen)
{
	for (uint32_t i = 0; i < NKEYS; i++) {
		if (s->alive[i] != alive[i]) {
			snprintf(why, wlen, "k%u %s", i, alive[i] ? "missing" : "present");
			return 1;
		}
		if (alive[i] && memcmp(s->x + (size_t)i * D, x + (size_t)i * D, sizeof(float) * D)) {
			snprintf(why, wlen, "k%u has another vector", i);
			return 1;
		}
	}
	if (got_active != active) {
		snprintf(why, wlen, "active %llu, not %llu", (unsigned long long)got_active,
			 (unsigned long long)active);
		return 1;
	}
	if (got_nprobe != nprobe) {
		snprintf(why, wlen, "nprobe %u, not %u", got_nprobe, nprobe);
		return 1;
	}
	return 0;
}

typedef struct check {
	const rec *R;
	const char *dir;
	size_t kmin, kmax;  /* acknowledged operations; operations begun */
	long tamper;        /* >= 0: delete a row of operation `tamper` before reading */
	char why[1024];
	size_t k;           /* the prefix found */
} check;

/* Open the image in c->dir as the daemon would; 0 when it passes every
 * check, else 1 with the reason in c->why. */
static int image_check(check *c)
{
	const rec *R = c->R;
	vecfs *v = NULL;
	char err[256] = "", msg[512] = "";
	int rc = vecfs_open(c->dir, &v, err, sizeof err);
	if (rc) {
		snprintf(c->why, sizeof c->why, "open: %d %s", rc, err);
		return 1;
	}
	if ((rc = vecfs_verify(v, msg, sizeof msg))) {
		snprintf(c->why, sizeof c->why, "verify: %d %s", rc, msg);
		vecfs_close(v);
		return 1;
	}
	if (c->tamper >= 0) {
		const op *o = &R->ops[c->tamper];
		char key[32];
		key_name(R->ch[o->first + o->n / 2].key, key);
		vecfs_delete(v, key, strlen(key));
	}
	seen *s = calloc(1, sizeof *s);
	assert_non_null(s);
	keys_arg ka = {v, s, 0};
	rc = vecfs_keys(v, NULL, 0, SIZE_MAX, keys_fn, &ka);
	vecfs_config cfg;
	int fail = 0;
	if (rc || ka.rc) {
		snprintf(c->why, sizeof c->why, "reading keys: %d %d", rc, ka.rc);
		fail = 1;
	} else if (s->bad[0]) {
		snprintf(c->why, sizeof c->why, "a key never written: %s", s->bad);
		fail = 1;
	} else if (vecfs_config_get(v, &cfg)) {
		snprintf(c->why, sizeof c->why, "config unreadable");
		fail = 1;
	}
	uint64_t act = vecfs_active(v);
	/* the state after some prefix of at least the acknowledged operations */
	unsigned char *alive = calloc(NKEYS, 1);
	float *x = calloc((size_t)NKEYS * D, sizeof(float));
	assert_non_null(alive);
	assert_non_null(x);
	uint64_t active = 0;
	uint32_t nprobe = 0;
	char first_why[256] = "";
	int found = 0;
	if (!fail) {
		vecfs_config def;
		vecfs_config_defaults(&def);
		nprobe = def.nprobe;
	}
	for (size_t k = 0; !fail && k <= c->kmax && k <= R->nops; k++) {
		if (k) {
			const op *o = &R->ops[k - 1];
			for (size_t i = 0; i < o->n; i++) {
				const change *ch = &R->ch[o->first + i];
				alive[ch->key] = !ch->del;
				if (!ch->del)
					memcpy(x + (size_t)ch->key * D, ch->vec, sizeof ch->vec);
			}
			active = o->active;
			nprobe = o->nprobe;
		}
		if (k < c->kmin)
			continue;
		char why[256];
		if (!state_diff(s, alive, x, active, nprobe, act, cfg.nprobe, why, sizeof why)) {
			found = 1;
			c->k = k;
			break;
		}
		if (!first_why[0])
			snprintf(first_why, sizeof first_why, "%s", why);
	}
	if (!fail && !found) {
		snprintf(c->why, sizeof c->why,
			 "not the state after any %zu..%zu operations (after %zu: %s)",
			 c->kmin, c->kmax, c->kmin, first_why);
		fail = 1;
	}
	/* it takes a write and finds it */
	if (!fail) {
		float q[D];
		for (int j = 0; j < D; j++)
			q[j] = 100.0f + (float)j;
		vecfs_row row = {.key = "probe", .keylen = 5, .vec = q};
		if ((rc = vecfs_put(v, &row, 1, D, NULL, err, sizeof err))) {
			snprintf(c->why, sizeof c->why, "a write after the crash: %d %s", rc, err);
			fail = 1;
		}
		for (int exact = 1; !fail && exact >= 0; exact--) {
			vecfs_query_opts o = {.k = 3, .exact = exact};
			vecfs_results *res = NULL;
			rc = vecfs_search(v, q, 1, D, &o, &res, err, sizeof err);
			if (rc || res->count[0] < 1 || strcmp(res->hits[0][0].key, "probe") ||
			    res->hits[0][0].distance != 0.0f) {
				snprintf(c->why, sizeof c->why, "a %s search after the crash: %d %s",
					 exact ? "exact" : "ANN", rc, err);
				fail = 1;
			}
			vecfs_results_free(res);
		}
	}
	vecfs_close(v);
	free(alive);
	free(x);
	free(s);
	return fail;
}

/* ------------------------------------------------------------ the replay */

enum { V_NONE, V_ALL, V_SUBSET, V_TORN };
static const char *variant_names[] = {"none", "all", "subset", "torn"};
/* The images of one point: three random subsets, two torn writes. */
static const int variants[] = {V_NONE, V_ALL, V_SUBSET, V_SUBSET, V_SUBSET, V_TORN, V_TORN};

typedef struct replay {
	const rec *R;
	char dir[PATH_MAX];
	fimg base[PL_FILES], scratch[PL_FILES];
	long base_point;     /* the base holds what is durable at this point */
	long *flight;        /* writes in flight */
	size_t nflight;
	uint64_t seed;
	long points, images;
} replay;

/* Event index that ends point p's window: the next point's event (its own
 * write is in flight until it returns), or the end of the log. */
static size_t window_end(long p)
{
	return (size_t)p + 1 < pl_npoint ? (size_t)pl_point[p + 1] + 1 : pl_nev;
}

/* Bring the base to point p (p >= base_point): the writes durable at p, in
 * the order they were made. */
static void base_advance(replay *rp, long p)
{
	for (long q = rp->base_point + 1; q <= p; q++)
		for (size_t e = 0; e <= (size_t)pl_point[q]; e++)
			if (pl_ev[e].durable == q)
				fimg_apply(rp->base, &pl_ev[e], pl_ev[e].len);
	rp->base_point = p;
}

/* An event that can reach the disk: a write, a truncation of a file that
 * has data, a name in the store directory. */
static int ev_may_persist(const ev *e)
{
	switch (e->kind) {
	case EV_WRITE: return 1;
	case EV_TRUNC: return pl_file[e->file].writes > 0;
	case EV_CREATE: case EV_RENAME: return !strchr(e->name, '/');
	default: return 0;
	}
}

/* The writes in flight at point p: not durable at p, made before the
 * window ends. */
static void flight_collect(replay *rp, long p)
{
	size_t end = window_end(p);
	rp->nflight = 0;
	for (size_t e = 0; e < end; e++)
		if (ev_may_persist(&pl_ev[e]) && (pl_ev[e].durable < 0 || pl_ev[e].durable > p))
			rp->flight[rp->nflight++] = (long)e;
}

static size_t ops_acked(const rec *R, long p)
{
	size_t pos = (size_t)pl_point[p] + 1, k = 0;
	while (k < R->nops && R->ops[k].ack <= pos)
		k++;
	return k;
}

static size_t ops_begun(const rec *R, size_t end)
{
	size_t k = 0;
	while (k < R->nops && R->ops[k].start < end)
		k++;
	return k;
}

/* Build variant `var` of point p into the scratch files; 0 when the variant
 * is the same as one already checked (nothing to tear, ...). */
static int variant_build(replay *rp, long p, int var, rng *r, char *desc, size_t dlen)
{
	for (int f = 0; f < pl_nfile; f++)
		fimg_copy(&rp->scratch[f], &rp->base[f]);
	size_t n = rp->nflight;
	snprintf(desc, dlen, "%s of %zu writes in flight", variant_names[var], n);
	if (var == V_NONE)
		return 1;
	if (!n)
		return 0;
	if (var == V_ALL) {
		for (size_t i = 0; i < n; i++)
			fimg_apply(rp->scratch, &pl_ev[rp->flight[i]], pl_ev[rp->flight[i]].len);
		return 1;
	}
	if (var == V_SUBSET) {
		if (n < 2)
			return 0;
		size_t took = 0;
		char *d = desc + strlen(desc);
		snprintf(d, dlen - (size_t)(d - desc), ":");
		for (size_t i = 0; i < n; i++) {
			if (rng_next(r) & 1) {
				fimg_apply(rp->scratch, &pl_ev[rp->flight[i]], pl_ev[rp->flight[i]].len);
				took++;
				size_t used = strlen(desc);
				if (used + 12 < dlen)
					snprintf(desc + used, dlen - used, " %ld", rp->flight[i]);
			}
		}
		return took > 0 && took < n;
	}
	/* torn: the writes before one in flight, then a prefix of it that ends
	 * inside one of its pages at a sector boundary */
	long cand[64];
	size_t nc = 0;
	for (size_t i = 0; i < n && nc < 64; i++)
		if (pl_ev[rp->flight[i]].kind == EV_WRITE && pl_ev[rp->flight[i]].len > 512)
			cand[nc++] = (long)i;
	if (!nc)
		return 0;
	size_t w = (size_t)cand[rng_next(r) % nc];
	const ev *e = &pl_ev[rp->flight[w]];
	uint64_t pages = (e->len + 4095) / 4096, cut;
	do {
		cut = (rng_next(r) % pages) * 4096 + (1 + rng_next(r) % 7) * 512;
	} while (cut >= e->len);
	for (size_t i = 0; i < w; i++)
		fimg_apply(rp->scratch, &pl_ev[rp->flight[i]], pl_ev[rp->flight[i]].len);
	fimg_apply(rp->scratch, e, cut);
	snprintf(desc, dlen, "torn: %zu of %zu writes in flight, then %llu of %llu bytes of "
		 "event %ld (offset %llu)", w, n, (unsigned long long)cut,
		 (unsigned long long)e->len, rp->flight[w], (unsigned long long)e->off);
	return 1;
}

static void replay_point(replay *rp, long p)
{
	const rec *R = rp->R;
	base_advance(rp, p);
	flight_collect(rp, p);
	size_t end = window_end(p);
	rng r = {.s = rp->seed * 1000003u + (uint64_t)p};
	rp->points++;
	for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
		char desc[1024];
		if (!variant_build(rp, p, variants[vi], &r, desc, sizeof desc))
			continue;
		image_store(rp->dir, rp->scratch);
		check c = {.R = R, .dir = rp->dir, .kmin = ops_acked(R, p),
			   .kmax = ops_begun(R, end), .tamper = -1};
		rp->images++;
		if (getenv("VECFS_POWERLOSS_VERBOSE"))
			print_message("point %ld (event %ld), %s\n", p, pl_point[p], desc);
		if (image_check(&c)) {
			print_message("power loss at point %ld of %zu (event %ld), seed %llu, %s: %s\n",
				      p, pl_npoint, pl_point[p],
				      (unsigned long long)rp->seed, desc, c.why);
			fail();
		}
	}
}

/* ------------------------------------------------------------ the test */

typedef struct plstate {
	fixture fx;
	rec R;
	replay rp;
} plstate;

static int env_long(const char *name, long def)
{
	const char *s = getenv(name);
	return s && *s ? (int)strtol(s, NULL, 0) : (int)def;
}

static void record(fixture *f, rec *R)
{
	memset(pl_fd_file, 0, sizeof pl_fd_file);
	snprintf(pl_dir, sizeof pl_dir, "%s", f->dir);
	pl_drop_sync = env_long("VECFS_POWERLOSS_DROP_SYNC", 0);
	__atomic_store_n(&pl_on, 1, __ATOMIC_RELEASE);
	vecfs *v = fx_open(f, NULL);
	size_t opened = log_pos();
	workload(R, v);
	fx_close(f);
	__atomic_store_n(&pl_on, 0, __ATOMIC_RELEASE);
	print_message("recorded: %zu events (%zu at the open), %zu durability points, "
		      "%zu operations acknowledged\n", pl_nev, opened, pl_npoint, R->nops);
	for (int i = 0; i < pl_nfile; i++)
		print_message("  %-11s %s%ld writes (%ld bytes; %ld on O_DSYNC), %ld syncs, "
			      "%ld truncations\n", pl_file[i].name,
			      pl_file[i].created ? "created; " : "", pl_file[i].writes,
			      pl_file[i].bytes, pl_file[i].dsync_writes, pl_file[i].syncs,
			      pl_file[i].truncs);
	long msyncs = __atomic_load_n(&pl_msyncs, __ATOMIC_RELAXED);
	print_message("  directory: %ld syncs, %ld renames; msync: %ld calls\n", pl_dir_syncs,
		      pl_renames, msyncs);
	/* every page went through the logged calls (no write through a map) */
	assert_int_equal(msyncs, 0);
}

/* Operations that returned before all they wrote (their bytes, the name
 * of their file) was durable; each one named. */
static size_t ops_undurable(const rec *R)
{
	size_t bad = 0;
	for (size_t k = 0; k < R->nops; k++) {
		size_t pos = R->ops[k].ack;
		for (size_t e = 0; e < pos; e++) {
			const ev *x = &pl_ev[e];
			if ((x->kind == EV_WRITE ||
			     (ev_may_persist(x) && pl_file[x->file].writes)) &&
			    (x->durable < 0 || (size_t)pl_point[x->durable] >= pos)) {
				print_message("%s (operation %zu) returned before event %zu "
					      "(%s of %s) was durable\n", op_names[R->ops[k].kind],
					      k, e, x->kind == EV_WRITE ? "a write" : "the name",
					      pl_file[x->file].name);
				bad++;
				break;
			}
		}
	}
	return bad;
}

static void replay_init(replay *rp, const rec *R)
{
	memset(rp, 0, sizeof *rp);
	rp->R = R;
	rp->base_point = -1;
	rp->seed = (uint64_t)env_long("VECFS_POWERLOSS_SEED", 1);
	rp->flight = calloc(pl_nev + 1, sizeof *rp->flight);
	assert_non_null(rp->flight);
	const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(rp->dir, sizeof rp->dir, "%s/vecfs-powerloss-XXXXXX", tmp);
	assert_non_null(mkdtemp(rp->dir));
}

static void replay_fini(replay *rp)
{
	rm_rf(rp->dir);
	for (int f = 0; f < PL_FILES; f++) {
		free(rp->base[f].buf);
		free(rp->scratch[f].buf);
	}
	free(rp->flight);
}

static int pl_setup(void **state)
{
	plstate *s = calloc(1, sizeof *s);
	if (!s)
		return -1;
	strcpy(s->fx.dir, "/tmp/vecfs-test-XXXXXX");
	if (!mkdtemp(s->fx.dir)) {
		free(s);
		return -1;
	}
	s->R.r.s = 20261204;
	record(&s->fx, &s->R);
	*state = s;
	return 0;
}

static int pl_teardown(void **state)
{
	plstate *s = *state;
	if (!s)
		return 0;
	fx_close(&s->fx);
	rm_rf(s->fx.dir);
	free(s->R.ops);
	free(s->R.ch);
	free(s);
	return 0;
}

/* Every point (or a fixed sample of them), every variant. */
static void test_replay(void **state)
{
	plstate *s = *state;
	replay *rp = &s->rp;
	replay_init(rp, &s->R);
	long budget = getenv("VECFS_POWERLOSS_LONG") ? LONG_MAX
		    : PL_SANITIZED ? 50 : 240;
	long n = (long)pl_npoint;
	rng pick = {.s = 77};
	time_t t0 = time(NULL);
	for (long p = 0; p < (long)pl_npoint; p++) {
		/* the sample: every point while within the budget, else each one
		 * with probability budget / n, and always the last */
		if (n > budget && p + 1 < (long)pl_npoint &&
		    rng_unif(&pick) * (double)n >= (double)budget)
			continue;
		replay_point(rp, p);
	}
	print_message("power loss replayed at %ld of %ld durability points: %ld images "
		      "checked, %zu operations acknowledged (%ld s)\n", rp->points, n,
		      rp->images, s->R.nops, (long)(time(NULL) - t0));
	/* every operation was durable when it returned */
	assert_int_equal(ops_undurable(&s->R), 0);
	replay_fini(rp);
}

/* The scratch files as durable at point `upto`, leaving out what point
 * `skip` made durable. */
static void image_durable(replay *rp, long upto, long skip)
{
	for (int f = 0; f < pl_nfile; f++)
		fimg_copy(&rp->scratch[f], &(fimg){0});
	for (size_t e = 0; upto >= 0 && e <= (size_t)pl_point[upto]; e++)
		if (pl_ev[e].durable >= 0 && pl_ev[e].durable <= upto && pl_ev[e].durable != skip)
			fimg_apply(rp->scratch, &pl_ev[e], pl_ev[e].len);
	image_store(rp->dir, rp->scratch);
}

/* The check fails on images built wrongly: the last put's commit lost as a
 * whole after it was acknowledged; only the pages its fdatasync made
 * durable lost; one of its rows missing (half there). */
static void test_checker_detects(void **state)
{
	plstate *s = *state;
	const rec *R = &s->R;
	replay *rp = &s->rp;
	replay_init(rp, R);
	size_t k;
	for (k = R->nops; k-- > 0;)
		if (R->ops[k].kind == OP_PUT)
			break;
	assert_true(k < R->nops);
	const op *o = &R->ops[k];
	/* the points of the put's commit (its fdatasync, its meta page), and
	 * the last one before it */
	long ps = -1, pm = -1, p0 = -1;
	for (long p = 0; p < (long)pl_npoint; p++) {
		if ((size_t)pl_point[p] < o->start)
			p0 = p;
		else if ((size_t)pl_point[p] < o->ack && pl_ev[pl_point[p]].kind == EV_SYNC)
			ps = p;
		else if ((size_t)pl_point[p] < o->ack)
			pm = p;
	}
	assert_true(ps >= 0 && pm > ps);
	check c = {.R = R, .dir = rp->dir, .kmin = ops_acked(R, pm),
		   .kmax = ops_begun(R, window_end(pm)), .tamper = -1};
	assert_true(c.kmin == k + 1);

	/* what was durable before the put, checked as after its return */
	image_durable(rp, p0, -1);
	assert_int_equal(image_check(&c), 1);
	print_message("the %s (operation %zu) lost after its return: detected (%s)\n",
		      op_names[o->kind], k, c.why);

	/* its fdatasync dropped: its meta page names pages never written;
	 * LMDB may stop on them (an abort), so in a child */
	image_durable(rp, pm, ps);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGBUS, SIG_DFL);
		signal(SIGSEGV, SIG_DFL);
		signal(SIGABRT, SIG_DFL);
		_exit(image_check(&c) ? 3 : 0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	print_message("its fdatasync lost: %s\n",
		      !WIFEXITED(st) ? "detected (the open crashed)"
		      : WEXITSTATUS(st) == 3 ? "detected" : "NOT detected");
	assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* as durable at its meta page it passes; with one of its rows
	 * removed it fails, even with the put not required */
	image_durable(rp, pm, -1);
	check h = c;
	assert_int_equal(image_check(&h), 0);
	image_durable(rp, pm, -1);
	h.tamper = (long)k;
	h.kmin = k;
	assert_int_equal(image_check(&h), 1);
	print_message("one of its rows missing: detected (%s)\n", h.why);
	replay_fini(rp);
}

/* A store opened in a directory that does not exist yet: the directory
 * that holds it is synced after it is made, or a power loss could take
 * the whole store's name away after its first commits were acknowledged. */
static void test_new_directory_named_durably(void **state)
{
	(void)state;
	char root[] = "/tmp/vecfs-pl-parent-XXXXXX", dir[PATH_MAX], err[256] = "";
	assert_non_null(mkdtemp(root));
	snprintf(pl_parent, sizeof pl_parent, "%s", root);
	snprintf(dir, sizeof dir, "%s/fresh", root);
	pl_parent_syncs = 0;
	vecfs *v;
	assert_int_equal(vecfs_open(dir, &v, err, sizeof err), 0);
	long made = pl_parent_syncs;
	vecfs_close(v);
	/* a second open of the same directory makes nothing */
	pl_parent_syncs = 0;
	assert_int_equal(vecfs_open(dir, &v, err, sizeof err), 0);
	long again = pl_parent_syncs;
	vecfs_close(v);
	pl_parent[0] = 0;
	print_message("the parent directory synced %ld time(s) when the store's was made, %ld "
		      "when it existed\n", made, again);
	assert_true(made >= 1);
	assert_int_equal(again, 0);
	rm_rf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_replay),
		cmocka_unit_test(test_checker_detects),
		cmocka_unit_test(test_new_directory_named_durably),
	};
	return cmocka_run_group_tests(tests, pl_setup, pl_teardown);
}
