#!/usr/bin/env bash
# The layers, checked on the built objects (nm) and the sources (#include):
#  a. no object outside obj/layout/ refers to an LMDB symbol (mdb_*);
#  b. no object of obj/fs/ or obj/tools/ refers to a symbol that libvecfs.a
#     (obj/engine/ + obj/layout/) defines unless its name starts with vecfs_;
#  c. fs/ and tools/ sources include (#include "...") only headers of their
#     own folder and vecfs.h (engine/include);
#  d. only layout/*.c and layout/*.h include <lmdb.h>;
#  e. no cycle among engine/'s objects: when one refers to a symbol another
#     defines, that one does not refer back, directly or through others (a
#     call that must go upward goes through a function pointer set by the
#     upper file, as vecfs.on_search and search.scan_cluster do);
#  f. the codecs (every object of engine/codec/: numbers, settings and
#     query options, UTF-8, JSON, rows of the ingest formats, query input)
#     refer to no symbol of the project but one another's: no store, no
#     LMDB, no FUSE, nothing of the engine around them.
#  g. engine/'s folders (engine/*/, engine/include/ aside) keep their
#     headers to themselves: an engine source or header includes
#     (#include "...") headers of its own folder, engine/'s own (handle.h),
#     another folder's one header by its path (gen/gen.h for gen/), layout/'s
#     headers and vecfs.h; nothing else;
#  h. no cycle among engine/'s folders: rule e's references, each object
#     standing for its folder (a file directly in engine/ for itself): when
#     a folder refers to another's symbols, that one does not refer back,
#     directly or through others;
#  i. every symbol an object of engine/ or layout/ defines for others
#     (global) is named vf_* or vecfs_*, and every one of fs/ fs_* (main
#     aside): a name says its layer, and none can clash with a program's
#     or a library's.
# tests/ see every layer (they are none): their objects and sources are not
# checked.
# Each offence is printed as `RULE OBJECT SYMBOL` (for c and d: the source and
# the header; for e and h, each reference on a cycle, followed by the object
# that defines the symbol), OBJECT relative to BUILD/obj or to the project root.  A pair
# listed in ALLOW (`OBJECT SYMBOL` a line, # comments) is printed as allowed
# and not counted.  The last line is `layers: N passed, N failed`, one count
# per rule; exit status 1 if a rule failed.
#
# Usage: bash tests/check_layers.sh [BUILD [ALLOW]]   (from the project root;
# BUILD defaults to build, ALLOW to tests/layers.allow if it exists)

export LC_ALL=C
BUILD=${1:-build}
ALLOW=${2:-tests/layers.allow}
OBJ=$BUILD/obj
declare -A allowed=() count=()
if [[ -f $ALLOW ]]; then
	while read -r o s _; do
		[[ -z $o || $o == \#* ]] && continue
		allowed["$o $s"]=1
	done <"$ALLOW"
fi
nallowed=0

offence() { # RULE OBJECT SYMBOL [MORE]
	if [[ -n ${allowed["$2 $3"]:-} ]]; then
		echo "allowed: $1 $2 $3"
		nallowed=$((nallowed + 1))
	else
		echo "$1 $2 $3${4:+ $4}"
		count[$1]=$((${count[$1]:-0} + 1))
	fi
}

if [[ ! -d $OBJ/engine || ! -d $OBJ/layout ]]; then
	echo "layers: $OBJ/engine and $OBJ/layout are not built"
	echo "layers: 0 passed, 1 failed"
	exit 1
fi
# the objects of DIR's current sources (an object left from a removed
# source is not part of any build)
objs() {
	local o src
	find "$OBJ/$1" -name '*.o' 2>/dev/null | sort | while read -r o; do
		src=${o#"$OBJ"/}
		[[ -f ${src%.o}.c ]] && echo "$o"
	done
}
# undefined DIR...: `OBJECT SYMBOL` for each symbol an object of DIR refers to
undefined() {
	local d
	for d in "$@"; do objs "$d"; done | xargs -r nm -A -u 2>/dev/null |
		awk -v p="$OBJ/" '{ o = $1; sub(/:$/, "", o); sub("^" p, "", o); print o, $NF }'
}

# a. mdb_ outside layout/
while read -r o s; do
	offence a "$o" "$s"
done < <(undefined engine fs tools | awk '$2 ~ /^mdb_/')

# b. fs/ and tools/ use the library only through vecfs_ names
libdefs=$(for d in engine layout; do objs "$d"; done | xargs -r nm --defined-only -g 2>/dev/null |
	awk 'NF == 3 && $3 !~ /^vecfs_/ { print $3 }' | sort -u)
while read -r o s; do
	offence b "$o" "$s"
done < <(undefined fs tools | awk 'NR == FNR { lib[$1] = 1; next } ($2 in lib)' <(printf '%s\n' "$libdefs") -)

# c. fs/ and tools/ include their own headers and vecfs.h only
for d in fs tools; do
	for f in "$d"/*.c "$d"/*.h; do
		[[ -f $f ]] || continue
		for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
			[[ $h == vecfs.h || ($h != */* && -f $d/$h) ]] || offence c "$f" "\"$h\""
		done
	done
