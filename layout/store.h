/*
 * layout/store.h - the LMDB environment of one store: its databases
 * (key families), transactions, map growth, reads, writes and walks of
 * the key families, and error mapping.  The rest of the library reaches
 * LMDB only through this header (and meta.h, assign.h over it).
 *
 * Databases (each a key family; all keys big-endian so byte order is
 * numeric order):
 *   meta      "config", "counters", "active"           -> fixed structs
 *   records   id u64                                    -> record value
 *   keys      user key bytes                            -> id u64
 *   changes   seq u64                                   -> vf_change
 *   gens      gen u64 | kind u8 | sub u64               -> meta, centroids,
 *                                                          assignment chunks
 *   postings  gen u64 | cluster u32 | kind u8 | sub u64 -> manifest,
 *             tombstones, posting blocks, delta postings (one cluster is
 *             one contiguous key range)
 *   staging   batch u64 | row u64 -> rows of large writes that stores
 *             made by earlier versions staged here (no longer written;
 *             emptied at every write open: never visible as records)
 *   payloads  path | 0 | type u8 | value | id u64 -> nothing: the terms of
 *             records' payloads (engine/payload_index.c); 0xff | id u64:
 *             a record whose payload is not all indexed
 */
#ifndef VF_STORE_H
#define VF_STORE_H

#include "writeback.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* A transaction (read or write) and a position in one key family: LMDB's
 * own, opaque outside layout/, which alone includes <lmdb.h>. */
typedef struct MDB_txn vf_txn;
typedef struct MDB_cursor vf_cursor;
/* A key family (one LMDB database) of an open store. */
typedef unsigned int vf_dbi;
/* Bytes: a key or value to write, or one read, which points into the map
 * and stays valid until its transaction ends or writes to it. */
typedef struct vf_val {
	size_t len;
	void *data;
} vf_val;

/* Errors.  Every call below returns 0 or a negative code: -ENOENT when a
 * key is missing or a walk went past the last key, another negative errno,
 * or one of LMDB's own codes (a damaged file, a full map), which
 * vf_store_err() maps to a negative errno like any other. */
int vf_store_err(int rc);
/* Is rc one of LMDB's own codes (not an errno)? */
int vf_store_own_code(int rc);
/* rc in words (LMDB's name and message for its own codes). */
const char *vf_store_strerror(int rc);

typedef struct vf_store {
	struct MDB_env *env;
	vf_dbi meta, records, keys, changes, gens, postings, staging, payloads;
	int has_payloads;         /* 0: a read-only store made before there was one */
	pthread_rwlock_t resize;  /* txns shared, map growth exclusive */
	pthread_key_t reads_key;  /* read transactions each thread holds */
	pthread_mutex_t pool_mu;  /* pool of reset read transactions */
	vf_txn *pool[64];
	int npool;
	size_t mapsize;
	uint64_t map_epoch;       /* grows each time the map may have moved */
	struct vf_hint *hints;    /* record locations, see vf_hint_get */
	uint64_t hint_mask;       /* slots - 1 */
	uint64_t hint_want;       /* slots wanted when the table could not grow */
	uint64_t hint_max;        /* slots at most (vf_hint_init()) */
	int hint_lean;            /* the store does not fit in memory: a small
				   * table, not filled ahead */
	uint64_t hint_base;       /* hints keep the transaction they were seen in
				   * as 1 + its distance from this one */
	uint64_t records_txn;     /* the last write transaction that wrote (or
				   * began to write) the records family */
	vf_txn *wtxn;             /* the write transaction inside vf_write() */
	int lockfd;               /* -1 when read-only: no lock of ours */
	int readonly;             /* vf_store_open_readonly(): every write is -EROFS */
	int write_waiters;        /* vf_write() calls waiting for the writer lock */
	uint64_t writes_redone;   /* vf_write() calls run again after the map grew */
	struct ZSTD_CCtx_s *assign_cc; /* the writer's compressor of assignment
					* chunks (assign.c), made at first use */
	vf_writeback wb;          /* writeback ahead of a long commit */
	char dir[4096];
} vf_store;

/* Open the store in `dir` (created if missing).  `mapsize` 0 = automatic.
 * -EBUSY when another handle or process holds it. */
int vf_store_open(const char *dir, size_t mapsize, vf_store **out, char *err,
		  size_t errlen);
/* Open an existing store for reading only, also while a daemon holds it
 * (LMDB lets readers of other processes in): nothing is created, cleared
 * or locked; vf_write() fails with -EROFS. */
int vf_store_open_readonly(const char *dir, vf_store **out, char *err, size_t errlen);
void vf_store_close(vf_store *s);

/* Read transactions: taken from a pool of reset transactions. */
int vf_read_begin(vf_store *s, vf_txn **txn);
void vf_read_end(vf_store *s, vf_txn *txn);

