/*
 * tools/memcap.h - a memory cap for a measurement: a child of the cgroup-v1
 * memory controller (/sys/fs/cgroup/memory) whose memory.limit_in_bytes
 * caps what the processes moved into it may hold, the page cache of the
 * files they read included; and dropping the page cache before a cold
 * measurement.  Needs root.
 */
#ifndef TOOLS_MEMCAP_H
#define TOOLS_MEMCAP_H

#include <stdint.h>
#include <sys/types.h>

struct memcap {
	char dir[256];   /* the cgroup made; "" when none */
};

/* Make the cgroup (named after prog and this process) capped at `bytes`.
 * 0, or a negative errno with a one-line reason printed (no cgroup-v1
 * memory controller, no permission). */
int memcap_make(struct memcap *c, const char *prog, uint64_t bytes);
/* Move process pid (all its threads) into the cgroup. */
int memcap_enter(struct memcap *c, pid_t pid);
/* Move pid back to the root cgroup. */
int memcap_leave(struct memcap *c, pid_t pid);
/* The cgroup's peak usage in bytes (memory.max_usage_in_bytes); 0 if not
 * known. */
uint64_t memcap_peak(const struct memcap *c);
/* Remove the cgroup (the processes in it moved back to the root first, pid
 * among them); nothing when none was made. */
void memcap_remove(struct memcap *c, pid_t pid);
/* sync, then drop the clean page cache (/proc/sys/vm/drop_caches).  Pages
 * a process still maps stay: unmap (close the store) first. */
int memcap_drop_caches(void);

#endif
