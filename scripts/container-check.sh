#!/usr/bin/env bash
# Builds docker/Dockerfile.cpu for real without a Docker engine, and runs the
# image: Debian's buildah and podman, a debian:bookworm base image made here
# with debootstrap from the mirror apt uses, `buildah build --isolation chroot
# --network host --pull=never`, then inside the runtime image (`buildah from` +
# `buildah run --isolation chroot`) the demo and the Python example under
# mpirun (server + 2 actors + 1 learner). Prints both stages' sizes.
#
# Usage: scripts/container-check.sh [--fresh]
#   --fresh   also remake the debootstrap base (kept in $PERSERVE_CONTAINER_DIR
#             between runs; everything else there is removed at the end)
# Needs root (apt-get, debootstrap, container storage). Every step is bounded
# by a timeout; a step that cannot work says why and the script exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

work=${PERSERVE_CONTAINER_DIR:-/var/tmp/perserve-container}
fresh=0
[ "${1:-}" = "--fresh" ] && fresh=1

say() { echo "container-check: $*"; }
die() { echo "container-check: FAILED: $*" >&2; exit 1; }
step_start=$SECONDS
step() { say "[$((SECONDS - step_start)) s] $*"; }

[ "$(id -u)" -eq 0 ] || die "needs root (apt-get, debootstrap and the container storage under $work)"

# 1. Debian's tools: buildah builds and runs, podman imports the base, debootstrap makes it.
tools=(buildah podman debootstrap uidmap)
missing=()
for p in "${tools[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -qq || die "apt-get update failed or took over 5 min"
  timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed or took over 10 min"
fi

# 2. The mirror apt uses here (deb822 .sources first, then one-line sources.list).
mirror=$(awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' \
           /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
if [ -z "$mirror" ]; then
  mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' \
             /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
fi
[ -n "$mirror" ] || die "no bookworm mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/"
say "mirror $mirror, storage $work"

store=$work/storage
mkdir -p "$work"
# overlay where the kernel lets us mount it (each layer then costs its own files
# only), vfs (a full copy per layer, slow but works anywhere) otherwise.
driver=vfs
probe=$(mktemp -d "$work/probe.XXXXXX")
mkdir -p "$probe"/{lower,upper,work,merged}
if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
     "$probe/merged" 2>/dev/null; then
  umount "$probe/merged"
  driver=overlay
fi
rm -rf "$probe"
say "storage driver $driver"
opts=(--root "$store/root" --runroot "$store/run" --storage-driver "$driver")
container=""
cleanup() {
  set +e
  [ -n "$container" ] && buildah "${opts[@]}" rm "$container" >/dev/null 2>&1
  buildah "${opts[@]}" rm --all >/dev/null 2>&1
  buildah "${opts[@]}" rmi --all --force >/dev/null 2>&1
  # Anything still mounted under the storage (overlay layers) before removing it.
  findmnt -rn -o TARGET | grep "^$store/" | sort -r | xargs -r -n1 umount -l
  rm -rf "$store" "$work/rootfs"
}
trap cleanup EXIT
cleanup
set -e

# 3. The base image: a minbase debootstrap of bookworm, imported as debian:bookworm.
base=$work/debian-bookworm-minbase.tar
[ $fresh -eq 1 ] && rm -f "$base"
if [ ! -s "$base" ]; then
  step "debootstrap --variant=minbase bookworm from $mirror"
  timeout 900 debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed or took over 15 min (log: $work/debootstrap.log)"; }
  rm -rf "$work/rootfs"/var/cache/apt/archives/*.deb "$work/rootfs"/var/lib/apt/lists/*
  tar -C "$work/rootfs" -cf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$work/rootfs"
fi
step "importing the base as docker.io/library/debian:bookworm"
timeout 300 podman "${opts[@]}" import --quiet "$base" docker.io/library/debian:bookworm >/dev/null \
  || die "podman import of the debootstrap base failed"

# Can buildah run anything here? Tells a sandbox that refuses chroot isolation
# apart from a broken Dockerfile.
probe_ctr=$(buildah "${opts[@]}" from --pull-never docker.io/library/debian:bookworm 2>"$work/probe.log") \
  && timeout 60 buildah "${opts[@]}" run --isolation chroot --network host "$probe_ctr" -- true >>"$work/probe.log" 2>&1 \
  || { cat "$work/probe.log" >&2; die "buildah cannot run a container here with --isolation chroot (above: why)"; }
buildah "${opts[@]}" rm "$probe_ctr" >/dev/null

# 4. Both stages in one build (--layers keeps the build stage as an image, tagged
# from the log; two builds would compile twice whenever the tree changed between them).
step "building perserve:cpu (build stage, then runtime stage)"
timeout 1500 buildah "${opts[@]}" build --isolation chroot --network host --pull=never --layers \
    -f docker/Dockerfile.cpu -t perserve:cpu "$repo" >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log" >&2; die "building the image failed or took over 25 min (log: $work/build.log)"; }
build_stage=$(awk '/^\[2\/2\]/ {print id; exit} /^--> [0-9a-f]+$/ {id=$2}' "$work/build.log")
[ -n "$build_stage" ] && buildah "${opts[@]}" tag "$build_stage" perserve:cpu-build \
  || die "could not find the build stage's image in $work/build.log"
buildah "${opts[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' \
  | grep -E 'perserve|debian' | sed 's/^/container-check: image /'

# 5. Inside the runtime image: the demo, then the Python example under mpirun.
container=$(buildah "${opts[@]}" from --pull-never perserve:cpu)
in_image=(buildah "${opts[@]}" run --isolation chroot --network host "$container" --)

step "the demo (5 s) inside perserve:cpu"
timeout 120 "${in_image[@]}" perserve-demo 5 \
  >"$work/demo.log" 2>&1 || { tail -30 "$work/demo.log" >&2; die "the demo failed in the image"; }
grep -E "items/s|summary|clients closed" "$work/demo.log" | tail -3 | sed 's/^/container-check:   /'
grep -q "items/s" "$work/demo.log" || { cat "$work/demo.log" >&2; die "the demo printed no stats line"; }

step "the Python example (server + 2 actors + 1 learner) inside perserve:cpu"
timeout 120 "${in_image[@]}" mpirun \
  -np 1 perserve-server --stats-interval 0 : -np 3 python3 -m mpi4py examples/actor_learner.py \
  >"$work/python.log" 2>&1 || { tail -30 "$work/python.log" >&2; die "the Python example failed in the image"; }
grep -E "^(learner|actor):" "$work/python.log" | sed 's/^/container-check:   /'
grep -q "^learner:" "$work/python.log" || { cat "$work/python.log" >&2; die "the Python learner printed nothing"; }

step "done; removing the images and $store (kept: $base)"