/* How many vf_write() calls wait for the writer lock now. */
int vf_write_waiters(vf_store *s);
/* Between two steps of a long job that writes in steps: the writer lock is
 * not fair, so let the writes waiting for it go first (up to 20 ms), or
 * they could wait for several steps. */
void vf_write_yield(vf_store *s);

/* Run fn inside one write transaction and commit it durably.  When the map
 * is full the transaction is aborted, the map grown and fn run again, so fn
 * must have no effect outside the transaction (from a thread that holds a
 * read transaction of this store the map cannot grow: -ENOSPC; one of
 * another store does not matter).  fn returns 0, a negative errno, or an
 * LMDB code. */
typedef int (*vf_write_fn)(vf_txn *txn, void *arg);
int vf_write(vf_store *s, vf_write_fn fn, void *arg);

/* Record location hints: where a record's value was last seen in the map,
 * so a hot read can skip the tree descent.  A hint is only a guess: the
 * page may have been freed and reused since, and a writer may reuse it
 * while the caller reads it; the caller must copy what it finds, check the
 * copy (the record's checksum and sequence number) and use only the copy,
 * falling back to a lookup.  A hint always lies inside the file (LMDB files
 * never shrink), so reading it is safe; growing the map (which may move it)
 * drops them all.  Two ids may share a slot's check bits: the sequence
 * number check tells them apart.
 *
 * Except when the hint is known to lie inside the caller's own snapshot
 * (VF_HINT_STABLE from vf_hint_get()): it was seen in a read transaction, and no transaction that
 * wrote the records family has begun committing between that one and the
 * caller's (vf_hint_view_of()).  Then the place holds the record of that
 * snapshot, which LMDB keeps from reuse until the caller's transaction
 * ends: it may be read in place like a value from vf_get().
 *
 * The table has four slots for each of `records` ids (16 bytes a slot,
 * 4096 to 4M slots: 64 KB to 64 MB), fewer when the store's file and the
 * largest table would not both fit in the memory the process may hold
 * (the machine's, or its memory cgroup's limit): then at most 1/32 of that
 * memory, the rest left to the page cache.  Two-way and lock-free; call get and
 * put from inside a read or write transaction.  vf_hint_reserve() makes a
 * larger table, empty, once `records` fill more than half of it: call it
 * after a write, holding no transaction.  It never waits: while any
 * transaction runs it leaves the size wanted for the next try, or for the
 * next growth of the map (which has to wait for them anyway). */
int vf_hint_init(vf_store *s, uint64_t records);
int vf_hint_reserve(vf_store *s, uint64_t records);
/* Is the table worth filling ahead with a walk of every record?  Not when
 * the store does not fit in memory: the walk reads the whole store through
 * a page cache that cannot hold it, pushing out the pages searches read,
 * for places most of which the small table cannot keep.  Its hints then
 * come from the lookups searches make. */
int vf_hint_fill_wanted(const vf_store *s);
/* 1 when the store's file and a full record-location table do not both fit
 * in the memory the process may hold (the machine's, its memory cgroup's
 * limit, or VECFS_MEMORY_LIMIT), as seen when it was opened (hint_lean):
 * what reads every page of it would push out the pages searches need. */
int vf_store_exceeds_memory(const vf_store *s);
/* Which hints lie inside the snapshot of read transaction txn. */
typedef struct vf_hint_view {
	uint64_t lo, hi; /* seen in a transaction lo..hi (none if lo > hi) */
} vf_hint_view;
void vf_hint_view_of(const vf_store *s, vf_txn *txn, vf_hint_view *out);
/* The place and length id was last seen at, or NULL.  *state (when not
 * NULL): VF_HINT_STABLE if it lies inside the snapshot `view` describes
 * (view NULL: never), and then also VF_HINT_CHECKED if its put said the
 * bytes there had been checked (they cannot have changed since). */
#define VF_HINT_STABLE 1
#define VF_HINT_CHECKED 2
const void *vf_hint_get(const vf_store *s, const vf_hint_view *view, uint64_t id,
			size_t *len, int *state);
/* Start reading the slots of id (a later vf_hint_get finds them cached). */
void vf_hint_prefetch(const vf_store *s, uint64_t id);
/* id's value is at data..+len in the snapshot of txn (a read transaction;
 * a hint put inside vf_write() is never stable); `checked`: the caller
 * has checked those bytes in that snapshot. */
void vf_hint_put(vf_store *s, vf_txn *txn, uint64_t id, const void *data, size_t len,
		 int checked);
/* For record.c: txn, a write transaction, is about to write the records
 * family (before its first such write: stable hints end there). */
void vf_records_writing(vf_store *s, vf_txn *txn);

/* Grow the map (exclusive): used by vf_write; exposed for tests. */
int vf_store_grow(vf_store *s, size_t min_size);

