/*
 * test_faults.c - the store under failures: a reader process killed while
 * it holds a snapshot of a store another process writes; and every write,
 * sync, truncation and allocation of each operation failed in turn, the
 * Nth one at N = 1, 2, 3 ... until the operation succeeds.
 *
 * LMDB's file calls (pwrite, write, writev, fsync, fdatasync, ftruncate,
 * msync) are defined here: the executable's definitions take the place of
 * libc's for liblmdb.so too, and call libc's through dlsym(RTLD_NEXT)
 * unless the fault counter says fail.  The library's own allocations and
 * opens go through layout/io.h's table, which the test replaces.
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handle.h"
#include "io.h"
#include "testutil.h"

/* ------------------------------------------------------------ the fault seam */

enum { FI_IO = 1, FI_ALLOC = 2 };
static int fi_on;          /* counting (and failing) now */
static unsigned fi_kinds;  /* which calls count */
static long fi_at;         /* fail the fi_at-th counted call (0: none) */
static long fi_calls;      /* calls counted since armed */
static int fi_err;         /* errno of the failed I/O call */
static int fi_hit;         /* the fault was injected */
static long fi_seen[8];    /* calls seen by each interposed function */

static int fi_fail(unsigned kind)
{
	/* (also called on the store's background threads: all atomic) */
	if (!__atomic_load_n(&fi_on, __ATOMIC_ACQUIRE) ||
	    !(__atomic_load_n(&fi_kinds, __ATOMIC_RELAXED) & kind))
		return 0;
	long n = __atomic_add_fetch(&fi_calls, 1, __ATOMIC_RELAXED);
	if (n != __atomic_load_n(&fi_at, __ATOMIC_RELAXED))
		return 0;
	__atomic_store_n(&fi_hit, 1, __ATOMIC_RELAXED);
	return 1;
}

static void fi_arm(unsigned kinds, long at, int err)
{
	__atomic_store_n(&fi_kinds, kinds, __ATOMIC_RELAXED);
	__atomic_store_n(&fi_at, at, __ATOMIC_RELAXED);
	__atomic_store_n(&fi_err, err, __ATOMIC_RELAXED);
	__atomic_store_n(&fi_calls, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&fi_hit, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&fi_on, 1, __ATOMIC_SEQ_CST);
}

static void fi_disarm(void)
{
	__atomic_store_n(&fi_on, 0, __ATOMIC_SEQ_CST);
}

#define REAL(name) \
	static __typeof__(name) *real; \
	if (!real) \
		real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)