done

# d. <lmdb.h> in layout/ only
for f in $(grep -rl --include='*.[ch]' '^[[:space:]]*#[[:space:]]*include[[:space:]]*<lmdb\.h>' \
	engine fs tools 2>/dev/null | sort); do
	offence d "$f" "<lmdb.h>"
done

# e. no cycle among engine/'s objects.  A reference of object A to B's
# symbol is on a cycle when B reaches A through the references (a pair in
# ALLOW is left out of them).  h: the same, with A and B the objects'
# folders (engine/gen for engine/gen/build.o; engine/open.o for itself).
engine_refs=$({
	objs engine | xargs -r nm -A --defined-only -g 2>/dev/null |
		awk -v p="$OBJ/" 'NF == 3 { o = $1; sub(/:.*$/, "", o); sub("^" p, "", o); print "D", o, $3 }'
	for k in "${!allowed[@]}"; do echo "A $k"; done
	undefined engine | sed 's/^/U /'
})
cycles() { # by_folder (0 or 1): `OBJECT SYMBOL DEFINER` of each reference on a cycle
	printf '%s\n' "$engine_refs" | awk -v by_folder="$1" '
	function node(o) {
		if (by_folder && split(o, part, "/") > 2)
			return part[1] "/" part[2]
		return o
	}
	$1 == "D" { def[$3] = $2; next }
	$1 == "A" { skip[$2 " " $3] = 1; next }
	($3 in def) && node(def[$3]) != node($2) && !(($2 " " $3) in skip) {
		a = node($2); b = node(def[$3])
		nodes[a] = nodes[b] = 1
		reach[a, b] = 1
		ref[++n] = $2 " " $3 " " def[$3]
		from[n] = a; to[n] = b
	}
	END {
		for (k in nodes) for (i in nodes) if ((i, k) in reach)
			for (j in nodes) if ((k, j) in reach) reach[i, j] = 1
		for (r = 1; r <= n; r++) if ((to[r], from[r]) in reach) print ref[r]
	}' | sort -u
}
while read -r o s d; do
	offence e "$o" "$s" "$d"
done < <(cycles 0)

# f. the codecs depend on nothing else of the project
codec_objs=$(objs engine/codec | sed "s#^$OBJ/##")
projdefs=$(for d in engine layout fs; do objs "$d"; done | xargs -r nm -A --defined-only -g 2>/dev/null |
	awk -v p="$OBJ/" 'NF == 3 { o = $1; sub(/:.*$/, "", o); sub("^" p, "", o); print o, $3 }')
while read -r o s d; do
	offence f "$o" "$s" "$d"
done < <({
	printf 'C %s\n' $codec_objs
	printf '%s\n' "$projdefs" | sed 's/^/D /'
	undefined engine | sed 's/^/U /'
} | awk '
	$1 == "C" { codec[$2] = 1; next }
	$1 == "D" { def[$3] = $2; next }
	($2 in codec) && ($3 in def) && !(def[$3] in codec) { print $2, $3, def[$3] }')

# g. engine/'s folders: their own headers, engine/'s, another folder's one
# header, layout/'s and vecfs.h
for f in engine/*.[ch] engine/*/*.[ch]; do
	[[ -f $f && $f != engine/include/* ]] || continue
	dir=${f%/*}
	for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
		if [[ $h == */* ]]; then
			g=${h%%/*}
			[[ $h == "$g/$g.h" && engine/$g != "$dir" && -f engine/$h && $g != include ]] && continue
		elif [[ $h == vecfs.h || -f $dir/$h || -f engine/$h || -f layout/$h ]]; then
			continue
		fi
		offence g "$f" "\"$h\""
	done
done

# h. no cycle among engine/'s folders
while read -r o s d; do
	offence h "$o" "$s" "$d"
done < <(cycles 1)

# i. the layers' prefixes on every external symbol
while read -r o s; do
	offence i "$o" "$s"
done < <({
	for d in engine layout; do objs "$d"; done | xargs -r nm -A --defined-only -g 2>/dev/null |
		awk 'NF == 3 && $3 !~ /^(vf_|vecfs_)/ { print $1, $3 }'
	objs fs | xargs -r nm -A --defined-only -g 2>/dev/null |
		awk 'NF == 3 && $3 !~ /^fs_/ && $3 != "main" { print $1, $3 }'
} | awk -v p="$OBJ/" '{ o = $1; sub(/:.*$/, "", o); sub("^" p, "", o); print o, $2 }')

pass=0 fail=0
for r in a b c d e f g h i; do
	n=${count[$r]:-0}
	if [[ $n -eq 0 ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
echo "layers: offences a=${count[a]:-0} b=${count[b]:-0} c=${count[c]:-0} d=${count[d]:-0} e=${count[e]:-0} f=${count[f]:-0} g=${count[g]:-0} h=${count[h]:-0} i=${count[i]:-0}, allowed $nallowed"
echo "layers: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
