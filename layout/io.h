/*
 * layout/io.h - the one seam through which the library allocates memory,
 * opens its own files, starts the writeback of LMDB's and asks for pages of
 * the map ahead: a table of functions, the real calls by default, that a
 * test replaces to fail the Nth call (ENOMEM, EIO, ENOSPC) or to see what
 * was asked.  LMDB's own file I/O does not pass here
 * (it is inside liblmdb).
 */
#ifndef VF_IO_H
#define VF_IO_H

#include <stddef.h>
#include <sys/types.h>

typedef struct vf_io {
	void *(*malloc)(size_t n);
	void *(*calloc)(size_t n, size_t size);
	void *(*realloc)(void *p, size_t n);
	int (*open)(const char *path, int flags, mode_t mode);
	/* start writing back the file's dirty pages, waiting for none
	 * (sync_file_range(SYNC_FILE_RANGE_WRITE) of all of it): 0 or -errno */
	int (*sync_range)(int fd);
	/* ask for the pages of addr..+len of the map to be read, waiting for
	 * none (madvise(MADV_WILLNEED); addr page-aligned) */
	void (*willneed)(void *addr, size_t len);
} vf_io;

/* The table in use (the real calls unless replaced).  The library's threads
 * read it without a lock: replace it only while no handle is open. */
extern vf_io vf_io_ops;
/* Put the real calls back. */
void vf_io_reset(void);

static inline void *vf_malloc(size_t n)
{
	return vf_io_ops.malloc(n);
}
static inline void *vf_calloc(size_t n, size_t size)
{
	return vf_io_ops.calloc(n, size);
}
static inline void *vf_realloc(void *p, size_t n)
{
	return vf_io_ops.realloc(p, n);
}

#endif
