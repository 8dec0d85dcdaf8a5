/*
 * fs/ops_file.c - FUSE create, open, read, write, flush, release, fsync
 * and setattr (truncation) of the tree's files.
 *
 * Every file is opened with direct_io: reads return exactly what the
 * handler replies, whatever size getattr reported.  Readable computed files
 * are rendered at open() (or taken from the handles that opened the same
 * version of the content: see render.h), so one reader sees one consistent
 * snapshot.  A session's out is the exception: it is served
 * from the kernel's page cache or from a file of the daemon's (see
 * out_cache.c), and changes in place when the session's query runs, so a
 * reader that holds it open across another process's query of the same
 * session may read a mix of both results.
 */
#include "ops.h"

#include <endian.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "config_text.h"
#include "control.h"
#include "daemon.h"
#include "errors.h"
#include "out_cache.h"
#include "render.h"
#include "sbuf.h"

static int readable(int kind)
{
	return (fs_kind_row(kind)->flags & KF_READ) != 0;
}

static int writable(int kind)
{
	return (fs_kind_row(kind)->flags & KF_WRITE) != 0;
}

typedef struct handle {
	fs_daemon *dm;
	node *n;
	/* held while a reply points into the handle: libfuse may see the
	 * RELEASE of a reader woken by that very reply before writev returns */
	pthread_mutex_t mu;
	rendering *r;  /* read snapshot */
	int fresh;     /* data was rendered by open and not read yet */
	int fd;        /* backup, export.jsonl: the stream */
	ingest *del;   /* delete, opened for writing: what it was given */
	/* held while wbuf and what follows change or are read; never while a
	 * ctl command or a config transaction runs (two threads may write or
	 * close one descriptor at once) */
	pthread_mutex_t wmu;
	sbuf wbuf;     /* config and ctl writes */
	int wdirty;
	atomic_int wrote; /* a session's in: written through this handle */
	int reader;     /* opened read-only: its close runs nothing */
	size_t checked; /* config: bytes of wbuf whose lines were checked */
	unsigned lines;
	int bad;        /* config: a line failed its check */
} handle;

/* The handling of opens a kind has of its own (kinds.h); NULL members do
 * what every file does. */
struct kind_file_ops {
	/* An open for reading, instead of rendering the content at the open:
	 * 0 or -errno. */
	int (*open_read)(handle *h);
	/* A read at off into buf, instead of one from the rendering: the
	 * bytes read, or -errno. */
	ssize_t (*read)(handle *h, char *buf, size_t size, off_t off);
	/* Any open, once its handle is made (created: by create in its
	 * directory): 0, or -errno and the open fails. */
	int (*open)(handle *h, fuse_req_t req, struct fuse_file_info *fi, int created);
	/* A write (NULL: EBADF): 0 or -errno. */
	int (*write)(handle *h, const char *buf, size_t size, off_t off, struct fuse_file_info *fi);
	/* 1: write itself asks for a standby worker when it has long work to
	 * do (fs_fc_request_long()); 0: fs_op_write() asks before it.  A short
	 * write makes none at its start (quick_request() in loop.c). */
	int write_quick;
	/* The query call (VECFS_IOC_QUERY, vecfs.h; NULL: ENOTTY): the
	 * call's size bytes in buf answered into out, at most size bytes: 0
	 * or -errno. */
	int (*call)(handle *h, const char *buf, size_t size, sbuf *out);
	/* A close (FLUSH) by lock owner `owner` of process pid (NULL: finish). */
	int (*flush)(handle *h, uint64_t owner, pid_t pid);
	/* What a close of the handle runs (pid 0: its last, RELEASE). */
	int (*finish)(handle *h, pid_t pid);
	/* A truncation to size (h: the handle it is made through, or NULL):
	 * 0, or -errno with an errors line (NULL: refused, read-only). */
	int (*truncate)(fs_daemon *dm, node *n, handle *h, off_t size);
	/* n has no handle open any more (dm->tree.mu held; undo: the open of
	 * a create that failed). */
	void (*closed)(fs_daemon *dm, node *n, int undo);
};

