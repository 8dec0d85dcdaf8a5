/*
 * layout/store.c - LMDB environment, transactions and map growth.
 */
#include "io.h"
#include "store.h"

#include <lmdb.h>
#include <zstd.h>

#include <errno.h>
#include <stdatomic.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define VF_MAP_MIN ((size_t)256 << 20) /* a new store's map (virtual) */
#define VF_MAP_STEP ((size_t)64 << 20) /* maps are whole steps */

static size_t map_round(size_t n)
{
	return (n + VF_MAP_STEP - 1) / VF_MAP_STEP * VF_MAP_STEP;
}

/* Can the process map `bytes` more?  Under an address-space limit
 * (`ulimit -v`, systemd's LimitAS=) a larger map may not fit, and LMDB
 * unmaps the old map before it maps the new one: if that fails the
 * environment is left with no map at all.  So a map size is tried first
 * as an anonymous reservation (PROT_NONE: no memory, only address space)
 * of the bytes it adds. */
static int map_fits(size_t bytes)
{
	if (bytes == 0)
		return 1;
	void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (p == MAP_FAILED)
		return 0;
	munmap(p, bytes);
	return 1;
}

/* The largest map size from `want` down to `floor` (in halving steps of
 * what it adds to `have`) whose growth fits the address space; 0 if not
 * even `floor` fits. */
static size_t map_fit(size_t have, size_t want, size_t floor)
{
	if (want < floor)
		want = floor;
	for (;;) {
		if (map_fits(want - have))
			return want;
		if (want == floor)
			return 0;
		size_t next = map_round(have + (want - have) / 2);
		want = next < floor || next >= want ? floor : next;
	}
}

/* Read transactions of store s this thread holds: its map cannot grow
 * under them. */
static int reads_held(const vf_store *s)
{
	return (int)(intptr_t)pthread_getspecific(s->reads_key);
}

static int reads_add(vf_store *s, int n)
{
	return pthread_setspecific(s->reads_key, (void *)(intptr_t)(reads_held(s) + n));
}

_Static_assert(sizeof(vf_dbi) == sizeof(MDB_dbi), "vf_dbi is MDB_dbi");

int vf_store_own_code(int rc)
{
	return rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE;
}

const char *vf_store_strerror(int rc)
{
	return mdb_strerror(rc < 0 && !vf_store_own_code(rc) ? -rc : rc);
}

/* LMDB's return as this file's: MDB_NOTFOUND is -ENOENT, an errno is
 * negative, LMDB's other codes stay. */
static int layout_rc(int rc)
{
	return rc == MDB_NOTFOUND ? -ENOENT : rc > 0 ? -rc : rc;
}

int vf_store_err(int rc)
{
	switch (rc) {
	case 0: return 0;
	case MDB_NOTFOUND: return -ENOENT;
	case MDB_KEYEXIST: return -EEXIST;
	case MDB_MAP_FULL: return -ENOSPC;
	case MDB_READERS_FULL: return -EAGAIN;
	case MDB_CORRUPTED: case MDB_PAGE_NOTFOUND: case MDB_INVALID:
	case MDB_VERSION_MISMATCH: case MDB_PANIC: return -EIO;
	case MDB_TXN_FULL: case MDB_CURSOR_FULL: case MDB_PAGE_FULL:
	case MDB_MAP_RESIZED: case MDB_DBS_FULL: case MDB_TLS_FULL:
	case MDB_BAD_RSLOT: case MDB_BAD_TXN: case MDB_BAD_VALSIZE:
	case MDB_BAD_DBI: case MDB_INCOMPATIBLE: return -EIO;
	default: return rc > 0 ? -rc : rc;
	}
}

static void seterr(char *err, size_t len, const char *fmt, const char *a, int rc)
{
	if (err && len)
		snprintf(err, len, fmt, a, rc > 0 ? mdb_strerror(rc) : strerror(-rc));
}

#define VF_NEW_DIR ".vecfs-new" /* where a new store's data file is made */

static int store_open(const char *dir, size_t mapsize, int readonly, int in_place,
		      vf_store **out, char *err, size_t errlen);

