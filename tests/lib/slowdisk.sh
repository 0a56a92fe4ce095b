# slowdisk.sh - a real slow disk for end-to-end tests (docs/BENCHMARKS.md):
# a loop device over a file, ext4 on it, page cache dropped, and a cgroup v1
# blkio read throttle for the processes that slowdisk_run starts.
#
#   . tests/lib/slowdisk.sh
#   slowdisk_require            # exit 77 (skip) with a reason if impossible
#   slowdisk_setup 256 20971520 # size in MB, read bytes/s (0 = no throttle)
#   slowdisk_run CMD...         # runs CMD inside the throttled cgroup
#   (cleanup runs from the EXIT trap whatever happens)
#
# Exports SD_DIR (scratch), SD_IMG, SD_DEV (loopN), SD_MAJMIN, SD_MNT, SD_CG.
# SD_TAG, when set, goes into the scratch directory's and the cgroup's names.

slowdisk_require() {
    if [ "$(id -u)" != 0 ]; then
        echo "skipped: needs root (loop device, mount, blkio cgroup)"; exit 77
    fi
    command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null ||
        { echo "skipped: losetup or mkfs.ext4 missing (make deps)"; exit 77; }
    [ -w /sys/fs/cgroup/blkio ] ||
        { echo "skipped: no writable cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio"; exit 77; }
}

slowdisk_cleanup() {
    set +e
    if [ -n "${SD_CG:-}" ] && [ -d "$SD_CG" ]; then
        # Move anything left in the group out, then remove it.
        for p in $(cat "$SD_CG/cgroup.procs" 2>/dev/null); do
            kill -9 "$p" 2>/dev/null
        done
        sleep 0.2
        for p in $(cat "$SD_CG/cgroup.procs" 2>/dev/null); do
            echo "$p" > /sys/fs/cgroup/blkio/cgroup.procs 2>/dev/null
        done
        rmdir "$SD_CG" 2>/dev/null
    fi
    if [ -n "${SD_MNT:-}" ] && mountpoint -q "$SD_MNT" 2>/dev/null; then
        umount "$SD_MNT" 2>/dev/null || umount -l "$SD_MNT"
    fi
    [ -n "${SD_DEV:-}" ] && losetup -d "/dev/$SD_DEV" 2>/dev/null
    [ -n "${SD_DIR:-}" ] && rm -rf "$SD_DIR"
    [ -n "${SD_EXTRA_CLEANUP:-}" ] && eval "$SD_EXTRA_CLEANUP"
}

slowdisk_setup() {
    local size_mb=$1 bps=$2
    trap slowdisk_cleanup EXIT
    trap 'exit 130' INT TERM
    SD_DIR=$(mktemp -d "/var/tmp/trainmon-${SD_TAG:-sd}.XXXXXX")
    SD_IMG=$SD_DIR/disk.img
    SD_MNT=$SD_DIR/mnt
    mkdir -p "$SD_MNT"
    truncate -s "${size_mb}M" "$SD_IMG"
    local dev
    dev=$(losetup -f --show "$SD_IMG") || { echo "losetup failed"; exit 1; }
    SD_DEV=${dev#/dev/}
    mkfs.ext4 -q -F "$dev" >/dev/null || { echo "mkfs.ext4 failed"; exit 1; }
    mount "$dev" "$SD_MNT" || { echo "mount failed"; exit 1; }
    SD_MAJMIN=$(cat "/sys/class/block/$SD_DEV/dev")
    SD_CG=/sys/fs/cgroup/blkio/trainmon-${SD_TAG:-test}-$$
    mkdir -p "$SD_CG"
    if [ "$bps" -gt 0 ]; then
        echo "$SD_MAJMIN $bps" > "$SD_CG/blkio.throttle.read_bps_device"
    fi
    export SD_DIR SD_IMG SD_DEV SD_MAJMIN SD_MNT SD_CG
}

# Writes a file of MB megabytes at PATH (incompressible), then flushes and
# drops the page cache so that reading it goes to the disk.
slowdisk_file() {
    local path=$1 mb=$2
    head -c "$((mb * 1024 * 1024))" /dev/urandom > "$path"
    sync
    slowdisk_drop_caches
}

slowdisk_drop_caches() {
    sync
    echo 3 > /proc/sys/vm/drop_caches
}

# Runs "$@" inside the throttled cgroup (the process joins it, then execs).
slowdisk_run() {
    bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$SD_CG" "$@"
}