/* Render a readable file into its handle.  A read at offset 0 renders it
 * anew (except right after open), so a descriptor held open and read again
 * from 0 sees the file as it is now (a session's out after the next query,
 * stats, errors), as /proc files do; reads at other offsets continue the
 * snapshot. */
static int rerender(handle *h)
{
	rendering *r;
	int rc = fs_rendering_get(h->dm, h->n, &r);
	if (rc == 0) {
		fs_rendering_put(h->dm, h->r);
		h->r = r;
	}
	return rc;
}

static handle *handle_of(struct fuse_file_info *fi)
{
	return (handle *)(uintptr_t)fi->fh;
}

/* Forget what was written to a config or ctl handle (h->wmu held). */
static void wbuf_reset(handle *h)
{
	fs_sb_reset(&h->wbuf);
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
	fs_ingest_free(h->del);
	fs_rendering_put(h->dm, h->r);
	fs_sb_free(&h->wbuf);
	pthread_mutex_destroy(&h->wmu);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

/* Open n (a reference on it is already counted in n->opens); created: by
 * create in its directory. */
static int open_node(fuse_req_t req, node *n, struct fuse_file_info *fi, int created, handle **out)
{
	fs_daemon *dm = fuse_req_userdata(req);
	const kind_file_ops *f = kind_of(n)->fops;
	int acc = fi->flags & O_ACCMODE;
	char path[600];
	if (S_ISDIR(kind_of(n)->mode))
		return -EISDIR;
	if (acc != O_RDONLY && !writable(n->kind)) {
		pthread_mutex_lock(&dm->tree.mu);
		fs_kind_path(dm, n, path, sizeof path);
		pthread_mutex_unlock(&dm->tree.mu);
		fs_errlog(&dm->errors, "%s: cannot be written (read-only)", path);
		return -EACCES;
	}
	if (acc == O_RDONLY && !readable(n->kind))
		return -EACCES;
	handle *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	h->dm = dm;
	h->n = n;
	h->fd = -1;
	h->reader = acc == O_RDONLY;
	pthread_mutex_init(&h->mu, NULL);
	pthread_mutex_init(&h->wmu, NULL);
	int rc = 0;
	if (acc != O_WRONLY && readable(n->kind)) {
		if (f && f->open_read) {
			rc = f->open_read(h);
		} else {
			/* rendered now, so that open fails when the file cannot be
			 * (a record deleted meanwhile) */
			rc = rerender(h);
			h->fresh = 1;
		}
	}
	if (rc == 0 && f && f->open)
		rc = f->open(h, req, fi, created);
	if (rc) {
		handle_free(h);
		return rc;
	}
	fi->direct_io = !fs_out_cached(dm, n) && !fs_out_passthrough(n);
	fi->keep_cache = fs_out_cached(dm, n);
	/* nothing happens when a reader closes: spare it the FLUSH round trip */
	fi->noflush = acc == O_RDONLY;
	fi->fh = (uintptr_t)h;
	*out = h;
	return 0;
}

void fs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fs_daemon *dm = fuse_req_userdata(req);
	handle *h;
	node *n = fs_pin(dm, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	int rc = open_node(req, n, fi, 0, &h);
	if (rc) {
		fs_unpin(dm, n);
		fuse_reply_err(req, -rc);
		return;
	}
	/* one reading of the backing file: rmdir may release it meanwhile */
	pthread_mutex_lock(&dm->tree.mu);
	int bid = fs_out_passthrough(n) ? n->session->out_bid : 0;
	pthread_mutex_unlock(&dm->tree.mu);
	if (bid > 0)
		fi->direct_io = fi->keep_cache = 0;
	if ((bid > 0 ? fs_fc_reply_open_backing(req, fi, bid) : fuse_reply_open(req, fi)) != 0) {
		handle_free(h);
		fs_unpin(dm, n);
	}
}

/* A READ of a cached out fills part of the kernel's copy, whose other
 * pages fs_push_out() stored: it must see the content of now, at any offset. */
static int read_fills_cache(const handle *h)
{
	return fs_out_cached(h->dm, h->n);
}

void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)ino;
	handle *h = handle_of(fi);
	int rc;
	const kind_file_ops *f = kind_of(h->n)->fops;
	pthread_mutex_lock(&h->mu);
	if (f && f->read) {
		char *buf = malloc(size ? size : 1);
		ssize_t r = buf ? f->read(h, buf, size, off) : -ENOMEM;
		if (r < 0)
			fuse_reply_err(req, (int)-r);
		else
			fuse_reply_buf(req, buf, (size_t)r);
		free(buf);
	} else if (((off == 0 && !h->fresh) || read_fills_cache(h)) && (rc = rerender(h)) != 0) {
		fuse_reply_err(req, -rc);
	} else if (off < 0 || !h->r || (size_t)off >= h->r->len) {
		h->fresh = 0;
		fuse_reply_buf(req, NULL, 0);
	} else {
		h->fresh = 0;
		size_t n = h->r->len - (size_t)off;
		fuse_reply_buf(req, h->r->data + off, n < size ? n : size);
	}
	pthread_mutex_unlock(&h->mu);
}