#define FAIL_IO(slot, fd) \
	do { \
		__atomic_add_fetch(&fi_seen[slot], 1, __ATOMIC_RELAXED); \
		if ((fd) > 2 && fi_fail(FI_IO)) { \
			errno = __atomic_load_n(&fi_err, __ATOMIC_RELAXED); \
			return -1; \
		} \
	} while (0)

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	REAL(pwrite);
	FAIL_IO(0, fd);
	return real(fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
	REAL(write);
	FAIL_IO(1, fd);
	return real(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	REAL(writev);
	FAIL_IO(2, fd);
	return real(fd, iov, cnt);
}

int fsync(int fd)
{
	REAL(fsync);
	FAIL_IO(3, fd);
	return real(fd);
}

int fdatasync(int fd)
{
	REAL(fdatasync);
	FAIL_IO(4, fd);
	return real(fd);
}

int ftruncate(int fd, off_t len)
{
	REAL(ftruncate);
	FAIL_IO(5, fd);
	return real(fd, len);
}

int msync(void *addr, size_t len, int flags)
{
	REAL(msync);
	FAIL_IO(6, 3);
	return real(addr, len, flags);
}

static void *fi_malloc(size_t n)
{
	if (fi_fail(FI_ALLOC)) {
		errno = ENOMEM;
		return NULL;
	}
	return malloc(n);
}

static void *fi_calloc(size_t n, size_t size)
{
	if (fi_fail(FI_ALLOC)) {
		errno = ENOMEM;
		return NULL;
	}
	return calloc(n, size);
}

static void *fi_realloc(void *p, size_t n)
{
	if (fi_fail(FI_ALLOC)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, n);
}

static int fi_open(const char *path, int flags, mode_t mode)
{
	if (fi_fail(FI_IO)) {
		errno = __atomic_load_n(&fi_err, __ATOMIC_RELAXED);
		return -1;
	}
	return open(path, flags, mode);
}

static void fi_install(void)
{
	vf_io_ops.malloc = fi_malloc;
	vf_io_ops.calloc = fi_calloc;
	vf_io_ops.realloc = fi_realloc;
	vf_io_ops.open = fi_open;
}

/* ------------------------------------------------------------ dead readers */

/* The child's part (this binary run as `hold-read DIR FD`): open the store
 * read-only, begin a read, say so on FD and wait to be killed. */
static int hold_read(const char *dir, int fd)
{
	vecfs *v;
	vf_txn *txn;
	char err[256];
	if (vecfs_open_readonly(dir, &v, err, sizeof err) ||
	    vf_read_begin(v->store, &txn))
		return 1;
	if (write(fd, "r", 1) != 1)
		return 1;
	for (;;)
		pause();
}

/* A process that holds a read of dir, started and killed with SIGKILL. */
static void kill_reader(const char *dir)
{
	int p[2];
	char fdarg[16], c;
	assert_int_equal(pipe(p), 0);
	snprintf(fdarg, sizeof fdarg, "%d", p[1]);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		execl("/proc/self/exe", "test_faults", "hold-read", dir, fdarg, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	kill(pid, SIGKILL);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
}

/* Rewrites of the same keys after a reader died with a snapshot: the file
 * stays bounded (the dead reader's slot is cleared while the store is
 * open, not only at the next open). */
static void test_dead_reader_released(void **state)
{
	fixture *f = *state;
	const uint32_t d = 64;
	const size_t n = 2000;
	vecfs *v = fx_open(f, NULL);
	set_config(v, d, VECFS_L2);
	dataset ds;
	ds_make(&ds, 11, n, d, 8);
	put_range(v, ds.x, 0, n, d, "k");
	kill_reader(f->dir);
	for (int i = 0; i < 3; i++)
		put_range(v, ds.x, 0, n, d, "k");
	uint64_t base = vf_store_bytes(v->store);
	for (int i = 0; i < 30; i++)
		put_range(v, ds.x, 0, n, d, "k");
	uint64_t end = vf_store_bytes(v->store);
	/* a rewrite puts about n * (24 + 4 d) bytes of records on new pages;
	 * with the snapshot pinned, none of the old ones would be reused */
	uint64_t one = n * (24 + 4 * d);
	print_message("data file %llu -> %llu bytes over 30 rewrites of %llu\n",
		      (unsigned long long)base, (unsigned long long)end,
		      (unsigned long long)one);
	assert_true(end - base < 8 * one);
	ds_free(&ds);
}

/* ------------------------------------------------------------ the fault loop */

/* What the store must hold: rows k<i> of x where alive[i]. */
typedef struct model {
	uint32_t d;
	size_t n;
	float *x;
	unsigned char *alive;
	float *pend;            /* the rows the running operation writes */
	size_t *pend_idx;
	size_t npend;
	int pend_delete;
	rng r;
} model;

typedef struct floop {
	fixture *f;
	model m;
	uint64_t bak;           /* backups written */
	long points;            /* distinct N that failed an operation */
	long reopens;           /* failures after which the handle had to be reopened */
	vecfs_config cfg_want;
} floop;

static void model_random_row(model *m, float *out)
{
	for (uint32_t j = 0; j < m->d; j++)
		out[j] = (float)(rng_gauss(&m->r) * 4.0);
}

static void model_apply(model *m)
{
	for (size_t i = 0; i < m->npend; i++) {
		size_t r = m->pend_idx[i];
		if (m->pend_delete) {
			m->alive[r] = 0;
		} else {
			memcpy(m->x + r * m->d, m->pend + i * m->d, sizeof(float) * m->d);
			m->alive[r] = 1;
		}
	}
	m->npend = 0;
}

/* Rows to write: `cnt` rows, every third a new one while there are. */
static void model_pick(model *m, size_t cnt, int del)
{
	m->npend = 0;
	m->pend_delete = del;
	for (size_t i = 0; i < cnt; i++) {
		size_t r = (size_t)(rng_next(&m->r) % m->n);
		for (size_t t = 0; t < m->n && (del ? !m->alive[r] : 0); t++)
			r = (r + 1) % m->n;
		int dup = 0;
		for (size_t j = 0; j < m->npend; j++)
			dup |= m->pend_idx[j] == r;
		if (dup)
			continue;
		m->pend_idx[m->npend] = r;
		model_random_row(m, m->pend + m->npend * m->d);
		m->npend++;
	}
}

static void row_of(model *m, size_t i, vecfs_row *row, char *key)
{
	snprintf(key, 32, "k%zu", m->pend_idx[i]);
	memset(row, 0, sizeof *row);
	row->key = key;
	row->keylen = strlen(key);
	row->vec = m->pend + i * m->d;
}

static int put_pending(vecfs *v, model *m)
{
	vecfs_row rows[64];
	char keys[64][32];
	assert_true(m->npend <= 64);
	for (size_t i = 0; i < m->npend; i++)
		row_of(m, i, &rows[i], keys[i]);
	char err[256];
	return vecfs_put(v, rows, m->npend, m->d, NULL, err, sizeof err);
}

/* The store holds exactly the model: every row by key, the count, and
 * exact queries. */
static void model_check(vecfs *v, model *m)
{
	uint64_t live = 0;
	float got[64];
	for (size_t i = 0; i < m->n; i++) {
		char key[32];
		uint32_t dim = 0;
		snprintf(key, sizeof key, "k%zu", i);
		int rc = vecfs_get(v, key, strlen(key), got, 64, &dim, NULL, 0, NULL);
		if (!m->alive[i]) {
			assert_int_equal(rc, -ENOENT);
			continue;
		}
		live++;
		assert_int_equal(rc, 0);
		assert_memory_equal(got, m->x + i * m->d, sizeof(float) * m->d);
	}
	assert_int_equal(stats(v).records, live);
	for (int q = 0; q < 3; q++) {
		float qv[64];
		model_random_row(m, qv);
		vecfs_results *res = search1(v, qv, m->d, 10, 1);
		check_exact(res->hits[0], res->count[0], VECFS_L2, m->x, m->n, m->d, m->alive,
			    "k", qv, 10);
		vecfs_results_free(res);
		res = search1(v, qv, m->d, 10, 0);
		check_hits(res->hits[0], res->count[0], VECFS_L2, m->x, m->n, m->d, m->alive,
			   "k", qv);
		vecfs_results_free(res);
	}
}

static void loop_reopen(floop *l)
{
	fx_close(l->f);
	l->f->v = fx_open(l->f, NULL);
	char msg[512] = "";
	int rc = vecfs_verify(l->f->v, msg, sizeof msg);
	if (rc)
		print_message("verify: %s\n", msg);
	assert_int_equal(rc, 0);
}

/* One operation under the fault loop: prepare (unarmed), run (armed),
 * and what a success changes in the model. */
typedef struct fop {
	const char *name;
	void (*prepare)(floop *l);
	int (*run)(floop *l);
	void (*succeeded)(floop *l);
	void (*check)(floop *l);  /* after a failure: its own state unchanged */
} fop;

static void prep_put1(floop *l) { model_pick(&l->m, 1, 0); }
static void prep_put(floop *l) { model_pick(&l->m, 40, 0); }
static void prep_del(floop *l) { model_pick(&l->m, 1, 1); }
static int run_put(floop *l) { return put_pending(l->f->v, &l->m); }
static void done_model(floop *l) { model_apply(&l->m); }

static int run_batch(floop *l)
{
	model *m = &l->m;
	vecfs_batch *b;
	vecfs_row rows[64];
	char keys[64][32], err[256];
	int rc = vecfs_batch_begin(l->f->v, m->d, 0, &b);
	if (rc)
		return rc;
	for (size_t i = 0; i < m->npend; i++)
		row_of(m, i, &rows[i], keys[i]);
	for (size_t i = 0; i < m->npend; i += 8) {
		size_t c = m->npend - i < 8 ? m->npend - i : 8;
		if ((rc = vecfs_batch_add(b, rows + i, NULL, c, NULL, err, sizeof err))) {
			vecfs_batch_abort(b);
			return rc;
		}
	}
	return vecfs_batch_commit(b, NULL, err, sizeof err);
}

static int run_del(floop *l)
{
	char key[32];
	snprintf(key, sizeof key, "k%zu", l->m.pend_idx[0]);
	return vecfs_delete(l->f->v, key, strlen(key));
}

static void prep_none(floop *l) { l->m.npend = 0; }
static void done_none(floop *l) { }
/* Compaction needs delta postings and tombstones to fold. */
static void prep_deltas(floop *l)
{
	model_pick(&l->m, 20, 0);
	assert_int_equal(put_pending(l->f->v, &l->m), 0);
	model_apply(&l->m);
}

static int run_build(floop *l)
{
	char err[256];
	return vecfs_build(l->f->v, 1, NULL, NULL, NULL, err, sizeof err);
}

static int run_compact(floop *l)
{
	char err[256];
	return vecfs_compact(l->f->v, NULL, err, sizeof err);
}

static int run_rebalance(floop *l)
{
	char err[256];
	return vecfs_rebalance(l->f->v, 1, NULL, NULL, NULL, err, sizeof err);
}

static void backup_path(floop *l, char *path, size_t len, const char *file)
{
	snprintf(path, len, "%s.bak%llu%s%s", l->f->dir, (unsigned long long)l->bak,
		 file ? "/" : "", file ? file : "");
}

static void backup_remove(floop *l)
{
	char path[160];
	backup_path(l, path, sizeof path, "data.mdb");
	unlink(path);
	backup_path(l, path, sizeof path, "lock.mdb");
	unlink(path);
	backup_path(l, path, sizeof path, NULL);
	rmdir(path);
	l->bak++;
}

static int run_backup(floop *l)
{
	char path[160];
	backup_path(l, path, sizeof path, NULL);
	assert_int_equal(mkdir(path, 0700), 0);
	backup_path(l, path, sizeof path, "data.mdb");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	int rc = vecfs_backup(l->f->v, fd);
	close(fd);
	return rc;
}

/* The copy is a store that verifies and holds the model. */
static void backup_done(floop *l)
{
	char path[160], err[256], msg[256];
	vecfs *c;
	backup_path(l, path, sizeof path, NULL);
	int rc = vecfs_open_readonly(path, &c, err, sizeof err);
	if (rc)
		print_message("backup: %s\n", err);
	assert_int_equal(rc, 0);
	assert_int_equal(vecfs_verify(c, msg, sizeof msg), 0);
	model_check(c, &l->m);
	vecfs_close(c);
	backup_remove(l);
}

static void prep_config(floop *l)
{
	assert_int_equal(vecfs_config_get(l->f->v, &l->cfg_want), 0);
	l->cfg_want.nprobe = l->cfg_want.nprobe % 7 + 1;
}

static int run_config(floop *l)
{
	char err[256];
	return vecfs_config_set(l->f->v, &l->cfg_want, err, sizeof err);
}

static void check_config(floop *l, int applied)
{
	vecfs_config c;
	assert_int_equal(vecfs_config_get(l->f->v, &c), 0);
	if (applied)
		assert_int_equal(c.nprobe, l->cfg_want.nprobe);
	else
		assert_int_not_equal(c.nprobe, l->cfg_want.nprobe);
}
static void done_config(floop *l) { check_config(l, 1); }
static void failed_config(floop *l) { check_config(l, 0); }

static const fop fops[] = {
	{"put", prep_put1, run_put, done_model, NULL},
	{"put-many", prep_put, run_put, done_model, NULL},
	{"batch", prep_put, run_batch, done_model, NULL},
	{"delete", prep_del, run_del, done_model, NULL},
	{"build", prep_none, run_build, done_none, NULL},
	{"compact", prep_deltas, run_compact, done_none, NULL},
	{"rebalance", prep_deltas, run_rebalance, done_none, NULL},
	{"backup", prep_none, run_backup, backup_done, backup_remove},
	{"config", prep_config, run_config, done_config, failed_config},
};

/* Run op with the fault at N = 1, 2, ... (every `stride`-th N) until it
 * succeeds without reaching the fault; returns the failures seen. */
static long fault_loop(floop *l, const fop *op, unsigned kinds, long stride)
{
	long failed = 0, n;
	for (n = 1;; n += stride) {
		op->prepare(l);
		int err = kinds == FI_ALLOC ? ENOMEM : n % 2 ? EIO : ENOSPC;
		fi_arm(kinds, n, err);
		int rc = op->run(l);
		fi_disarm();
		int reached = __atomic_load_n(&fi_hit, __ATOMIC_RELAXED);
		if (rc == 0) {
			op->succeeded(l);
			model_check(l->f->v, &l->m);
			if (!reached)
				break;
			continue;
		}
		if (!reached || (rc != -EIO && rc != -ENOSPC && rc != -ENOMEM))
			print_message("%s: fault %ld (%s): rc %d (%s)\n", op->name, n,
				      strerror(err), rc, strerror(-rc));
		assert_true(reached);
		assert_true(rc == -EIO || rc == -ENOSPC || rc == -ENOMEM);
		failed++;
		l->m.npend = 0;
		/* the handle still serves, or LMDB wants it reopened (a failed
		 * write of its meta page leaves the environment unusable) */
		prep_put1(l);
		int prc = put_pending(l->f->v, &l->m);
		if (prc != 0) {
			assert_int_equal(prc, -EIO);
			l->reopens++;
			loop_reopen(l);
			assert_int_equal(put_pending(l->f->v, &l->m), 0);
		}
		model_apply(&l->m);
		model_check(l->f->v, &l->m);
		if (op->check)
			op->check(l);
		loop_reopen(l);
		model_check(l->f->v, &l->m);
	}
	print_message("%-10s %-5s %ld calls, %ld failed\n", op->name,
		      kinds == FI_ALLOC ? "alloc" : "io", n - 1, failed);
	return failed;
}

static void test_fault_loop(void **state)
{
	floop l = {.f = *state};
	model *m = &l.m;
	m->d = 16;
	m->n = 600;
	m->r.s = 7;
	m->x = calloc(m->n, sizeof(float) * m->d);
	m->alive = calloc(m->n, 1);
	m->pend = calloc(64, sizeof(float) * m->d);
	m->pend_idx = calloc(64, sizeof(size_t));
	vecfs *v = fx_open(l.f, NULL);
	set_config(v, m->d, VECFS_L2);
	vecfs_config c;
	assert_int_equal(vecfs_config_get(v, &c), 0);
	c.compact_deltas = 1000000; /* no maintenance in the background */
	c.rebalance_ratio = 0;
	c.nlist = 8;
	char err[256];
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	for (size_t i = 0; i < 8; i++) {
		model_pick(m, 50, 0);
		assert_int_equal(put_pending(v, m), 0);
		model_apply(m);
	}
	build(v, 1);
	long stride = getenv("VECFS_FAULTS_LONG") ? 1 : 7;
	for (size_t i = 0; i < sizeof fops / sizeof fops[0]; i++) {
		l.points += fault_loop(&l, &fops[i], FI_IO, 1);
		l.points += fault_loop(&l, &fops[i], FI_ALLOC, stride);
	}
	print_message("fault points: %ld failed operations; handle reopened after %ld\n",
		      l.points, l.reopens);
	free(m->x);
	free(m->alive);
	free(m->pend);
	free(m->pend_idx);
}

/* The interposed calls are the ones LMDB makes: a durable put is seen
 * writing pages and syncing. */
static void test_interposition_reaches_lmdb(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	set_config(v, 4, VECFS_L2);
	long before[8];
	memcpy(before, fi_seen, sizeof before);
	float x[4] = {1, 2, 3, 4};
	assert_int_equal(put_one(v, "a", x, 4), 0);
	long writes = fi_seen[0] - before[0] + fi_seen[2] - before[2];
	long syncs = fi_seen[3] - before[3] + fi_seen[4] - before[4];
	print_message("one put: %ld page writes, %ld syncs\n", writes, syncs);
	assert_true(writes >= 1);
	assert_true(syncs >= 1);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "hold-read"))
		return hold_read(argv[2], atoi(argv[3]));
	/* The table is replaced before any thread can read it (a store's
	 * threads call through it unlocked); disarmed, it makes the real calls. */
	fi_install();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dead_reader_released, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_interposition_reaches_lmdb, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_fault_loop, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
