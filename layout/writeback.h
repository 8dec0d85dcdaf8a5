/*
 * layout/writeback.h - writeback ahead of a long commit.
 *
 * A write transaction keeps its pages in memory until it commits (or LMDB
 * spills some of them to the file early); the commit writes them into the
 * page cache, then waits in fdatasync() until the disk has them all.  For
 * a transaction of a gigabyte that wait was 0.6-0.9 s, after the work was
 * done.  While a write has lasted `after_ms`, a thread of the store's
 * starts the writeback of the data file's dirty pages every `every_ms`
 * (sync_file_range(SYNC_FILE_RANGE_WRITE), through the io seam), through
 * the commit's own writes, so the disk works while the writer does and the
 * final wait covers only the last pages.  The kernel may write any dirty
 * page back at any time anyway, so starting sooner changes nothing that
 * LMDB relies on; it waits for nothing and reports no error (the commit's
 * fdatasync() does).  A store that never writes never starts the thread.
 */
#ifndef VF_WRITEBACK_H
#define VF_WRITEBACK_H

#include <pthread.h>
#include <stdint.h>

typedef struct vf_writeback {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int fd;            /* the data file (LMDB's descriptor) */
	int started, stop;
	int idle;          /* the thread waits for a write to begin */
	uint64_t since_ns; /* when the write in progress began; 0: none */
	uint32_t after_ms, every_ms;
	uint64_t rounds;   /* writebacks started (atomic), for tests */
} vf_writeback;

/* Defaults: 100 ms, 25 ms. */
void vf_writeback_init(vf_writeback *w, int fd);
/* A write transaction begins (the thread is started at the first) and
 * ends (committed or not).  Best effort: without a thread, nothing. */
void vf_writeback_begin(vf_writeback *w);
void vf_writeback_end(vf_writeback *w);
/* Stop and join the thread (before the descriptor closes). */
void vf_writeback_fini(vf_writeback *w);

#endif