/* ---------------------------------------------------------------- the file operations of each kind
 *
 * Of the kinds that have their own (kind_file_ops, named in their rows of
 * kinds.c): config, ctl, errors, backup, export.jsonl, delete, the files of
 * ingest/, a session's in and its results. */

int fs_ingest_busy(fs_daemon *dm, const char *name)
{
	fs_errlog(&dm->errors, "ingest/%s: is being written; another writer may open it once it is "
	       "closed (several writers share a NAME.part file)", name);
	return -EBUSY;
}

/* Remove an ingest file from ingest/ once it committed or failed. */
static void ingest_leave(fs_daemon *dm, node *n)
{
	if (!fs_ingest_done(n->ing))
		return;
	pthread_mutex_lock(&dm->tree.mu);
	if (n->linked)
		fs_unlink_name(dm, n);
	fs_maybe_free(dm, n);
	pthread_mutex_unlock(&dm->tree.mu);
}

/* Take the complete ctl lines (all of h->wbuf when `all`) out of h->wbuf
 * under h->wmu, leaving a partial last line, and run them without it: a
 * build holds no lock another request waits on.  A failed command drops
 * what follows it. */
static int ctl_run_lines(handle *h, int all)
{
	fs_daemon *dm = h->dm;
	pthread_mutex_lock(&h->wmu);
	size_t take = h->wbuf.len;
	if (!all) {
		while (take > 0 && h->wbuf.p[take - 1] != '\n')
			take--;
	}
	char *lines = NULL;
	if (take > 0 && !(lines = malloc(take))) {
		pthread_mutex_unlock(&h->wmu);
		return -ENOMEM;
	}
	if (take > 0) {
		memcpy(lines, h->wbuf.p, take);
		memmove(h->wbuf.p, h->wbuf.p + take, h->wbuf.len - take);
		h->wbuf.len -= take;
		h->wbuf.p[h->wbuf.len] = 0;
	}
	pthread_mutex_unlock(&h->wmu);
	int rc = 0;
	size_t pos = 0;
	while (pos < take && rc == 0) {
		const char *s = lines + pos;
		const char *nl = memchr(s, '\n', take - pos);
		size_t n = nl ? (size_t)(nl - s) : take - pos;
		pos += n + (nl ? 1 : 0);
		rc = fs_ctl_exec(dm, s, n);
	}
	free(lines);
	if (rc) {
		pthread_mutex_lock(&h->wmu);
		fs_sb_reset(&h->wbuf);
		pthread_mutex_unlock(&h->wmu);
	}
	return rc;
}

/* Check the config lines completed by this write, so that a bad one fails
 * the write() (which a shell's builtin echo reports) as well as the close
 * (h->wmu held). */