/* Remove the files LMDB and the lock leave in dir, and dir itself. */
static void new_dir_clear(const char *dir)
{
	static const char *const files[] = {"data.mdb", "lock.mdb", "vecfs.lock"};
	char path[4300];
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

/* fsync of directory dir: the names made in it are durable. */
static int dir_sync(const char *dir)
{
	int fd = vf_io_ops.open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

/* fsync of the directory that holds path (a directory just made). */
static int parent_sync(const char *path)
{
	char parent[4200];
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		n--; /* "a/b/" names b */
	while (n > 0 && path[n - 1] != '/')
		n--;
	while (n > 1 && path[n - 1] == '/')
		n--;
	if (n == 0)
		return dir_sync(".");
	if (n >= sizeof parent)
		return -ENAMETOOLONG;
	memcpy(parent, path, n);
	parent[n] = 0;
	return dir_sync(parent);
}

/* A new store's data.mdb is made whole beside its place (LMDB writes its
 * first pages in place and syncs them with its first commit: a power loss
 * before that could leave a file it cannot open), then renamed into dir,
 * and dir synced so that the name is as durable as the commits made after
 * it.  A power loss on the way leaves no data.mdb: the next open starts
 * over. */
static int store_make(const char *dir, size_t mapsize, char *err, size_t errlen)
{
	char tmp[4200], from[4300], to[4300];
	vf_store *s;
	int rc;
	snprintf(tmp, sizeof tmp, "%s/" VF_NEW_DIR, dir);
	new_dir_clear(tmp);
	if (mkdir(tmp, 0700) != 0) {
		rc = -errno;
		seterr(err, errlen, "cannot create %s: %s", tmp, rc);
		return rc;
	}
	if ((rc = store_open(tmp, mapsize, 0, 1, &s, err, errlen))) {
		new_dir_clear(tmp);
		return rc;
	}
	vf_store_close(s);
	snprintf(from, sizeof from, "%s/data.mdb", tmp);
	snprintf(to, sizeof to, "%s/data.mdb", dir);
	rc = rename(from, to) ? -errno : dir_sync(dir);
	if (rc)
		seterr(err, errlen, "cannot create the store in %s: %s", dir, rc);
	new_dir_clear(tmp);
	return rc;
}

/* Open the store in dir; a new one is made by store_make() unless
 * in_place. */
static int store_open(const char *dir, size_t mapsize, int readonly, int in_place,
		      vf_store **out, char *err, size_t errlen)
{
	vf_store *s = vf_calloc(1, sizeof *s);
	char path[4200];
	int rc;
	struct stat st;

	if (!s)
		return -ENOMEM;
	s->lockfd = -1;
	s->readonly = readonly;
	if (strlen(dir) >= sizeof s->dir) {
		free(s);
		return -ENAMETOOLONG;
	}
	strcpy(s->dir, dir);
	snprintf(path, sizeof path, "%s/data.mdb", dir);
	if (readonly && stat(path, &st) != 0) {
		rc = -errno;
		seterr(err, errlen, "%s is not a store: %s", dir, rc);
		free(s);
		return rc;
	}
	if (readonly) /* beside a daemon that holds the store, as LMDB allows */
		goto locked;
	if (mkdir(dir, 0700) == 0) {
		rc = parent_sync(dir); /* the directory's name as durable as its files */
		if (rc) {
			seterr(err, errlen, "cannot sync the directory that holds %s: %s", dir, rc);
			free(s);
			return rc;
		}
	} else if (errno != EEXIST) {
		rc = -errno;
		seterr(err, errlen, "cannot create store directory %s: %s", dir, rc);
		free(s);
		return rc;
	}
	snprintf(path, sizeof path, "%s/vecfs.lock", dir);
	s->lockfd = vf_io_ops.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->lockfd < 0) {
		rc = -errno;
		seterr(err, errlen, "cannot open %s: %s", path, rc);
		free(s);
		return rc;
	}
	if (flock(s->lockfd, LOCK_EX | LOCK_NB) != 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		seterr(err, errlen, "store %s is in use by another vecfs process: %s",
		       dir, rc);
		close(s->lockfd);
		free(s);
		return rc;
	}
	snprintf(path, sizeof path, "%s/data.mdb", dir);
	if (!in_place && stat(path, &st) != 0 && errno == ENOENT &&
	    (rc = store_make(dir, mapsize, err, errlen))) {
		close(s->lockfd);
		free(s);
		return rc;
	}
locked:
	if ((rc = pthread_key_create(&s->reads_key, NULL))) {
		rc = -rc;
		seterr(err, errlen, "cannot open store %s: %s", dir, rc);
		if (s->lockfd >= 0)
			close(s->lockfd);
		free(s);
		return rc;
	}
	pthread_rwlock_init(&s->resize, NULL);
	pthread_mutex_init(&s->pool_mu, NULL);

	snprintf(path, sizeof path, "%s/data.mdb", dir);
	size_t fsz = stat(path, &st) == 0 ? (size_t)st.st_size : 0;
	if (mapsize == 0) {
		/* room to double, or less when the address space is limited:
		 * the map grows as the data does (vf_store_grow) */
		size_t want = map_round(fsz * 2);
		mapsize = map_fit(0, want > VF_MAP_MIN ? want : VF_MAP_MIN,
				  map_round(fsz + VF_MAP_STEP));
		if (mapsize == 0) {
			rc = -ENOMEM;
			seterr(err, errlen, "cannot map the store in %s "
			       "(address space limit, ulimit -v): %s", dir, rc);
			goto fail;
		}
	}
	if (mapsize < fsz)
		mapsize = fsz;
	s->mapsize = mapsize;

	if ((rc = mdb_env_create(&s->env)) ||
	    (rc = mdb_env_set_maxdbs(s->env, 16)) ||
	    (rc = mdb_env_set_maxreaders(s->env, 512)) ||
	    (rc = mdb_env_set_mapsize(s->env, mapsize)) ||
	    (rc = mdb_env_open(s->env, dir,
			       MDB_NOTLS | MDB_NORDAHEAD | (readonly ? MDB_RDONLY : 0), 0600))) {
		seterr(err, errlen, "cannot open LMDB in %s: %s", dir, rc);
		goto fail;
	}
	int dead = 0;
	mdb_reader_check(s->env, &dead);

	MDB_txn *txn;
	if ((rc = mdb_txn_begin(s->env, NULL, readonly ? MDB_RDONLY : 0, &txn))) {
		seterr(err, errlen, "cannot start a transaction in %s: %s", dir, rc);
		goto fail;
	}
	unsigned create = readonly ? 0 : MDB_CREATE;
	if ((rc = mdb_dbi_open(txn, "meta", create, &s->meta)) ||
	    (rc = mdb_dbi_open(txn, "records", create, &s->records)) ||
	    (rc = mdb_dbi_open(txn, "keys", create, &s->keys)) ||
	    (rc = mdb_dbi_open(txn, "changes", create, &s->changes)) ||
	    (rc = mdb_dbi_open(txn, "gens", create, &s->gens)) ||
	    (rc = mdb_dbi_open(txn, "postings", create, &s->postings)) ||
	    (rc = mdb_dbi_open(txn, "staging", create, &s->staging)) ||
	    (!readonly && (rc = mdb_drop(txn, s->staging, 0))) ||
	    ((rc = mdb_dbi_open(txn, "payloads", create, &s->payloads)) &&
	     !(readonly && rc == MDB_NOTFOUND))) {
		mdb_txn_abort(txn);
		if (rc == MDB_NOTFOUND)
			seterr(err, errlen, "%s is not a vecfs store: %s", dir, rc);
		else
			seterr(err, errlen, "cannot open databases in %s: %s", dir, rc);
		goto fail;
	}
	s->has_payloads = rc == 0;
	if ((rc = mdb_txn_commit(txn))) {
		seterr(err, errlen, "cannot commit in %s: %s", dir, rc);
		goto fail;
	}
	int fd = -1;
	if (readonly || mdb_env_get_fd(s->env, &fd))
		fd = -1;
	vf_writeback_init(&s->wb, fd);
	*out = s;
	return 0;
fail:
	if (s->env)
		mdb_env_close(s->env);
	if (s->lockfd >= 0)
		close(s->lockfd);
	pthread_rwlock_destroy(&s->resize);
	pthread_mutex_destroy(&s->pool_mu);
	pthread_key_delete(s->reads_key);
	free(s);
	return vf_store_err(rc);
}

int vf_store_open(const char *dir, size_t mapsize, vf_store **out, char *err,
		  size_t errlen)
{
	return store_open(dir, mapsize, 0, 0, out, err, errlen);
}

int vf_store_open_readonly(const char *dir, vf_store **out, char *err, size_t errlen)
{
	return store_open(dir, 0, 1, 0, out, err, errlen);
}

static void pool_drain(vf_store *s)
{
	pthread_mutex_lock(&s->pool_mu);
	for (int i = 0; i < s->npool; i++)
		mdb_txn_abort(s->pool[i]);
	s->npool = 0;
	pthread_mutex_unlock(&s->pool_mu);
}

void vf_store_close(vf_store *s)
{
	if (!s)
		return;
	vf_writeback_fini(&s->wb);
	free(s->hints);
	ZSTD_freeCCtx(s->assign_cc);
	pool_drain(s);
	mdb_env_close(s->env);
	if (s->lockfd >= 0)
		close(s->lockfd);
	pthread_rwlock_destroy(&s->resize);
	pthread_mutex_destroy(&s->pool_mu);
	pthread_key_delete(s->reads_key);
	free(s);
}

/* ------------------------------------------------------------ hints */

typedef struct vf_hint {
	uint64_t tag;    /* seen << 32 | check | HINT_CHECKED; 0: empty;
			  * HINT_BUSY: being written */
	uint64_t ptrlen; /* address << 16 | length */
} vf_hint;

#define HINT_LEN_BITS 16
#define HINT_MAX_SLOTS (1u << 22)
#define HINT_BUSY 4    /* (checks are odd, 0 in this bit and the next) */
#define HINT_CHECKED 2 /* the put's caller had checked the bytes */

static uint64_t hint_hash(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ULL;
	x ^= x >> 27;
	return x;
}

/* The slot pair of id (low bits of its hash) and its check (high bits, odd
 * so that a tag is never 0 or HINT_BUSY, and room for HINT_CHECKED). */
#define HINT_CHECK_MASK (~(uint32_t)(HINT_BUSY | HINT_CHECKED))
static uint64_t hint_slot(const vf_store *s, uint64_t id, uint32_t *check)
{
	uint64_t h = hint_hash(id);
	*check = ((uint32_t)(h >> 32) | 1) & HINT_CHECK_MASK;
	return h & s->hint_mask;
}

/* Slots for `records` ids: four each (a two-way table at most a quarter
 * full), a power of two, at least 4096 and at most s->hint_max. */
static uint64_t hint_slots(const vf_store *s, uint64_t records)
{
	uint64_t slots = 4096;
	while (slots < 4 * records && slots < s->hint_max)
		slots *= 2;
	return slots;
}

/* A number in the file at path (its first line), or 0: none, unreadable
 * or "max". */
static uint64_t read_number(const char *path)
{
	FILE *f = fopen(path, "re");
	unsigned long long n = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &n) != 1)
		n = 0;
	fclose(f);
	return n;
}