/* Make sure `bytes` more fit in the map (grows it if not).  Never from
 * inside a vf_write() function (growth waits for every transaction to
 * end); -EDEADLK, nothing grown, from a thread that holds a read
 * transaction of s; -ENOMEM for more than VF_RESERVE_MAX.  A large write
 * asks first: one that fills the map is run again from its start. */
#define VF_RESERVE_MAX ((uint64_t)1 << 50)
int vf_store_reserve(vf_store *s, uint64_t bytes);
/* How many times vf_write() ran a write again because it filled the map. */
uint64_t vf_store_writes_redone(vf_store *s);

/* Bytes used by the data file. */
uint64_t vf_store_bytes(vf_store *s);
/* The id of the last committed write transaction: the store's version. */
uint64_t vf_store_version(vf_store *s);
/* Bytes in use in the snapshot of txn: the file's pages less the free
 * pages waiting for reuse (the file itself never shrinks). */
uint64_t vf_store_used_bytes(vf_store *s, vf_txn *txn);

/* One key of one family: read (-ENOENT when missing), write (flags 0 or
 * VF_APPEND: the key sorts after every key of the family), delete. */
#define VF_APPEND 1
/* Bytes of the compacted copy vf_store_backup() would write of txn's
 * snapshot: the pages in use but the free list's own. */
uint64_t vf_store_copy_bytes(vf_store *s, vf_txn *txn);
/* Let the process's mapping of the store's pages go (the pages stay in
 * the page cache; a later read maps them again): after a pass over much
 * of the store, so that it does not stay in the process's resident set. */
void vf_store_unmap_pages(vf_store *s);
/* Ask for the pages that hold p[0..len) (a value read from the store, in
 * its map) to be read from disk now, without waiting for them: a reader
 * that knows what it will read next starts all of it at once instead of
 * waiting for one page fault after another.  Pages already in memory cost
 * a look-up each.  (The map is read without read-around: a page fault
 * reads its one page, so a random read costs one page of I/O, and a pass
 * over many values reads ahead of itself: vf_cursor_get().) */
void vf_store_prefetch(const void *p, size_t len);
/* The major page faults of the calling thread so far (each one a page it
 * waited to read from disk); 0 where the system does not say. */
uint64_t vf_thread_major_faults(void);
/* Write all of buf to fd (retrying short writes): 0 or -errno. */
int vf_write_all(int fd, const void *buf, size_t len);

int vf_get(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl, vf_val *out);
int vf_put(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl, const void *d,
	   size_t dl, unsigned flags);
int vf_del(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl);
/* Write a key that is not there yet; -EEXIST when it is, with its value in
 * *old (one search where a get then a put make two). */
int vf_put_new(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl, const void *d, size_t dl,
	       vf_val *old);

/* Walking a family in key order.  vf_cursor_get() moves the cursor and
 * returns its key and value (-ENOENT past the last key): VF_FIRST to the
 * first key, VF_NEXT to the next one, VF_SEEK to the first key at or after
 * *k, VF_CURRENT stays (after vf_cursor_del() it is on the key that
 * followed the deleted one, or -ENOENT/-EINVAL when there was none). */
enum { VF_FIRST, VF_NEXT, VF_SEEK, VF_CURRENT, VF_PREV, VF_LAST };
int vf_cursor_open(vf_txn *txn, vf_dbi dbi, vf_cursor **cur);
void vf_cursor_close(vf_cursor *cur);
int vf_cursor_get(vf_cursor *cur, vf_val *k, vf_val *d, int op);
int vf_cursor_del(vf_cursor *cur);
/* Write a key through the cursor, which is left on it: keys written in
 * ascending order through one cursor skip most of the search from the
 * root that vf_put() makes for each (the next key is often on the same
 * page). */
int vf_cursor_put(vf_cursor *cur, const void *k, size_t kl, const void *d, size_t dl);
/* A walk over the keys that start with prefix[0..plen): vf_cursor_get()
 * with op VF_SEEK (k is set to the prefix) to the first of them, then
 * VF_NEXT; -ENOENT past the last. */
int vf_cursor_prefix(vf_cursor *cur, const void *prefix, size_t plen, vf_val *k, vf_val *d,
		     int op);

/* Delete every key of the family. */
int vf_clear(vf_txn *txn, vf_dbi dbi);
/* Delete every key of the family that starts with prefix[0..plen). */
int vf_drop_prefix(vf_txn *txn, vf_dbi dbi, const void *prefix, size_t plen);

/* The id of txn's snapshot: the last write transaction committed before it
 * began (a read), or its own (a write). */
uint64_t vf_txn_id(vf_txn *txn);

/* A consistent, compacted copy of the store's file, written to fd. */
int vf_store_backup(vf_store *s, int fd);

#endif