static int config_check_lines(handle *h)
{
	fs_daemon *dm = h->dm;
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
		if (fs_config_line(&dm->errors, s, (size_t)(nl - s), h->lines, &scratch)) {
			h->bad = 1;
			return -EINVAL;
		}
	}
	return 0;
}

/* After a run of the session's query (ran): its out pushed to the readers;
 * rc, the run's errno, or else the push's. */
static int results_out(fs_daemon *dm, node *session, int rc, int ran)
{
	if (!ran)
		return rc;
	int prc = fs_push_out(dm, session);
	return rc ? rc : prc;
}

/* Whether a write of `in` runs the query itself (one round trip a
 * query): a synchronous write (the descriptor opened with O_DSYNC or
 * O_SYNC, or pwritev2() with RWF_DSYNC) at offset 0 that the kernel did not
 * cut: shorter than the mount's largest write, so it is the whole of one
 * write() and so, by that contract, the whole input. */
static int sync_run(const fs_daemon *dm, const struct fuse_file_info *fi, size_t size, off_t off)
{
	return (fi->flags & O_DSYNC) && off == 0 && size < dm->max_write;
}

/* A close (FLUSH) of an ingest file by lock owner `owner` of process
 * `pid`, or the last close of its descriptor (RELEASE: pid 0). */
static int ingest_flush(handle *h, uint64_t owner, pid_t pid)
{
	fs_daemon *dm = h->dm;
	node *n = h->n;
	int rc = 0;
	fs_fc_request_long(dm->fuse); /* a commit */
	if (pid)
		rc = fs_ingest_close(n->ing, owner, (uint64_t)pid);
	else
		fs_ingest_release(n->ing);
	ingest_leave(dm, n);
	return rc;
}

/* Whether process pid holds a descriptor of the session's in (besides
 * the one it closes, which has left its table by now): a shell that
 * redirects opens the file, dup2()s it and closes the first descriptor
 * before anything is written. */
static int caller_holds_in(fs_daemon *dm, node *n, pid_t pid)
{
	return fs_proc_holds_file(pid, dm->mount_dev, n->ino);
}

/* config and ctl: a write adds to h->wbuf (h->wmu held): 0, or -EFBIG
 * (an errors line) past 1 MiB at once, or -ENOMEM. */
static int wbuf_add(handle *h, const char *buf, size_t size)
{
	if (h->wbuf.len + size > ((size_t)1 << 20)) {
		fs_errlog(&h->dm->errors, "%s: more than 1 MiB written at once", h->n->name);
		return -EFBIG;
	}
	fs_sb_add(&h->wbuf, buf, size);
	if (h->wbuf.oom) {
		h->wbuf.oom = 0;
		return -ENOMEM;
	}
	h->wdirty = 1;
	return 0;
}

/* config and ctl: truncated to 0 through a handle, what it was written
 * is forgotten. */
static int wbuf_truncate(fs_daemon *dm, node *n, handle *h, off_t size)
{
	if (h && size == 0) {
		pthread_mutex_lock(&h->wmu);
		wbuf_reset(h);
		pthread_mutex_unlock(&h->wmu);
	}
	return 0;
}

static int config_write(handle *h, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	pthread_mutex_lock(&h->wmu);
	int rc = wbuf_add(h, buf, size);
	if (rc == 0)
		rc = config_check_lines(h);
	pthread_mutex_unlock(&h->wmu);
	return rc;
}

/* The text is taken out under h->wmu and applied without it. */
static int config_finish(handle *h, pid_t pid)
{
	fs_daemon *dm = h->dm;
	int rc = 0;
	pthread_mutex_lock(&h->wmu);
	int dirty = h->wdirty, bad = h->bad;
	size_t len = 0;
	char *text = dirty && !bad ? fs_sb_take(&h->wbuf, &len) : NULL;
	h->wdirty = 0;
	if (dirty)
		wbuf_reset(h);
	pthread_mutex_unlock(&h->wmu);
	if (dirty) {
		fs_fc_request_long(dm->fuse);
		if (bad)
			rc = -EINVAL; /* already in errors: nothing is applied */
		else
			rc = fs_config_apply_text(dm->store, &dm->errors, text ? text : "", len);
	}
	free(text);
	return rc;
}