/* The memory this process may hold: the machine's, or less when its
 * memory cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes) is
 * smaller; VECFS_MEMORY_LIMIT (bytes) in place of both. */
static uint64_t memory_limit(void)
{
	const char *e = getenv("VECFS_MEMORY_LIMIT");
	if (e && *e)
		return strtoull(e, NULL, 10);
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t limit = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : UINT64_MAX;
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096], path[4200];
	while (f && fgets(line, sizeof line, f)) {
		/* "0::/path" (v2) or "N:...memory...:/path" (v1) */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		char *cg = c2 + 1;
		cg[strcspn(cg, "\n")] = 0;
		if (c2 == c1 + 1)
			snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", cg);
		else if (strstr(c1 + 1, "memory"))
			snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes",
				 cg);
		else
			continue;
		uint64_t n = read_number(path);
		if (n && n < limit)
			limit = n;
	}
	if (f)
		fclose(f);
	return limit;
}

/* The table's largest size: HINT_MAX_SLOTS, unless the store's file and
 * such a table would not both fit in the memory the process may hold;
 * then at most 1/HINT_SHARE of that memory, which is better left to the
 * page cache (the pages of the store that searches read): a hint only
 * saves a tree descent, and a lookup without one still finds the
 * record. */
#define HINT_SHARE 32
static uint64_t hint_max_slots(vf_store *s)
{
	MDB_envinfo info;
	MDB_stat st;
	uint64_t limit = memory_limit(), file = 0;
	if (mdb_env_info(s->env, &info) == 0 && mdb_env_stat(s->env, &st) == 0)
		file = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
	uint64_t full = (uint64_t)HINT_MAX_SLOTS * sizeof(vf_hint);
	s->hint_lean = !(limit == UINT64_MAX || file + full <= limit);
	if (!s->hint_lean)
		return HINT_MAX_SLOTS;
	uint64_t slots = 4096;
	while (2 * slots * sizeof(vf_hint) <= limit / HINT_SHARE && slots < HINT_MAX_SLOTS)
		slots *= 2;
	return slots;
}

