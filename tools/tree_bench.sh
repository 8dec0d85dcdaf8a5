#!/usr/bin/env bash
# Ordinary file tools on a large mount: a store of N records (1M by
# default) with payloads and a generation, then ls -l of the root, tar of
# the whole tree (and its backup mounted again), rsync -a twice, cp -a,
# export.jsonl streamed, and a delete of 100,000 keys (durable: a kill -9
# right after it, and a remount). Each step's time, the daemon's memory
# (VmRSS, VmHWM) around it, and one line a figure:
#   FIGURE name value unit
#
# Usage: bash tools/tree_bench.sh [-n N] [-d D] [-w WORKDIR] [-k] [-q]
#   -w  where the data, the store, the mount and the copies go (default
#       /work/tree-bench; a few times the store's size is needed)
#   -k  keep the generated data set for the next run (the store goes)
#   -q  quick: no tar, rsync or cp -a of the whole tree (each reads every
#       record's file: minutes a million)
set -u
N=1000000 D=128 W=/work/tree-bench KEEP=0 QUICK=0
while getopts "n:d:w:kq" o; do
	case $o in
	n) N=$OPTARG ;; d) D=$OPTARG ;; w) W=$OPTARG ;; k) KEEP=1 ;; q) QUICK=1 ;;
	*) exit 2 ;;
	esac
done
HERE=$(cd "$(dirname "$0")/.." && pwd)
B=$HERE/build
M=$W/mnt S=$W/store DATA=$W/data
mkdir -p "$W" "$M"
fig() { echo "FIGURE $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.3f", b - a}'; }
pid_of() { pgrep -f "^$B/vecfs .*$M" | head -n 1; }
mem() { awk '/^VmRSS|^VmHWM/ {printf "%s %d MB  ", $1, $2 / 1024}' "/proc/$(pid_of)/status"; echo; }
rss_mb() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$(pid_of)/status"; }
mount_it() { "$B/vecfs" "$1" "$M" || { echo "cannot mount $1"; exit 1; }; }
# unmount, and wait for the daemon to let the store go
umount_it() {
	local p i
	p=$(pid_of)
	fusermount3 -u "$M"
	for ((i = 0; i < 600; i++)); do
		[[ -n $p ]] && kill -0 "$p" 2>/dev/null || return 0
		sleep 0.1
	done
}
cleanup() { fusermount3 -u "$M" 2>/dev/null; }
trap cleanup EXIT

if [[ ! -s $DATA/base.fvecs ]]; then
	"$B/vecfs-data" --n "$N" --d "$D" --seed 1 --quiet --out "$DATA" || exit 1
fi
rm -rf "$S"
mount_it "$S"
echo 'auto_build = 0' >"$M/config"
t=$(now)
cp "$DATA/base.fvecs" "$M/ingest/" || exit 1
fig ingest_fvecs_s "$(since "$t")" s
# payloads: every record again, from its own export, with a payload
t=$(now)
sed 's/]}$/],"payload":{"i":0}}/' "$M/export.jsonl" >"$W/with-payloads.jsonl"
cp "$W/with-payloads.jsonl" "$M/ingest/" || exit 1
rm -f "$W/with-payloads.jsonl"
fig ingest_payloads_s "$(since "$t")" s
t=$(now)
echo build >"$M/ctl" || exit 1
fig build_s "$(since "$t")" s
umount_it
mount_it "$S"
sleep 2
echo "records: $(awk -F' = ' '$1 == "records" {print $2}' "$M/stats"), store: $(du -m "$S/data.mdb" | cut -f1) MB"
echo "daemon at the start: $(mem)"

# ls -l of the root, five times
for i in 1 2 3 4 5; do
	t=$(now)
	ls -l "$M" >/dev/null
	fig ls_l_root_ms "$(awk -v a="$t" -v b="$(now)" 'BEGIN {printf "%.1f", (b - a) * 1000}')" ms
done

# export.jsonl streamed, memory watched meanwhile
rss0=$(rss_mb)
peak=$rss0
size=$(stat -c %s "$M/export.jsonl")
t=$(now)
cat "$M/export.jsonl" >/dev/null &
cpid=$!
while kill -0 $cpid 2>/dev/null; do
	r=$(rss_mb)
	((r > peak)) && peak=$r
	sleep 0.2
done
wait $cpid
s=$(since "$t")
fig export_bytes "$size" bytes
fig export_mb_per_s "$(awk -v n="$size" -v s="$s" 'BEGIN {printf "%.1f", n / 1048576 / s}')" MB/s
fig export_rss_growth_mb $((peak - rss0)) MB

# tar of the whole tree, and its backup mounted again
if ((QUICK == 0)); then
rm -rf "$W/tar" && mkdir -p "$W/tar"
t=$(now)
tar -C "$M" -cf "$W/tar/t.tar" . 2>"$W/tar/err"
rc=$?
fig tar_s "$(since "$t")" s
fig tar_exit "$rc" status
head -c 300 "$W/tar/err"
echo "daemon after tar: $(mem)"
mkdir -p "$W/tar/store"
tar -xOf "$W/tar/t.tar" ./backup >"$W/tar/store/data.mdb"
rm -f "$W/tar/t.tar"
umount_it
mount_it "$W/tar/store"
fig tar_backup_records "$(awk -F' = ' '$1 == "records" {print $2}' "$M/stats")" records
umount_it
rm -rf "$W/tar"
mount_it "$S"

# rsync -a twice
rm -rf "$W/rs"
t=$(now)
rsync -a "$M/" "$W/rs/"
fig rsync1_exit $? status
fig rsync1_s "$(since "$t")" s
t=$(now)
n=$(rsync -a --stats "$M/" "$W/rs/" | awk -F: '/regular files transferred/ {gsub(/[ ,]/, "", $2); print $2}')
fig rsync2_s "$(since "$t")" s
fig rsync2_files_transferred "$n" files
echo "daemon after rsync: $(mem)"
rm -rf "$W/rs"

# cp -a
t=$(now)
cp -a "$M" "$W/cpa"
fig cp_a_exit $? status
fig cp_a_s "$(since "$t")" s
echo "daemon after cp -a: $(mem)"
rm -rf "$W/cpa"
fi

# a delete of 100,000 keys, durable at its close
before=$(awk -F' = ' '$1 == "records" {print $2}' "$M/stats")
seq 0 9 999999 | head -n 100000 >"$W/keys"
t=$(now)
cp "$W/keys" "$M/delete"
fig delete_100k_s "$(since "$t")" s
kill -9 "$(pid_of)"
sleep 1
fusermount3 -u "$M" 2>/dev/null
mount_it "$S"
fig delete_durable_records_gone $((before - $(awk -F' = ' '$1 == "records" {print $2}' "$M/stats"))) records
umount_it
rm -rf "$S"
((KEEP)) || rm -rf "$DATA"