const kind_file_ops fs_config_file_ops = {
	.write = config_write, .finish = config_finish, .truncate = wbuf_truncate,
};

static int ctl_write(handle *h, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	pthread_mutex_lock(&h->wmu);
	int rc = wbuf_add(h, buf, size);
	pthread_mutex_unlock(&h->wmu);
	return rc ? rc : ctl_run_lines(h, 0);
}

static int ctl_finish(handle *h, pid_t pid)
{
	pthread_mutex_lock(&h->wmu);
	int dirty = h->wdirty;
	h->wdirty = 0;
	pthread_mutex_unlock(&h->wmu);
	if (!dirty)
		return 0;
	fs_fc_request_long(h->dm->fuse);
	return ctl_run_lines(h, 1);
}

const kind_file_ops fs_ctl_file_ops = {
	.write = ctl_write, .finish = ctl_finish, .truncate = wbuf_truncate,
};

/* errors: a log, read as it is at each read. */
static int open_nothing(handle *h)
{
	return 0;
}

/* What the log holds now at that offset. */
static ssize_t errors_file_read(handle *h, char *buf, size_t size, off_t off)
{
	return off < 0 ? 0 : (ssize_t)fs_errors_read(&h->dm->errors, (uint64_t)off, buf, size);
}

const kind_file_ops fs_errors_file_ops = {.open_read = open_nothing, .read = errors_file_read};

/* backup and export.jsonl: a stream the open starts (h->fd). */
static ssize_t stream_read(handle *h, char *buf, size_t size, off_t off)
{
	ssize_t r = pread(h->fd, buf, size, off);
	return r < 0 ? -errno : r;
}

static int backup_open_read(handle *h)
{
	h->fd = fs_backup_open(h->dm);
	return h->fd < 0 ? h->fd : 0;
}

static int export_open_read(handle *h)
{
	h->fd = fs_export_open(h->dm);
	return h->fd < 0 ? h->fd : 0;
}

const kind_file_ops fs_backup_file_ops = {.open_read = backup_open_read, .read = stream_read};
const kind_file_ops fs_export_file_ops = {.open_read = export_open_read, .read = stream_read};

/* delete: opened for writing, what it is given (h->del) is deleted at the
 * close, at once. */
static int delete_open(handle *h, fuse_req_t req, struct fuse_file_info *fi, int created)
{
	if ((fi->flags & O_ACCMODE) != O_RDONLY &&
	    !(h->del = fs_ingest_new_delete(h->dm, (uint64_t)fuse_req_ctx(req)->pid)))
		return -ENOMEM;
	return 0;
}

static int delete_write(handle *h, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	return fs_ingest_write(h->del, buf, size, (uint64_t)off, fi->lock_owner);
}

static int delete_flush(handle *h, uint64_t owner, pid_t pid)
{
	if (!h->del)
		return 0;
	fs_fc_request_long(h->dm->fuse); /* a commit */
	return fs_ingest_close(h->del, owner, (uint64_t)pid);
}

static int delete_finish(handle *h, pid_t pid)
{
	if (h->del)
		fs_ingest_release(h->del);
	return 0;
}

/* O_TRUNC of a file that reads empty. */
static int truncate_nothing(fs_daemon *dm, node *n, handle *h, off_t size)
{
	return 0;
}

const kind_file_ops fs_delete_file_ops = {
	.open = delete_open, .write = delete_write, .flush = delete_flush, .finish = delete_finish,
	.truncate = truncate_nothing,
};

