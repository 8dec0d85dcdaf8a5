/*
 * engine/attrs.h - the times and sizes file tools see (attrs.c): kept
 * with each write, counted once for a store made before they were.
 */
#ifndef VF_ATTRS_H
#define VF_ATTRS_H

#include "handle.h"
#include "record.h"

enum { VF_TIME_CREATED, VF_TIME_CONFIG, VF_TIME_RECORDS, VF_TIME_GENS, VF_TIME_KINDS };

uint64_t vf_now_ns(void);
/* The export line of a record: its length, and the line itself (out holds
 * that many bytes). */
size_t vf_export_line_len(const vf_record *r);
size_t vf_export_line(char *out, const vf_record *r);
/* The export line length of a record value (0, or -EIO when malformed). */
int vf_export_len_of(const void *data, size_t len, uint64_t *out);
/* A write of records: the export's length moves by export_delta, the
 * records' time is now, and (first_seq not 0) the records of sequence
 * numbers from first_seq on date from now. */
int vf_attrs_write(vf_txn *txn, vf_store *s, int64_t export_delta, uint64_t first_seq);
/* The time of kind (VF_TIME_CONFIG, VF_TIME_GENS) is now. */
int vf_attrs_touch(vf_txn *txn, vf_store *s, int kind);
/* Count the export's length again over every record (after a salvage). */
int vf_attrs_recount(vf_txn *txn, vf_store *s);
/* At a write open: what a store made before they were kept lacks. */
int vf_attrs_upgrade(vf_txn *txn, vf_store *s);

#endif