int vf_hint_init(vf_store *s, uint64_t records)
{
	s->hint_max = hint_max_slots(s);
	uint64_t slots = hint_slots(s, records);
	s->hint_base = vf_store_version(s);
	s->hints = vf_calloc(slots, sizeof(vf_hint));
	if (!s->hints)
		return -ENOMEM;
	s->hint_mask = slots - 1;
	return 0;
}

/* With s->resize held for writing: a new, empty table of `slots` slots
 * if that is larger than the one there (else nothing; -ENOMEM keeps it). */
static int hint_swap_locked(vf_store *s, uint64_t slots)
{
	if (slots <= s->hint_mask + 1)
		return 0;
	vf_hint *h = vf_calloc(slots, sizeof(vf_hint));
	if (!h)
		return -ENOMEM;
	free(s->hints);
	__atomic_store_n(&s->hints, h, __ATOMIC_RELAXED);
	__atomic_store_n(&s->hint_mask, slots - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&s->hint_want, 0, __ATOMIC_RELAXED);
	return 0;
}

int vf_hint_reserve(vf_store *s, uint64_t records)
{
	uint64_t have = __atomic_load_n(&s->hint_mask, __ATOMIC_RELAXED) + 1;
	/* more than half full, and room to grow; never from a thread inside a
	 * transaction */
	if (!__atomic_load_n(&s->hints, __ATOMIC_RELAXED) || 2 * records <= have ||
	    have >= s->hint_max || reads_held(s) > 0)
		return 0;
	uint64_t slots = hint_slots(s, records);
	if (pthread_rwlock_trywrlock(&s->resize) != 0) {
		/* transactions run (a query, a build): not now */
		uint64_t w = __atomic_load_n(&s->hint_want, __ATOMIC_RELAXED);
		while (w < slots &&
		       !__atomic_compare_exchange_n(&s->hint_want, &w, slots, 0,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
		return 0;
	}
	int rc = hint_swap_locked(s, slots);
	pthread_rwlock_unlock(&s->resize);
	return rc;
}

int vf_hint_fill_wanted(const vf_store *s)
{
	return s->hints && !s->hint_lean;
}

int vf_store_exceeds_memory(const vf_store *s)
{
	return s->hint_lean;
}

void vf_hint_view_of(const vf_store *s, vf_txn *txn, vf_hint_view *out)
{
	out->hi = mdb_txn_id(txn);
	/* after the transaction began: a write that committed before it
	 * announced itself before that (vf_records_writing()) */
	out->lo = __atomic_load_n(&s->records_txn, __ATOMIC_SEQ_CST);
	if (s->readonly) /* another process writes: no announcements here */
		out->lo = UINT64_MAX;
}

const void *vf_hint_get(const vf_store *s, const vf_hint_view *view, uint64_t id,
			size_t *len, int *state)
{
	if (state)
		*state = 0;
	if (!s->hints)
		return NULL;
	uint32_t check;
	uint64_t h = hint_slot(s, id, &check);
	for (int way = 0; way < 2; way++) {
		const vf_hint *e = &s->hints[h ^ (uint64_t)way];
		uint64_t t = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
		if (((uint32_t)t & HINT_CHECK_MASK) != check)
			continue;
		uint64_t pl = __atomic_load_n(&e->ptrlen, __ATOMIC_RELAXED);
		/* a put between the two loads of the tag may have paired it
		 * with another place: then the tag changed (puts go through
		 * HINT_BUSY) */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&e->tag, __ATOMIC_RELAXED) != t)
			return NULL;
		uint64_t seen = t >> 32;
		if (state && view && seen) {
			uint64_t txn = s->hint_base + seen - 1;
			if (view->lo <= txn && txn <= view->hi)
				*state = VF_HINT_STABLE | (t & HINT_CHECKED ? VF_HINT_CHECKED : 0);
		}
		*len = (size_t)(pl & ((1u << HINT_LEN_BITS) - 1));
		return (const void *)(uintptr_t)(pl >> HINT_LEN_BITS);
	}
	return NULL;
}

void vf_hint_prefetch(const vf_store *s, uint64_t id)
{
	if (s->hints) /* both ways share a 32-byte pair */
		__builtin_prefetch(&s->hints[hint_hash(id) & s->hint_mask]);
}