/* A file of ingest/. */
static int ingest_file_open(handle *h, fuse_req_t req, struct fuse_file_info *fi, int created)
{
	node *n = h->n;
	if (fi->flags & O_TRUNC)
		fs_ingest_truncate(n->ing); /* a staged file starts over */
	if (created)
		return 0;
	if (fs_ingest_done(n->ing)) /* reopened after it left ingest/ (through a descriptor path) */
		return -ENOENT;
	if (!fs_ingest_staged(n->ing)) /* only its creator writes a file of ingest/ */
		return fs_ingest_busy(h->dm, n->name);
	return 0;
}

static int ingest_file_write(handle *h, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	node *n = h->n;
	/* the lock owner of a write is the writer's: with direct_io the
	 * kernel sends it (FUSE_WRITE_LOCKOWNER) */
	int rc = fs_ingest_write(n->ing, buf, size, (uint64_t)off, fi->lock_owner);
	fs_node_changed(n);
	if (rc)
		ingest_leave(h->dm, n);
	return rc;
}

static int ingest_file_finish(handle *h, pid_t pid)
{
	return ingest_flush(h, 0, 0);
}

static int ingest_file_truncate(fs_daemon *dm, node *n, handle *h, off_t size)
{
	if (size == 0 && fs_ingest_staged(n->ing)) {
		fs_ingest_truncate(n->ing); /* starts over */
	} else if ((uint64_t)size != fs_ingest_size(n->ing)) {
		fs_errlog(&dm->errors, "ingest/%s: cannot truncate a file being ingested", n->name);
		return -EINVAL;
	}
	return 0;
}

/* A closed file leaves ingest/ (a staged one stays, one with bytes when a
 * create failed). */
static void ingest_file_closed(fs_daemon *dm, node *n, int undo)
{
	if (undo ? !(fs_ingest_staged(n->ing) && fs_ingest_size(n->ing)) : n->linked && !fs_ingest_staged(n->ing))
		fs_unlink_name(dm, n);
}

const kind_file_ops fs_ingest_file_ops = {
	.open = ingest_file_open, .write = ingest_file_write, .flush = ingest_flush,
	.finish = ingest_file_finish, .truncate = ingest_file_truncate, .closed = ingest_file_closed,
};

/* A session's in. */
static int query_in_open(handle *h, fuse_req_t req, struct fuse_file_info *fi, int created)
{
	if (fi->flags & O_TRUNC)
		fs_qs_in_truncate(h->n->session->qs);
	return 0;
}

static int query_in_write(handle *h, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	fs_daemon *dm = h->dm;
	node *n = h->n;
	int rc;
	atomic_store_explicit(&h->wrote, 1, memory_order_relaxed);
	if (sync_run(dm, fi, size, off)) {
		int ran;
		rc = fs_qs_in_write_run(n->session->qs, buf, size, &ran);
		fs_node_changed(n->session);
		return results_out(dm, n->session, rc, ran);
	}
	fs_fc_request_long(dm->fuse); /* a plain write: a standby, as other files' writes */
	rc = fs_qs_in_write(n->session->qs, buf, size, (uint64_t)off);
	fs_node_changed(n->session);
	return rc;
}

static int query_in_finish(handle *h, pid_t pid)
{
	fs_daemon *dm = h->dm;
	node *n = h->n;
	int ran, rc;
	if (h->reader)
		return 0; /* it read what in holds */
	if (!atomic_load_explicit(&h->wrote, memory_order_relaxed) && pid > 0 &&
	    !caller_holds_in(dm, n, pid))
		rc = fs_qs_in_flush_empty(n->session->qs, &ran);
	else
		rc = fs_qs_in_flush(n->session->qs, &ran);
	return results_out(dm, n->session, rc, ran);
}

static int query_in_truncate(fs_daemon *dm, node *n, handle *h, off_t size)
{
	if (size == 0)
		fs_qs_in_truncate(n->session->qs);
	return 0;
}

