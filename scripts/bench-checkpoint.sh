#!/usr/bin/env bash
# Checkpoint write time and the longest stall of the service loop, for 2^21
# CartPole-sized items and 2^17 Atari-sized ones, against this disk's
# sequential write speed (dd with fsync), in one run.
# Usage: scripts/bench-checkpoint.sh [out-dir]   (default bench-results/checkpoint)
# Environment: DIR (where the checkpoints and the dd file go; default out-dir),
#              SMALL_ITEMS=2097152 ATARI_ITEMS=131072
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results/checkpoint}
dir=${DIR:-$out}
mkdir -p "$out" "$dir"
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release >/dev/null
gb=4
echo "== dd: ${gb} GiB with fsync into $dir"
dd_line=$(dd if=/dev/zero of="$dir/dd.bin" bs=1M count=$((gb * 1024)) conv=fsync 2>&1 | tail -n 1)
rm -f "$dir/dd.bin"
echo "   $dd_line"
dd_seconds=$(echo "$dd_line" | sed -E 's/.* copied, ([0-9.]+) s.*/\1/')
dd_gb_per_s=$(/usr/bin/python3 -c "print(round($gb * 1.073741824 / $dd_seconds, 3))")
for size in small atari; do
  items=$([ "$size" = small ] && echo "${SMALL_ITEMS:-2097152}" || echo "${ATARI_ITEMS:-131072}")
  echo "== $size: $items items"
  build/bench/perserve_bench_checkpoint --size "$size" --capacity "$items" --dir "$dir/ckpt-$size" \
    --out "$out/checkpoint-$size.json"
done
/usr/bin/python3 - "$out" "$dd_gb_per_s" <<'PY'
import json, sys
out, dd = sys.argv[1], float(sys.argv[2])
rows = [json.load(open(f"{out}/checkpoint-{s}.json")) for s in ("small", "atari")]
for r in rows:
    r["disk_gb_per_s"] = dd
    r["write_over_disk"] = round(r["write_gb_per_s"] / dd, 3)
json.dump(rows, open(f"{out}/checkpoint.json", "w"), indent=2)
print(f"disk (dd, fsync): {dd:.2f} GB/s")
for r in rows:
    print(f"{r['size']:<6} {r['items']:>8} items {r['checkpoint_gb']:6.2f} GB: written in {r['write_seconds']:.2f} s "
          f"({r['write_gb_per_s']:.2f} GB/s, {r['write_over_disk']:.2f}x dd), longest pass {r['longest_pass_ms']:.1f} ms, "
          f"longest add {r['longest_add_ms']:.1f} ms; restored in {r['restore_seconds']:.2f} s")
PY
