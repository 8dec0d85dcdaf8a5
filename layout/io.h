/*
 * layout/io.h - the one seam through which the library allocates memory,
 * opens its own files, starts the writeback of LMDB's, asks for pages of
 * the map ahead and counts the page faults it waited for: a table of
 * functions, the real calls by default, that a test replaces to fail the
 * Nth call (ENOMEM, EIO, ENOSPC) or to see what was asked.  LMDB's own
 * file I/O does not pass here (it is inside liblmdb).
 */
#ifndef VF_IO_H
#define VF_IO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
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
	/* the calling thread's major page faults so far
	 * (getrusage(RUSAGE_THREAD)): how a search or a walk knows it waited
	 * for the disk */
	uint64_t (*major_faults)(void);
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

/* Room for one element more after the first n of the array *(T **)pp of
 * `size`-byte elements, which has room for *cap: doubled (from `first`)
 * when full.  0, or -ENOMEM (the array stays as it was).  VF_GROW() names
 * the array itself. */
static inline int vf_grow(void *pp, size_t *cap, size_t n, size_t size, size_t first)
{
	if (n < *cap)
		return 0;
	void **p = pp;
	size_t nc = *cap ? *cap * 2 : first;
	void *np = vf_realloc(*p, nc * size);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = nc;
	return 0;
}
#define VF_GROW(arr, n, cap, first) vf_grow(&(arr), &(cap), (n), sizeof *(arr), (first))

/* Room for `need` bytes in a buffer that doubles as it grows (from 64 KiB):
 * 0, or -ENOMEM (the buffer stays as it was). */
static inline int vf_bytes_reserve(uint8_t **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 1 << 16;
	while (nc < need)
		nc *= 2;
	uint8_t *nb = vf_realloc(*buf, nc);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*cap = nc;
	return 0;
}

#endif