static int query_in_call(handle *h, const char *buf, size_t size, sbuf *out)
{
	uint32_t n;
	memcpy(&n, buf, 4);
	n = le32toh(n);
	if (n > size - 4) {
		fs_errlog(&h->dm->errors, "query/%s/in (call): the length %u is past the call's %zu "
			  "bytes of input", h->n->session->name, n, size - 4);
		return -EINVAL;
	}
	return fs_qs_call(h->n->session->qs, buf + 4, n, out, size);
}

const kind_file_ops fs_query_in_file_ops = {
	.open = query_in_open, .write = query_in_write, .write_quick = 1, .call = query_in_call,
	.finish = query_in_finish, .truncate = query_in_truncate,
};

/* A session's results (out, out.json, stats): they cannot fail, and are
 * rendered by the first read. */
const kind_file_ops fs_results_file_ops = {.open_read = open_nothing};

void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino;
	handle *h = handle_of(fi);
	const kind_file_ops *f = kind_of(h->n)->fops;
	if (f && f->write && !f->write_quick)
		fs_fc_request_long(h->dm->fuse); /* its work may be long, or wait on long work */
	int rc = f && f->write ? f->write(h, buf, size, off, fi) : -EBADF;
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_write(req, size);
}

/* An ioctl: the query call of a kind that has it (a restricted ioctl:
 * the kernel brought the buffer its number sizes, in and out), else
 * ENOTTY, as for any other number. */
void fs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		 struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		 size_t out_bufsz)
{
	(void)ino;
	(void)arg;
	/* a directory's descriptor holds no handle (ops_dir.c): none has an
	 * ioctl (nor is one asked for: op_init() clears FUSE_CAP_IOCTL_DIR) */
	if (flags & FUSE_IOCTL_DIR) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	handle *h = handle_of(fi);
	const kind_file_ops *f = kind_of(h->n)->fops;
	size_t size = _IOC_SIZE(cmd);
	if (!f || !f->call || cmd != VECFS_IOC_QUERY(size) || size < VECFS_CALL_MIN ||
	    in_bufsz != size || out_bufsz != size) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	sbuf out;
	fs_sb_init(&out);
	int rc = f->call(h, in_buf, size, &out);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_ioctl(req, (int)out.len, out.p, out.len);
	fs_sb_free(&out);
}

/* What a close of h runs (pid 0: its last, RELEASE). */
static int flush_handle(handle *h, pid_t pid)
{
	const kind_file_ops *f = kind_of(h->n)->fops;
	return f && f->finish ? f->finish(h, pid) : 0;
}

void fs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	handle *h = handle_of(fi);
	const kind_file_ops *f = kind_of(h->n)->fops;
	pid_t pid = fuse_req_ctx(req)->pid;
	fuse_reply_err(req, -(f && f->flush ? f->flush(h, fi->lock_owner, pid) : flush_handle(h, pid)));
}

void fs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)ino;
	handle *h = handle_of(fi);
	node *n = h->n;
	const kind_file_ops *f = kind_of(n)->fops;
	/* the last resort: data written and never flushed */
	flush_handle(h, 0);
	pthread_mutex_lock(&h->mu); /* a read may still be replying */
	pthread_mutex_unlock(&h->mu);
	handle_free(h);
	pthread_mutex_lock(&dm->tree.mu);
	n->opens--;
	if (n->opens == 0 && f && f->closed)
		f->closed(dm, n, 0);
	fs_maybe_free(dm, n);
	pthread_mutex_unlock(&dm->tree.mu);
	fuse_reply_err(req, 0);
}

void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	fuse_reply_err(req, 0);
}

/* Modes and owners are fixed (the kernel enforces the ones shown): setting
 * what is shown does nothing (cp -p, tar), a change is refused with an
 * errors line.  1 when refused. */