void vf_hint_put(vf_store *s, vf_txn *txn, uint64_t id, const void *data, size_t len,
		 int checked)
{
	uint64_t addr = (uint64_t)(uintptr_t)data;
	if (!s->hints || len >= (1u << HINT_LEN_BITS) || addr >> (64 - HINT_LEN_BITS))
		return;
	/* the transaction it was seen in, if that can tell it stable later:
	 * a read transaction (a write one may still be aborted, and its
	 * number used again), less than 2^32 - 1 after the table's base */
	uint64_t seen = 0, t = mdb_txn_id(txn);
	if (txn != __atomic_load_n(&s->wtxn, __ATOMIC_RELAXED) && t >= s->hint_base &&
	    t - s->hint_base < UINT32_MAX - 1)
		seen = t - s->hint_base + 1;
	uint32_t check;
	uint64_t h = hint_slot(s, id, &check);
	vf_hint *e = &s->hints[h];
	uint64_t cur = __atomic_load_n(&e->tag, __ATOMIC_RELAXED);
	if (cur && ((uint32_t)cur & HINT_CHECK_MASK) != check) {
		/* the other way, unless that one holds another id */
		vf_hint *o = &s->hints[h ^ 1];
		uint64_t ot = __atomic_load_n(&o->tag, __ATOMIC_RELAXED);
		if (!ot || ((uint32_t)ot & HINT_CHECK_MASK) == check) {
			e = o;
			cur = ot;
		}
	}
	/* one writer a slot at a time; another that finds it busy gives up
	 * (a hint is only a hint) */
	if (cur == HINT_BUSY || !__atomic_compare_exchange_n(&e->tag, &cur, HINT_BUSY, 0,
							     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&e->ptrlen, addr << HINT_LEN_BITS | len, __ATOMIC_RELAXED);
	__atomic_store_n(&e->tag, seen << 32 | check | (checked && seen ? HINT_CHECKED : 0),
			 __ATOMIC_RELEASE);
}

void vf_records_writing(vf_store *s, vf_txn *txn)
{
	uint64_t t = mdb_txn_id(txn);
	/* writers take turns: the last one's number is the largest */
	if (__atomic_load_n(&s->records_txn, __ATOMIC_RELAXED) < t)
		__atomic_store_n(&s->records_txn, t, __ATOMIC_SEQ_CST);
}

int vf_read_begin(vf_store *s, MDB_txn **txn)
{
	MDB_txn *t = NULL;
	int rc;

	pthread_rwlock_rdlock(&s->resize);
	pthread_mutex_lock(&s->pool_mu);
	if (s->npool > 0)
		t = s->pool[--s->npool];
	pthread_mutex_unlock(&s->pool_mu);
	if (t) {
		rc = mdb_txn_renew(t);
		if (rc) {
			mdb_txn_abort(t);
			t = NULL;
		}
	}
	if (!t) {
		rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &t);
		if (rc == MDB_MAP_RESIZED && reads_held(s) == 0) {
			/* the daemon beside a read-only handle grew the map: take
			 * its size (no transaction of ours may be open) */
			pthread_rwlock_unlock(&s->resize);
			pthread_rwlock_wrlock(&s->resize);
			pool_drain(s);
			rc = mdb_env_set_mapsize(s->env, 0);
			pthread_rwlock_unlock(&s->resize);
			pthread_rwlock_rdlock(&s->resize);
			if (rc == 0)
				rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &t);
		}
		if (rc) {
			pthread_rwlock_unlock(&s->resize);
			return vf_store_err(rc);
		}
	}
	if ((rc = reads_add(s, 1))) {
		mdb_txn_abort(t);
		pthread_rwlock_unlock(&s->resize);
		return -rc;
	}
	*txn = t;
	return 0;
}

void vf_read_end(vf_store *s, MDB_txn *txn)
{
	if (!txn)
		return;
	reads_add(s, -1); /* the thread's slot exists: no allocation, no failure */
	mdb_txn_reset(txn);
	pthread_mutex_lock(&s->pool_mu);
	if (s->npool < (int)(sizeof s->pool / sizeof s->pool[0])) {
		s->pool[s->npool++] = txn;
		txn = NULL;
	}
	pthread_mutex_unlock(&s->pool_mu);
	if (txn)
		mdb_txn_abort(txn);
	pthread_rwlock_unlock(&s->resize);
}

int vf_store_grow(vf_store *s, size_t min_size)
{
	int rc = 0;
	if (s->readonly)
		return -EROFS;
	pthread_rwlock_wrlock(&s->resize);
	pool_drain(s);
	/* double, or grow by less when the address space is limited (at
	 * least by an eighth, or to min_size) */
	size_t want = s->mapsize * 2;
	while (want < min_size && want <= SIZE_MAX / 4)
		want *= 2;
	size_t floor = s->mapsize + (s->mapsize / 8 > VF_MAP_STEP ? s->mapsize / 8 : VF_MAP_STEP);
	if (floor < min_size)
		floor = min_size;
	want = map_fit(s->mapsize, map_round(want), map_round(floor));
	int moved = want != 0; /* (a failed remap may have moved it too) */
	if (!moved)
		rc = ENOMEM; /* the environment keeps its map, and the hints hold */
	else if ((rc = mdb_env_set_mapsize(s->env, want)) == 0)
		__atomic_store_n(&s->mapsize, want, __ATOMIC_RELAXED); /* (vf_store_reserve() reads it unlocked) */
	if (moved)
		s->map_epoch++;
	/* no reader holds a hint now: the table takes the size a write wanted
	 * for it meanwhile (a new one, empty), else it is emptied if the map
	 * may have moved */
	uint64_t slots_wanted = __atomic_load_n(&s->hint_want, __ATOMIC_RELAXED);
	if (s->hints && (slots_wanted <= s->hint_mask + 1 ||
			 hint_swap_locked(s, slots_wanted)) && moved)
		memset(s->hints, 0, (s->hint_mask + 1) * sizeof(vf_hint));
	pthread_rwlock_unlock(&s->resize);
	return vf_store_err(rc);
}

