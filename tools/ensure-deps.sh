#!/bin/sh
# Make sure the Debian packages vecfs builds and runs with are installed.
# As root: installs what is missing.  Otherwise: prints the apt-get line and fails.
PKGS="build-essential pkg-config libfuse3-dev fuse3 liblmdb-dev libxxhash-dev libzstd-dev libcmocka-dev python3 clang libclang-rt-14-dev attr python3-numpy python3-pip python3-setuptools gnuplot-nox python3-dask python3-distributed python3-pandas python3-venv rsync"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "installing:$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2 && apt-get install -y -qq $missing >&2 && exit 0
	echo "apt-get failed" >&2
	exit 1
fi
echo "vecfs needs these Debian packages; run as root:" >&2
echo "  apt-get install -y$missing" >&2
exit 1