static int fixed_attrs_refused(fs_daemon *dm, node *n, const struct stat *attr, int to_set)
{
	struct stat st;
	char path[600];
	if (fs_node_attr(dm, n, &st))
		return 0; /* the caller's fs_node_attr() reports it */
	int mode = (to_set & FUSE_SET_ATTR_MODE) && (attr->st_mode & 07777) != (st.st_mode & 07777);
	int owner = ((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != st.st_uid) ||
		    ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != st.st_gid);
	if (!mode && !owner)
		return 0;
	pthread_mutex_lock(&dm->tree.mu);
	fs_kind_path(dm, n, path, sizeof path);
	pthread_mutex_unlock(&dm->tree.mu);
	if (mode)
		fs_errlog(&dm->errors, "chmod %s: modes are fixed (%o)", path, (unsigned)(st.st_mode & 07777));
	else
		fs_errlog(&dm->errors, "chown %s: owners are fixed (%u:%u)", path, (unsigned)st.st_uid,
		       (unsigned)st.st_gid);
	return 1;
}

/* A truncation of a file that has no truncate of its own: -EACCES, with an
 * errors line. */
static int truncate_refused(fs_daemon *dm, node *n)
{
	char path[600];
	pthread_mutex_lock(&dm->tree.mu);
	fs_kind_path(dm, n, path, sizeof path);
	pthread_mutex_unlock(&dm->tree.mu);
	fs_errlog(&dm->errors, "%s: cannot be truncated (read-only)", path);
	return -EACCES;
}

void fs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	fs_daemon *dm = fuse_req_userdata(req);
	struct stat st;
	node *n = fs_get_locked(dm, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if ((to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) &&
	    fixed_attrs_refused(dm, n, attr, to_set)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		const kind_file_ops *f = kind_of(n)->fops;
		int rc = f && f->truncate ? f->truncate(dm, n, fi ? handle_of(fi) : NULL, attr->st_size)
					  : truncate_refused(dm, n);
		if (rc) {
			fuse_reply_err(req, -rc);
			return;
		}
	}
	/* times are fixed too: accepted and ignored (touch) */
	int rc = fs_node_attr(dm, n, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, 0);
}

/* Take back the lookup and open a failed create made: an ingest file
 * nobody else holds leaves ingest/ (a staged one with bytes stays). */
static void undo_create(fs_daemon *dm, node *n)
{
	const kind_file_ops *f = kind_of(n)->fops;
	pthread_mutex_lock(&dm->tree.mu);
	n->nlookup--;
	n->opens--;
	if (n->opens == 0 && f && f->closed)
		f->closed(dm, n, 1);
	fs_maybe_free(dm, n);
	pthread_mutex_unlock(&dm->tree.mu);
}

/* A create in a directory whose row makes no files (dm->tree.mu held,
 * released here): NULL, *err EPERM (ENOTDIR: p is not a directory). */
static node *create_refused(fuse_req_t req, node *p, const char *name, int *err)
{
	*err = fs_dir_refuse(req, p, "", "", name, S_ISDIR(kind_of(p)->mode) ? EPERM : ENOTDIR,
			  "files cannot be created here (write into ingest/)");
	return NULL;
}

/* Made by the directory's create (kind_dir_ops), then opened. */
void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	fs_daemon *dm = fuse_req_userdata(req);
	(void)mode;
	handle *h;
	node *p = fs_lock_parent(req, parent);
	if (!p)
		return;
	int err = 0;
	node *(*make)(fuse_req_t, node *, const char *, int, int *) = DIR_OP(p, create);
	node *n = make ? make(req, p, name, fi->flags, &err) : create_refused(req, p, name, &err);
	if (!n) {
		fuse_reply_err(req, err);
		return;
	}
	n->nlookup++;
	n->opens++;
	pthread_mutex_unlock(&dm->tree.mu);
	struct stat st;
	int rc = open_node(req, n, fi, 1, &h);
	if (rc == 0) {
		rc = fs_node_attr(dm, n, &st);
		if (rc)
			handle_free(h);
	}
	if (rc) {
		undo_create(dm, n);
		fuse_reply_err(req, -rc);
		return;
	}
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = n->ino;
	e.attr = st;
	if (fuse_reply_create(req, &e, fi) != 0) {
		handle_free(h);
		undo_create(dm, n);
	}
}