int vf_write_waiters(vf_store *s)
{
	return __atomic_load_n(&s->write_waiters, __ATOMIC_RELAXED);
}

void vf_write_yield(vf_store *s)
{
	for (int i = 0; i < 40 && vf_write_waiters(s) > 0; i++)
		nanosleep(&(struct timespec){0, 500000}, NULL);
}

/* Is the store's filesystem (nearly) out of space?  LMDB says so as ENOSPC
 * when a write fails, but as EIO when a write comes up short, which is how
 * a full filesystem usually ends one; and MDB_MAP_FULL only says the map is
 * too small.  Under FS_FULL_BYTES free counts as full: LMDB writes up to a
 * thousand pages a call. */
#define FS_FULL_BYTES ((uint64_t)16 << 20)
static int fs_full(const vf_store *s)
{
	struct statvfs fs;
	return statvfs(s->dir, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < FS_FULL_BYTES;
}

/* Free the reader slots of processes that died holding a read transaction
 * (a reader killed with -9): such a slot pins its snapshot, so no page
 * freed after it could be reused and the file would grow with every
 * rewrite until the next open.  LMDB checks only at open; every write
 * checks first: a scan of the reader table and one lock test per other
 * process that reads the store, cheap beside a durable commit. */
static void readers_clear(vf_store *s)
{
	int dead = 0;
	mdb_reader_check(s->env, &dead);
}

int vf_write(vf_store *s, vf_write_fn fn, void *arg)
{
	if (s->readonly)
		return -EROFS;
	readers_clear(s);
	for (int attempt = 0; attempt < 40; attempt++) {
		MDB_txn *txn;
		int rc;
		pthread_rwlock_rdlock(&s->resize);
		__atomic_add_fetch(&s->write_waiters, 1, __ATOMIC_RELAXED);
		rc = mdb_txn_begin(s->env, NULL, 0, &txn);
		__atomic_sub_fetch(&s->write_waiters, 1, __ATOMIC_RELAXED);
		if (rc) {
			pthread_rwlock_unlock(&s->resize);
			return vf_store_err(rc);
		}
		int committing = 0;
		vf_writeback_begin(&s->wb);
		__atomic_store_n(&s->wtxn, txn, __ATOMIC_RELAXED);
		rc = fn(txn, arg);
		__atomic_store_n(&s->wtxn, NULL, __ATOMIC_RELAXED);
		if (rc == 0) {
			committing = 1;
			rc = mdb_txn_commit(txn);
		} else {
			mdb_txn_abort(txn);
		}
		vf_writeback_end(&s->wb);
		pthread_rwlock_unlock(&s->resize);
		if (rc == 0)
			return 0;
		/* a commit writes the pages: its ENOSPC is the filesystem's,
		 * while a full map is MDB_MAP_FULL */
		int map_full = rc == MDB_MAP_FULL || (!committing && rc == -ENOSPC);
		rc = vf_store_err(rc);
		if ((rc == -ENOSPC || rc == -EIO) && fs_full(s))
			return -ENOSPC; /* a larger map would not help */
		if (map_full) {
			/* the map is full: growing it waits for every transaction
			 * of the process to end, never from a thread that holds
			 * one itself */
			if (reads_held(s) > 0)
				return -ENOSPC;
			int g = vf_store_grow(s, 0);
			if (g)
				return g;
			__atomic_add_fetch(&s->writes_redone, 1, __ATOMIC_RELAXED);
			continue;
		}
		return rc;
	}
	return -ENOSPC;
}

uint64_t vf_store_writes_redone(vf_store *s)
{
	return __atomic_load_n(&s->writes_redone, __ATOMIC_RELAXED);
}

int vf_store_reserve(vf_store *s, uint64_t bytes)
{
	if (bytes > VF_RESERVE_MAX)
		return -ENOMEM;
	uint64_t used = vf_store_bytes(s);
	if (used + bytes <= __atomic_load_n(&s->mapsize, __ATOMIC_RELAXED))
		return 0;
	if (reads_held(s) > 0)
		return -EDEADLK; /* growing would wait for this thread's own reads */
	return vf_store_grow(s, (size_t)(used + bytes));
}

/* mdb_env_info() reads the meta page through the map: never while the
 * map is being moved (vf_store_grow(), or a read-only handle adopting a
 * larger map). */
static int env_info(vf_store *s, MDB_envinfo *info)
{
	pthread_rwlock_rdlock(&s->resize);
	int rc = mdb_env_info(s->env, info);
	pthread_rwlock_unlock(&s->resize);
	return rc;
}

uint64_t vf_store_bytes(vf_store *s)
{
	MDB_envinfo info;
	MDB_stat st;
	if (env_info(s, &info) || mdb_env_stat(s->env, &st))
		return 0;
	return (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
}

uint64_t vf_store_version(vf_store *s)
{
	MDB_envinfo info;
	return env_info(s, &info) ? 0 : info.me_last_txnid;
}

uint64_t vf_store_used_bytes(vf_store *s, MDB_txn *txn)
{
	MDB_envinfo info;
	MDB_stat st;
	MDB_cursor *cur;
	MDB_val k, d;
	uint64_t free_pages = 0;
	if (mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &st))
		return 0;
	/* the free list (database 0): each value is a page-number list whose
	 * first word is its length */
	if (mdb_cursor_open(txn, 0, &cur) == 0) {
		while (mdb_cursor_get(cur, &k, &d, MDB_NEXT) == 0) {
			size_t n;
			if (d.mv_size >= sizeof n) {
				memcpy(&n, d.mv_data, sizeof n);
				free_pages += n;
			}
		}
		mdb_cursor_close(cur);
	}
	uint64_t pages = (uint64_t)info.me_last_pgno + 1;
	return (pages > free_pages ? pages - free_pages : 0) * st.ms_psize;
}

uint64_t vf_store_copy_bytes(vf_store *s, MDB_txn *txn)
{
	MDB_stat fst, st;
	uint64_t used = vf_store_used_bytes(s, txn);
	if (mdb_stat(txn, 0, &fst) || mdb_env_stat(s->env, &st))
		return used;
	uint64_t own = ((uint64_t)fst.ms_branch_pages + fst.ms_leaf_pages + fst.ms_overflow_pages) *
		       st.ms_psize;
	return used > own ? used - own : used;
}

void vf_store_unmap_pages(vf_store *s)
{
	/* the map's place: LMDB does not tell it, /proc/self/maps does */
	char want[4200], line[4400], real[PATH_MAX];
	snprintf(want, sizeof want, "%s/data.mdb", realpath(s->dir, real) ? real : s->dir);
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		int at = 0;
		size_t n = strlen(line);
		if (n && line[n - 1] == '\n')
			line[--n] = 0;
		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) < 2 || !at ||
		    strcmp(line + at, want))
			continue;
		/* the file's, shared: nothing is lost, a later read maps it again */
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
	}
	fclose(f);
}

