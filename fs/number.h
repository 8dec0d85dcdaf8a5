/*
 * fs/number.h - numbers as users write and read them: decimal parsing and
 * float formatting in the C locale, with no other dependency (so that the
 * unit tests link them alone).
 */
#ifndef VECFS_FS_NUMBER_H
#define VECFS_FS_NUMBER_H

#include <stddef.h>
#include <stdint.h>

#include "vecfs.h" /* vecfs_format_float() */

/* Parse a decimal unsigned integer (digits only, no sign) up to max. */
int parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out);
/* Parse one float32 token as strtof does in the C locale, rounded
 * correctly, however long; -EINVAL for anything but one whole number
 * token, -ERANGE on overflow, -ENOMEM when a long token cannot be copied. */
int parse_float(const char *s, size_t n, float *out);
/* Trim blanks (space, tab, CR) on both sides. */
void trim(const char **s, size_t *n);

#endif
