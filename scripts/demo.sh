#!/usr/bin/env bash
# The main job of `make run`: start a local pvfs (manager + 4 I/O daemons, and the mount when
# FUSE is available), copy a file in and read it back, show status and capacity.
set -euo pipefail
DIR=${1:-$PWD/.pvfs}
MNT=${2:-$PWD/mnt}
ADMIN=${ADMIN:-.venv/bin/pvfs-admin}
CONFIG="$DIR/pvfs.toml"

if [ ! -f "$CONFIG" ]; then
  "$ADMIN" init --dir "$DIR" --iods 4
fi
export PVFS_CONFIG="$CONFIG"

mount_args=()
if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null && .venv/bin/python -c "import pvfs.fuse.mount" 2>/dev/null; then
  mkdir -p "$MNT"
  mount_args=(--mount "$MNT")
fi
"$ADMIN" up "${mount_args[@]}"

echo
echo "== copying a 64 MiB file in and reading it back through the native API"
sample=$(mktemp)
back=$(mktemp)
trap 'rm -f "$sample" "$back"' EXIT
head -c $((64 << 20)) /dev/urandom > "$sample"
"$ADMIN" mkdir -p pvfs:/demo
"$ADMIN" setstripe pvfs:/demo --pcount 4 --ssize 64k
"$ADMIN" cp "$sample" pvfs:/demo/sample.bin
"$ADMIN" cp pvfs:/demo/sample.bin "$back"
cmp "$sample" "$back" && echo "round trip OK: $(stat -c %s "$back") bytes identical"
"$ADMIN" getstripe pvfs:/demo/sample.bin
"$ADMIN" ls -l pvfs:/demo

if [ ${#mount_args[@]} -gt 0 ]; then
  echo
  echo "== the same file through the mount at $MNT"
  ls -l "$MNT/demo"
  cmp "$sample" "$MNT/demo/sample.bin" && echo "mount read OK"
fi

echo
echo "== status"
"$ADMIN" status
echo
echo "== capacity"
"$ADMIN" df
echo
echo "The file system keeps running. Use it:"
echo "  export PVFS_CONFIG=$CONFIG"
echo "  $ADMIN ls pvfs:/          # or, with the mount: ls $MNT"
echo "Stop it with:  make stop    (or: $ADMIN down${mount_args:+ after $ADMIN umount $MNT})"
