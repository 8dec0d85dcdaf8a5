/*
 * fs/fuse_compat.h - the daemon's FUSE session: starting it in the
 * background, mounting, serving, stopping, and FUSE passthrough.
 *
 * What libfuse 3.14 lacks is made up here, behind this interface only:
 * passthrough (passthrough.c asks for it in the INIT reply and writes the
 * OPEN reply itself; with a libfuse that knows FUSE_CAP_PASSTHROUGH, it
 * uses libfuse's), and a session loop of its own (loop.c: workers pinned
 * to CPUs, woken one at a time).  The rest of fs/ calls only what is
 * declared here.
 */
#ifndef VECFS_FS_FUSE_COMPAT_H
#define VECFS_FS_FUSE_COMPAT_H

#define FUSE_USE_VERSION 35

#include <fuse_lowlevel.h>
#include <stdint.h>

/* A libfuse without FUSE_CAP_PASSTHROUGH (3.14) can neither ask for
 * passthrough nor name a backing file: passthrough.c does both on the
 * device's bytes */
#ifndef FUSE_CAP_PASSTHROUGH
#define FC_OWN_PASSTHROUGH 1
#else
#define FC_OWN_PASSTHROUGH 0
#endif

/* The session, its loop and the passthrough state: one per daemon, made by
 * fs_fc_new() before anything else of the session. */
typedef struct fuse_compat fuse_compat;

/* How the session is served. */
typedef struct fc_options {
	const char *mountpoint;
	int foreground;        /* -f: no fork */
	int single;            /* -s: one thread (libfuse's loop) */
	int clone_fd;          /* -o clone_fd: libfuse's multithreaded loop */
	unsigned max_threads;  /* -o max_threads */
	unsigned max_idle;     /* -o max_idle_threads (with clone_fd) */
	int passthrough;       /* serve files from backing files when possible */
} fc_options;

fuse_compat *fs_fc_new(void);
void fs_fc_free(fuse_compat *fc);

/* Unless foreground: fork; the parent waits for fs_fc_started() of the child
 * and exits with its status.  Returns in the child (or, foreground, at
 * once): 0, or -errno when the fork failed. */
int fs_fc_background(fuse_compat *fc, const fc_options *o);
/* Tell the waiting parent how the start went: 0 (mounted: the parent
 * exits 0, the child leaves its terminal and the current directory) or
 * the exit status.  Later calls do nothing. */
void fs_fc_started(fuse_compat *fc, int status);

/* Create the session from the options (before anything is made of them,
 * STORE included).  userdata is what handlers get from
 * fuse_req_userdata(); it must begin with the fuse_compat pointer fc (the
 * device's I/O hooks get only the userdata).  0, or -EINVAL with a
 * message when the session cannot be made (a bad -o option). */
int fs_fc_session_make(fuse_compat *fc, struct fuse_args *args, const struct fuse_lowlevel_ops *ops,
		    void *userdata);
/* Mount the session made and take SIGINT, SIGTERM and SIGHUP, which end
 * it (on_stop(userdata) is called first).  0, or -1 with a message (one
 * that names /dev/fuse when it is missing or may not be opened): nothing
 * to tear down then. */
int fs_fc_mount(fuse_compat *fc, const fc_options *o, void (*on_stop)(void *));
/* Serve requests until the session ends: 0, or 1 when it ended on an
 * error.  Does not return when requests still run a minute after a stop. */
int fs_fc_serve(fuse_compat *fc, const fc_options *o);
/* Unmount (unless a signal did) and destroy the session. */
void fs_fc_unmount(fuse_compat *fc);
/* The session, for notifications. */
struct fuse_session *fs_fc_session(fuse_compat *fc);
/* The mountpoint, absolute ("" before the mount). */
const char *fs_fc_mountpoint(fuse_compat *fc);

/* INIT: ask for passthrough when the kernel offers it and it was wanted. */
void fs_fc_init_conn(fuse_compat *fc, struct fuse_conn_info *conn);

/* The calling worker's request has work that may take long or wait on the
 * kernel (a commit, a query, a config or ctl write): another worker is to
 * listen meanwhile.  A no-op outside the daemon's own loop. */
void fs_fc_request_long(fuse_compat *fc);

/* How the session loop stands (see fs/loop.c). */
typedef struct fs_loop_stats {
	unsigned workers;        /* running now */
	uint64_t extra_started;  /* extra workers started since the loop began */
	unsigned listening;      /* workers the device wakes for their own sake
				  * (not as a standby) */
	char listening_cpus[64]; /* their CPUs, "0,1"; "*" for one not pinned */
} fs_loop_stats;
/* Returns 0 (and nothing is set) unless the daemon's own loop serves. */
int fs_fc_loop_counts(fuse_compat *fc, fs_loop_stats *st);

/* 1 while registering backing files may work. */
int fs_fc_backing_usable(fuse_compat *fc);
/* Register fd (a regular file) as a backing file: its id (> 0), or -errno
 * when passthrough is not available. */
int fs_fc_backing_open(fuse_compat *fc, int fd);
void fs_fc_backing_close(fuse_compat *fc, int id);
/* Answer OPEN like fuse_reply_open(), with reads and writes passed through
 * to the backing file `backing_id`. */
int fs_fc_reply_open_backing(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);

#endif
