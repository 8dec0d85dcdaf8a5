/*
 * fs/fuse_compat.h - the libfuse low-level API as the daemon uses it, with
 * the session loop (loop.c) and FUSE passthrough (passthrough.c).
 */
#ifndef VECFS_FS_FUSE_COMPAT_H
#define VECFS_FS_FUSE_COMPAT_H

#define FUSE_USE_VERSION 35

#include <fuse_lowlevel.h>
#include <stdint.h>

/* ---------------------------------------------------------------- loop.c */

/* Serve the session with worker threads, one pinned to each CPU (and more,
 * up to max_threads, while all are busy), until it ends.  0 or -errno. */
int fs_loop(struct fuse_session *se, unsigned max_threads);
/* Make fs_loop() return once the requests being handled are answered. */
void fs_loop_stop(void);
/* A reply is about to go out from the calling thread: a worker of the loop
 * counts as waiting from now on (a no-op on other threads). */
void fs_loop_replied(void);
/* The calling worker's request has work that may take long or wait on the
 * kernel: another worker is to listen meanwhile.  Requests begin so, but
 * releases and forgets; the work a release may have (a commit, a query, a
 * config or ctl write: flush_handle()) calls this. */
void fs_loop_long(void);
/* How the session loop stands (see fs/loop.c). */
typedef struct fs_loop_stats {
	unsigned workers;        /* running now */
	uint64_t extra_started;  /* extra workers started since the loop began */
	unsigned listening;      /* workers the device wakes for their own sake
				  * (not as a standby) */
	char listening_cpus[64]; /* their CPUs, "0,1"; "*" for one not pinned */
} fs_loop_stats;
/* Returns 0 (and nothing is set) unless fs_loop() serves the session. */
int fs_loop_counts(fs_loop_stats *st);

/* ---------------------------------------------------------------- passthrough.c */

/* Route the session's device I/O through passthrough.c: replies tell the
 * loop (fs_loop_replied()), and with `passthrough` the INIT reply asks for
 * passthrough when the kernel offers it.  After fuse_session_mount(),
 * before the loop.  0 or -errno. */
int pt_install(struct fuse_session *se, int passthrough);
/* 1 while registering backing files may work. */
int pt_usable(void);
/* Register fd (a regular file) as a backing file: its id (> 0), or -errno
 * when passthrough is not available. */
int pt_backing_open(int fd);
void pt_backing_close(int id);
/* The session's device is going away: backing files go with it. */
void pt_detach(void);
/* Answer OPEN like fuse_reply_open(), with reads and writes passed through
 * to the backing file `backing_id`. */
int pt_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);

#endif
