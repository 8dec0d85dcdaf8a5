/*
 * fs/daemon.h - the daemon's one context: everything it serves and every
 * piece of state it keeps.
 *
 * The daemon maps the vecfs tree (README, config, stats, errors, ctl,
 * backup, ingest/, records/, query/, generations/) onto the library in
 * vecfs.h.  It holds no index logic: it parses what users write, calls the
 * library, and formats what the library returns.  main() makes one
 * fs_daemon and hands it to the FUSE session as its userdata: handlers
 * reach it with fuse_req_userdata(req), threads get it when they start.
 *
 * The files of fs/: main.c (options; start, mount, serve, stop), daemon.c
 * (this context's init and fini), ops*.c (the FUSE operations, by area:
 * see ops.h), inode.c (nodes and their tables), out_cache.c (how a
 * session's out is served), render.c (what readable files read),
 * ingest.c (files written into ingest/), query.c (query sessions),
 * ahead.c (searching ahead), control.c (ctl and backup), generations.c,
 * config_text.c, errors.c, sbuf.c, number.c; fuse_compat.c, loop.c and
 * passthrough.c (the FUSE session, behind fuse_compat.h).
 */
#ifndef VECFS_FS_DAEMON_H
#define VECFS_FS_DAEMON_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ahead.h"
#include "control.h"
#include "errors.h"
#include "fuse_compat.h"
#include "inode.h"
#include "out_cache.h"
#include "query.h"
#include "vecfs.h"

#define SESSIONS_DEFAULT 1024     /* -o max_sessions */
#define QUERY_INPUT_MB_DEFAULT 1024 /* -o query_input_mb */
#define QUERY_RESULTS_DEFAULT (4u << 20) /* -o query_results: vectors x k */
#define QUERY_OUTPUT_MB_DEFAULT 256 /* -o query_output_mb */
#define READ_BUFFER_MB_DEFAULT 256 /* -o read_buffer_mb */

struct fs_daemon {
	fuse_compat *fuse;      /* first: the FUSE device's I/O hooks find it
				 * through the session's userdata (see
				 * fuse_compat.h); the session, its loop */
	vecfs *store;           /* opened and closed by the daemon's owner */
	const char *store_dir;  /* absolute path of STORE: temporary files of
				 * backups and ingests go there */
	atomic_int stopping;    /* set once the daemon shuts down: running
				 * builds stop */
	unsigned max_sessions;  /* query sessions open at once */
	size_t max_write;       /* the largest WRITE the kernel sends (INIT):
				 * a longer write() comes cut in pieces */
	qbudget query_input;    /* what the sessions' `in` may hold */
	qbudget query_results;  /* results (vectors x k) sessions may ask
				 * for and hold */
	qbudget query_output;   /* bytes of rendered out, out.json and
				 * stats sessions may hold */
	_Atomic uint64_t query_serial; /* query sessions made */
	err_log errors;         /* `errors` */
	node_table tree;        /* the nodes (inode.c) */
	out_cache out;          /* how sessions' out are served (out_cache.c) */
	build_state build;      /* builds started through ctl (control.c) */
	ahead *ahead;           /* searching ahead (ahead.c) */
	size_t ingest_max;      /* bytes the buffers of open ingest files may
				 * hold (-o ingest_buffer_mb) */
	_Atomic size_t ingest_used; /* bytes they hold */
	uint64_t mount_ns;      /* when the daemon started (ns since the epoch) */
	_Atomic uint64_t last_delete; /* records deleted by the last commit of `delete` */
	qbudget reads;          /* bytes of the renderings open read handles
				 * hold (-o read_buffer_mb); its mu also
				 * guards the renderings (render.h) */
	_Atomic uint64_t rendered; /* contents rendered (fs_render_node()) */
	char mount_dev[32];     /* the mount's device as /proc/PID/mountinfo
				 * shows it (MAJ:MIN), set once mounted; ""
				 * if not found */
};

/* Everything but the store (dm->store stays NULL for the caller to set)
 * and the session: 0, or -ENOMEM (nothing to undo then). */
int fs_daemon_init(fs_daemon *dm, const char *store_dir, unsigned max_sessions,
		size_t query_input_bytes);
/* Undo fs_daemon_init() once no request runs (before the store closes). */
void fs_daemon_fini(fs_daemon *dm);

#endif