int vf_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

void vf_store_prefetch(const void *p, size_t len)
{
	/* read and set by every search thread: the same value either way */
	static _Atomic long page_size;
	long page = atomic_load_explicit(&page_size, memory_order_relaxed);
	if (!page) {
		page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
		atomic_store_explicit(&page_size, page, memory_order_relaxed);
	}
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);
	vf_io_ops.willneed((void *)a, (uintptr_t)p + len - a);
}

/* A value this large is read whole, at once (centroids, assignment
 * chunks): one request instead of a fault a page. */
#define GET_PREFETCH_MIN (64 << 10)

int vf_get(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl, vf_val *out)
{
	MDB_val key = {kl, (void *)k}, val;
	int rc = mdb_get(txn, dbi, &key, &val);
	if (rc)
		return layout_rc(rc);
	out->len = val.mv_size;
	out->data = val.mv_data;
	if (val.mv_size >= GET_PREFETCH_MIN)
		vf_store_prefetch(val.mv_data, val.mv_size);
	return 0;
}

int vf_put(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl, const void *d,
	   size_t dl, unsigned flags)
{
	MDB_val key = {kl, (void *)k}, val = {dl, (void *)d};
	return layout_rc(mdb_put(txn, dbi, &key, &val, flags & VF_APPEND ? MDB_APPEND : 0));
}

int vf_put_new(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl, const void *d, size_t dl,
	       vf_val *old)
{
	MDB_val key = {kl, (void *)k}, val = {dl, (void *)d};
	int rc = mdb_put(txn, dbi, &key, &val, MDB_NOOVERWRITE);
	if (rc == MDB_KEYEXIST) {
		old->len = val.mv_size;
		old->data = val.mv_data;
		return -EEXIST;
	}
	return layout_rc(rc);
}

int vf_del(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl)
{
	MDB_val key = {kl, (void *)k};
	return layout_rc(mdb_del(txn, dbi, &key, NULL));
}

int vf_cursor_open(vf_txn *txn, vf_dbi dbi, vf_cursor **cur)
{
	return layout_rc(mdb_cursor_open(txn, dbi, cur));
}

void vf_cursor_close(vf_cursor *cur)
{
	mdb_cursor_close(cur);
}

uint64_t vf_thread_major_faults(void)
{
	return vf_io_ops.major_faults();
}

/* A walk (many steps forward in a row on one thread: a scan of every
 * record, the location-hint fill, verify, an export) that waits for pages
 * reads ahead of itself, WALK_AHEAD bytes of the file past the value it is
 * at, again each time it has gone half of that: the map is read without
 * the kernel's read-around, and a family written in key order lies mostly
 * in file order.  Whether it waits is looked at every WALK_LOOK bytes (the
 * thread's major faults): a walk in memory makes no madvise() calls.  A
 * query's few steps through one cluster's entries read nothing ahead. */
#define WALK_AHEAD ((uintptr_t)2 << 20)
#define WALK_LOOK ((uintptr_t)256 << 10)
#define WALK_STEPS 64 /* steps forward in a row before reading ahead */

static void walk_ahead(int op, const void *at)
{
	static __thread unsigned steps, looked; /* steps in a row; at the last look */
	static __thread uintptr_t look, from, to; /* last look; read ahead: [from, to) */
	static __thread uint64_t faults;
	uintptr_t a = (uintptr_t)at;
	if (op != VF_NEXT) {
		steps = looked = 0;
		return;
	}
	/* a look when the walk has left the bytes of the last one, and at
	 * most every WALK_STEPS steps: a write transaction's values lie on
	 * pages of its own, anywhere in memory, and a look at each of their
	 * jumps cost an ingest a getrusage() every four rows */
	if (++steps < WALK_STEPS ||
	    (steps > WALK_STEPS &&
	     ((a >= look && a < look + WALK_LOOK) || steps - looked < WALK_STEPS)))
		return;
	looked = steps;
	uint64_t f = vf_thread_major_faults();
	int waited = steps > WALK_STEPS && f != faults;
	faults = f;
	look = a;
	if (!waited || (a >= from && a + WALK_AHEAD / 2 < to))
		return;
	from = a;
	to = a + WALK_AHEAD;
	vf_store_prefetch(at, WALK_AHEAD);
}

int vf_cursor_get(vf_cursor *cur, vf_val *k, vf_val *d, int op)
{
	static const MDB_cursor_op ops[] = {
		[VF_FIRST] = MDB_FIRST, [VF_NEXT] = MDB_NEXT,
		[VF_SEEK] = MDB_SET_RANGE, [VF_CURRENT] = MDB_GET_CURRENT,
		[VF_PREV] = MDB_PREV, [VF_LAST] = MDB_LAST,
	};
	MDB_val key = {k->len, k->data}, val;
	int rc = mdb_cursor_get(cur, &key, &val, ops[op]);
	if (rc)
		return layout_rc(rc);
	k->len = key.mv_size;
	k->data = key.mv_data;
	d->len = val.mv_size;
	d->data = val.mv_data;
	walk_ahead(op, val.mv_data);
	return 0;
}

int vf_cursor_del(vf_cursor *cur)
{
	return layout_rc(mdb_cursor_del(cur, 0));
}

int vf_cursor_put(vf_cursor *cur, const void *k, size_t kl, const void *d, size_t dl)
{
	MDB_val key = {kl, (void *)k}, val = {dl, (void *)d};
	return layout_rc(mdb_cursor_put(cur, &key, &val, 0));
}

int vf_cursor_prefix(vf_cursor *cur, const void *prefix, size_t plen, vf_val *k, vf_val *d,
		     int op)
{
	if (op == VF_SEEK) {
		k->len = plen;
		k->data = (void *)prefix;
	}
	int rc = vf_cursor_get(cur, k, d, op);
	if (rc == 0 && (k->len < plen || memcmp(k->data, prefix, plen)))
		return -ENOENT;
	return rc;
}

int vf_clear(vf_txn *txn, vf_dbi dbi)
{
	return layout_rc(mdb_drop(txn, dbi, 0));
}

int vf_drop_prefix(vf_txn *txn, vf_dbi dbi, const void *prefix, size_t plen)
{
	MDB_cursor *cur;
	MDB_val k = {plen, (void *)prefix}, d;
	int rc = mdb_cursor_open(txn, dbi, &cur);
	if (rc)
		return layout_rc(rc);
	rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
	while (rc == 0 && k.mv_size >= plen && !memcmp(k.mv_data, prefix, plen)) {
		if ((rc = mdb_cursor_del(cur, 0)))
			break;
		/* after a delete the cursor is on the next key, if any */
		rc = mdb_cursor_get(cur, &k, &d, MDB_GET_CURRENT);
		if (rc == MDB_NOTFOUND || rc == EINVAL)
			rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : layout_rc(rc);
}

uint64_t vf_txn_id(vf_txn *txn)
{
	return mdb_txn_id(txn);
}

/* A backup goes through a pipe drained here: LMDB's copy can report
 * success when its last write failed, so the bytes are written to fd by
 * this file, every error seen, and the stream's length checked against
 * the copy's second meta page (the one that holds the main database), its
 * last page number. */
#define META_LAST_PG 136 /* page header 16 + magic, version, address, mapsize,
			    two database records: MDB_meta's mm_last_pg */
typedef struct backup_drain {
	int in, out;
	int err;              /* first write error (negative errno) */
	uint64_t bytes;       /* bytes of the stream */
	uint64_t last_at;     /* where the stream holds the last page number */
	unsigned char last[8];
} backup_drain;

static void *backup_drain_run(void *arg)
{
	backup_drain *d = arg;
	unsigned char buf[1 << 16];
	for (;;) {
		ssize_t n = read(d->in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0 && !d->err)
				d->err = -errno;
			return NULL;
		}
		for (uint64_t i = 0; i < sizeof d->last; i++)
			if (d->last_at + i >= d->bytes && d->last_at + i < d->bytes + (uint64_t)n)
				d->last[i] = buf[d->last_at + i - d->bytes];
		d->bytes += (uint64_t)n;
		for (ssize_t off = 0; off < n && !d->err;) {
			ssize_t w = write(d->out, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				d->err = w < 0 ? -errno : -EIO;
			else
				off += w;
		}
	}
}

int vf_store_backup(vf_store *s, int fd)
{
	int p[2];
	pthread_t th;
	backup_drain d = {.out = fd};
	MDB_stat st;
	int rc = mdb_env_stat(s->env, &st);
	if (rc)
		return vf_store_err(rc);
	d.last_at = (uint64_t)st.ms_psize + META_LAST_PG;
	if (pipe2(p, O_CLOEXEC))
		return -errno;
	d.in = p[0];
	if ((rc = pthread_create(&th, NULL, backup_drain_run, &d))) {
		close(p[0]);
		close(p[1]);
		return -rc;
	}
	pthread_rwlock_rdlock(&s->resize);
	rc = mdb_env_copyfd2(s->env, p[1], MDB_CP_COMPACT);
	pthread_rwlock_unlock(&s->resize);
	close(p[1]);
	pthread_join(th, NULL);
	close(p[0]);
	if (rc)
		return vf_store_err(rc);
	if (d.err)
		return d.err;
	uint64_t last;
	memcpy(&last, d.last, sizeof last);
	if (d.bytes < d.last_at + sizeof last || d.bytes != (last + 1) * st.ms_psize)
		return -EIO; /* the copy came out short */
	return 0;
}
