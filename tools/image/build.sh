#!/usr/bin/env bash
# build.sh - the local node's container images, built without Docker and without a registry.
#
#   bash tools/image/build.sh ctrain   # ./Dockerfile, CPU variant   -> docker.io/library/ctrain:latest
#                                      #   (also tagged ctrain:v<VERSION> in the store)
#   bash tools/image/build.sh ctrain-release # the same image -> docker.io/library/ctrain:v<VERSION>
#                                      #   (VERSION: the file at the root; tools/release.sh's archive)
#   bash tools/image/build.sh pause    # Kubernetes' pause.c, static -> registry.k8s.io/pause:<TAG>
#   bash tools/image/build.sh tf       # tools/image/tf/ (stock TF, + python/ctrain_keras)
#                                      #   -> docker.io/library/ctrain-tf:<TF version>
#   bash tools/image/build.sh tf-examples # training-operator's TF examples on ctrain-tf, offline
#                                      #   -> docker.io/library/ctrain-tf-examples:<TF version>
#   bash tools/image/build.sh clean    # drop the image store and every cached archive
#
# The last line of stdout is the path of a docker-archive that `ctr -n k8s.io images import`
# (and `kind load image-archive`, `minikube image load`) takes as is; everything else goes to
# stderr. Archives are cached under ${CTRAIN_CACHE:-~/.cache/ctrain}/images/, keyed by a hash of
# their inputs (this script, the Dockerfile, the build context, the base image), so a second
# run with unchanged inputs only hashes them. CTRAIN_IMAGE_REFRESH=1 makes the base image anew
# (to take Debian's updates) and rebuilds the image asked for on it.
#
# How: buildah bud (daemonless, --isolation chroot, --pull=never) with its store in the cache
# dir, so the apt layers are reused between builds. The base image debian:bookworm-slim is made
# here by mmdebstrap (minbase) and committed into that store under the name the Dockerfiles use;
# nothing is pulled from a registry. Needs root, buildah, mmdebstrap, git; gcc and libc6-dev
# (pause, and its source from the Go module cache); python3 -m pip (tf: wheels are downloaded
# on the host, the build installs them offline with their hashes checked); tf-examples: the
# training-operator v1.9.3 Go module (its examples/tensorflow/) and Debian's fashion-mnist.
#
# Buildah 1.28 (bookworm) skips `FROM build-${VARIANT}` stages unless VARIANT is passed with
# --build-arg (the ARG default is not used to find the stages in use), hence the explicit
# --build-arg VARIANT=cpu.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SELF="$ROOT/tools/image/build.sh"
CACHE=${CTRAIN_CACHE:-$HOME/.cache/ctrain}
IMAGES="$CACHE/images"
DRIVER=${CTRAIN_BUILDAH_DRIVER:-overlay}
STORE="$CACHE/buildah/$DRIVER"
RUNROOT="/run/ctrain-buildah-$DRIVER"
BASE_REF=docker.io/library/debian:bookworm-slim
RELEASE_TAG=v$(<"$ROOT/VERSION") # the release's image tag; `latest` stays for the demo and tests
K8S_VERSION=v1.35.4 # the module holding build/pause; tools/localcluster/versions.sh wins if set
# Platform tags of the wheels pinned in tf/requirements.txt (Python 3.11, glibc 2.36).
PIP_PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux2014_x86_64)

log() { echo "build.sh: $*" >&2; }
die() {
  log "$*"
  exit 1
}
bh() { buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver "$DRIVER" "$@"; }
hash_of() { sha256sum | cut -c1-16; }

# A fresh working directory on the cache's file system (hard links), removed on exit.
TMP=""
WORKING=""
cleanup() {
  if [[ -n $WORKING ]]; then bh rm "$WORKING" >/dev/null 2>&1 || true; fi
  if [[ -n $TMP ]]; then rm -rf "$TMP"; fi
}
trap cleanup EXIT

# ---- the base image ---------------------------------------------------------------------------
# debian:bookworm-slim's recipe: minbase, merged /usr, no docs/man/locales (dpkg.cfg.d), apt
# that keeps no .debs nor caches (apt.conf.d, as the Docker image's docker-clean), empty lists.
make_base_tar() {
  local out=$1 clean='rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true'
  # shellcheck disable=SC2016 # the hooks' "$1" (the chroot) is mmdebstrap's to expand
  nice -n 10 mmdebstrap --variant=minbase --mode=root --format=tar \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/groff/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --aptopt="DPkg::Post-Invoke { \"$clean\"; }" --aptopt="APT::Update::Post-Invoke { \"$clean\"; }" \
    --aptopt='Dir::Cache::pkgcache ""' --aptopt='Dir::Cache::srcpkgcache ""' \
    --aptopt='Acquire::Languages "none"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*.log' \
    --customize-hook='rm -f "$1"/etc/hostname "$1"/etc/resolv.conf && : > "$1"/etc/machine-id' \
    --skip=output/dev \
    bookworm "$out" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" >&2
}
BASE_KEY=$(declare -f make_base_tar | hash_of)

ensure_base() {
  local stamp="$STORE/../base-$DRIVER.key"
  if [[ ${CTRAIN_IMAGE_REFRESH:-0} != 1 && -f $stamp && $(<"$stamp") == "$BASE_KEY" ]] &&
    bh inspect --type image "$BASE_REF" >/dev/null 2>&1; then
    return
  fi
  command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (apt-get install mmdebstrap)"
  log "making $BASE_REF with mmdebstrap"
  make_base_tar "$TMP/base.tar"
  WORKING=$(bh from --quiet scratch)
  bh add --quiet "$WORKING" "$TMP/base.tar" / >&2
  bh config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd '["bash"]' "$WORKING"
  bh commit --quiet --rm "$WORKING" "$BASE_REF" >&2
  WORKING=""
  rm -f "$TMP/base.tar"
  echo "$BASE_KEY" >"$stamp"
}

# ---- helpers ----------------------------------------------------------------------------------
# cached NAME KEY: print the archive for NAME-KEY if it is there (and return 0).
cached() {
  local tar="$IMAGES/$1-$2.tar"
  if [[ ${CTRAIN_IMAGE_REFRESH:-0} != 1 && -f $tar ]]; then
    log "cached: $tar"
    echo "$tar"
    return 0
  fi
  return 1
}

# export_archive IMAGE NAME KEY: write IMAGE (built under its final name, so that the archive
# names nothing else) as a docker-archive, and drop older archives of NAME.
export_archive() {
  local image=$1 name=$2 key=$3 tar="$IMAGES/$2-$3.tar"
  rm -f "$tar.part"
  bh push --quiet "$image" "docker-archive:$tar.part:$image" >&2
  mv "$tar.part" "$tar"
  # Older archives of this image (NAME-<16 hex digits>.tar), and images no tag holds any more.
  find "$IMAGES" -maxdepth 1 -name "$name-????????????????.tar" ! -path "$tar" -delete
  bh rmi --prune >/dev/null 2>&1 || true
  log "$image: archive $(du -m "$tar" | cut -f1) MiB, image $(bh images --noheading --format '{{.Size}}' "$image")"
  echo "$tar"
}

# bud ARGS...: buildah bud, cached layers, offline base, isolation that needs no daemon.
bud() {
  nice -n 10 buildah --root "$STORE" --runroot "$RUNROOT" --storage-driver "$DRIVER" bud \
    --isolation chroot --network host --pull=never --layers --force-rm "$@" >&2
}

# ---- images -----------------------------------------------------------------------------------
build_ctrain() {
  # The build context: what git would commit (tracked and untracked-not-ignored files as they
  # are in the working tree), so build outputs and caches in the checkout stay out.
  local ctx="$TMP/ctx" key
  mkdir -p "$ctx"
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard --deduplicate |
    while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$ctx")
  key=$({
    cat "$SELF"
    echo "$BASE_KEY"
    (cd "$ctx" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
  } | hash_of)
  cached ctrain "$key" && return
  ensure_base
  log "building ctrain:latest (buildah bud, context: $(find "$ctx" -type f | wc -l) files)"
  # The stages whose layers are worth keeping get a tag, so pruning never drops them.
  bud --build-arg VARIANT=cpu --target build-cpu -t localhost/ctrain-stage:build-cpu "$ctx"
  bud --build-arg VARIANT=cpu --target run-cpu -t localhost/ctrain-stage:run-cpu "$ctx"
  bud --build-arg VARIANT=cpu -t docker.io/library/ctrain:latest "$ctx"
  bh tag docker.io/library/ctrain:latest "docker.io/library/ctrain:$RELEASE_TAG" >&2
  export_archive docker.io/library/ctrain:latest ctrain "$key"
}

# The image of build_ctrain under the release's tag, in an archive of its own that names only
# ctrain:<RELEASE_TAG> (what the release's manifests reference).
build_ctrain_release() {
  local latest key
  latest=$(build_ctrain | tail -n 1)
  [[ -f $latest ]] || die "no ctrain archive"
  key=$(basename "$latest" .tar | sed 's/^ctrain-//')
  cached "ctrain-$RELEASE_TAG" "$key" && return
  # The archive may be cached while the store lost the image (clean, another driver).
  bh inspect --type image docker.io/library/ctrain:latest >/dev/null 2>&1 ||
    bh pull --quiet "docker-archive:$latest" >&2
  bh tag docker.io/library/ctrain:latest "docker.io/library/ctrain:$RELEASE_TAG" >&2
  export_archive "docker.io/library/ctrain:$RELEASE_TAG" "ctrain-$RELEASE_TAG" "$key"
}

build_pause() {
  local k8s=$K8S_VERSION modcache src tag key
  if [[ -f $ROOT/tools/localcluster/versions.sh ]]; then
    # shellcheck source=/dev/null
    k8s=$(K8S_VERSION="" && . "$ROOT/tools/localcluster/versions.sh" && echo "${K8S_VERSION:-$k8s}")
  fi
  modcache=$(go env GOMODCACHE 2>/dev/null || echo "$HOME/go/pkg/mod")
  src="$modcache/k8s.io/kubernetes@$k8s/build/pause"
  if [[ ! -f $src/linux/pause.c ]]; then
    log "fetching k8s.io/kubernetes@$k8s into the Go module cache"
    (cd "$TMP" && GOFLAGS=-mod=mod go mod download "k8s.io/kubernetes@$k8s") >&2
  fi
  tag=$(sed -n 's/^TAG ?= *//p' "$src/Makefile")
  [[ -n $tag ]] || die "no TAG in $src/Makefile"
  key=$({
    cat "$SELF" "$src/linux/pause.c"
    echo "$tag"
    gcc --version
  } | hash_of)
  cached pause "$key" && return
  log "building registry.k8s.io/pause:$tag from $src/linux/pause.c"
  # The flags of build/pause/Makefile (CFLAGS), then stripped as upstream's image is.
  gcc -Os -Wall -Werror -static -DVERSION="v$tag-ctrain" -o "$TMP/pause" "$src/linux/pause.c"
  strip "$TMP/pause"
  chmod 0755 "$TMP/pause"
  WORKING=$(bh from --quiet scratch)
  bh copy --quiet "$WORKING" "$TMP/pause" /pause >&2
  # As build/pause/Dockerfile: FROM scratch, USER 65535:65535, ENTRYPOINT ["/pause"].
  bh config --user 65535:65535 --entrypoint '["/pause"]' --cmd '' "$WORKING"
  bh commit --quiet --rm "$WORKING" "registry.k8s.io/pause:$tag" >&2
  WORKING=""
  export_archive "registry.k8s.io/pause:$tag" pause "$key"
}

build_tf() {
  local dir="$ROOT/tools/image/tf" ctx="$TMP/tf" version key wheels
  version=$(sed -n 's/^tensorflow-cpu==\([^ ]*\) .*/\1/p' "$dir/requirements.txt")
  [[ -n $version ]] || die "no tensorflow-cpu==VERSION in $dir/requirements.txt"
  # ctrain_keras (python/ctrain_keras): its pyproject.toml and module, not its tests nor
  # what a local build left beside them.
  mkdir -p "$ctx/ctrain_keras/ctrain_keras"
  cp "$ROOT/python/ctrain_keras/pyproject.toml" "$ctx/ctrain_keras/"
  cp "$ROOT/python/ctrain_keras/ctrain_keras/"*.py "$ctx/ctrain_keras/ctrain_keras/"
  key=$({
    cat "$SELF" "$dir/Dockerfile" "$dir/requirements.txt"
    echo "$BASE_KEY"
    (cd "$ctx" && find ctrain_keras -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
  } | hash_of)
  cached ctrain-tf "$key" && return
  # Wheels: downloaded on the host (its pip knows this machine's proxies and CAs), hashes
  # checked, kept per requirements.txt so a rebuild downloads nothing.
  wheels="$IMAGES/wheels-$(hash_of <"$dir/requirements.txt")"
  log "downloading the wheels of $dir/requirements.txt into $wheels"
  mkdir -p "$wheels"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp "${PIP_PLATFORMS[@]}" --require-hashes \
    -r "$dir/requirements.txt" -d "$wheels" >&2
  find "$IMAGES" -maxdepth 1 -name 'wheels-*' ! -path "$wheels" -exec rm -rf {} +
  ensure_base
  cp "$dir/Dockerfile" "$dir/requirements.txt" "$ctx/"
  chmod -R a+rX "$ctx/ctrain_keras"
  cp -al "$wheels" "$ctx/wheels"
  log "building ctrain-tf:$version (buildah bud)"
  bud -t "docker.io/library/ctrain-tf:$version" "$ctx"
  export_archive "docker.io/library/ctrain-tf:$version" ctrain-tf "$key"
}

# training-operator v1.9.3's examples/tensorflow images in one (tools/image/tf-examples/):
# their scripts where the module's Dockerfiles ADD them, on ctrain-tf, MNIST's npz pre-seeded
# (from Fashion-MNIST: no MNIST offline; see the Dockerfile).
TFOP_VERSION=v1.9.3
FASHION_MNIST=/usr/share/datasets/fashion-mnist
build_tf_examples() {
  local dir="$ROOT/tools/image/tf-examples" ctx="$TMP/tf-examples" modcache ex tf_tar tf_ref version key
  local wheels
  modcache=$(go env GOMODCACHE 2>/dev/null || echo "$HOME/go/pkg/mod")
  ex="$modcache/github.com/kubeflow/training-operator@$TFOP_VERSION/examples/tensorflow"
  if [[ ! -f $ex/mnist_utils.py ]]; then
    log "fetching github.com/kubeflow/training-operator@$TFOP_VERSION into the Go module cache"
    (cd "$TMP" && GOFLAGS=-mod=mod go mod download "github.com/kubeflow/training-operator@$TFOP_VERSION") >&2
  fi
  [[ -f $FASHION_MNIST/train-images-idx3-ubyte.gz ]] ||
    die "$FASHION_MNIST is missing (apt-get install fashion-mnist)"
  tf_tar=$(build_tf | tail -n 1)
  [[ -f $tf_tar ]] || die "no ctrain-tf archive"
  version=$(sed -n 's/^tensorflow-cpu==\([^ ]*\) .*/\1/p' "$ROOT/tools/image/tf/requirements.txt")
  tf_ref="docker.io/library/ctrain-tf:$version"
  # TensorBoard's wheels, as build_tf's (not named wheels-*: build_tf drops those not its own).
  wheels="$IMAGES/tf-examples-wheels-$(hash_of <"$dir/requirements.txt")"
  if [[ ! -d $wheels ]]; then
    log "downloading the wheels of $dir/requirements.txt into $wheels"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version 3.11 --implementation cp "${PIP_PLATFORMS[@]}" --require-hashes \
      -r "$dir/requirements.txt" -d "$wheels.part" >&2
    mv "$wheels.part" "$wheels"
    find "$IMAGES" -maxdepth 1 -name 'tf-examples-wheels-*' ! -path "$wheels" -exec rm -rf {} +
  fi
  mkdir -p "$ctx/var_tf_mnist" "$ctx/var_tf_dist_mnist" "$ctx/fashion-mnist"
  cp -al "$wheels" "$ctx/wheels"
  # The Dockerfiles ADD the whole directory: its files (mnist_with_summaries/ also holds the
  # tfevent-volume/ manifests, of no use in the image).
  find "$ex/mnist_with_summaries" -maxdepth 1 -type f -exec cp {} "$ctx/var_tf_mnist/" \;
  find "$ex/dist-mnist" -maxdepth 1 -type f -exec cp {} "$ctx/var_tf_dist_mnist/" \;
  cp "$ex/mnist_utils.py" "$ctx/var_tf_mnist/"
  cp "$ex/mnist_utils.py" "$ctx/var_tf_dist_mnist/"
  cp "$FASHION_MNIST/"*-ubyte.gz "$ctx/fashion-mnist/"
  cp "$dir/Dockerfile" "$dir/seed_mnist.py" "$dir/requirements.txt" "$ctx/"
  chmod -R a+rX "$ctx"
  key=$({
    cat "$SELF"
    basename "$tf_tar"
    (cd "$ctx" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
  } | hash_of)
  cached ctrain-tf-examples "$key" && return
  # ctrain-tf's archive may be cached while the store lost the image (clean, another driver).
  bh inspect --type image "$tf_ref" >/dev/null 2>&1 || bh pull --quiet "docker-archive:$tf_tar" >&2
  log "building ctrain-tf-examples:$version on $tf_ref (buildah bud)"
  bud --build-arg "TF_IMAGE=$tf_ref" -t "docker.io/library/ctrain-tf-examples:$version" "$ctx"
  export_archive "docker.io/library/ctrain-tf-examples:$version" ctrain-tf-examples "$key"
}

clean() {
  if [[ -d $STORE ]]; then
    bh rm --all >/dev/null 2>&1 || true
    bh rmi --all --force >/dev/null 2>&1 || true
  fi
  rm -rf "$CACHE/buildah" "$IMAGES" "$RUNROOT"
  log "removed $CACHE/buildah and $IMAGES"
}

main() {
  local what=${1:-}
  case $what in
  ctrain | ctrain-release | pause | tf | tf-examples | clean) ;;
  *) die "usage: build.sh ctrain|ctrain-release|pause|tf|tf-examples|clean" ;;
  esac
  [[ $EUID -eq 0 ]] || die "needs root (buildah's chroot isolation, mmdebstrap --mode=root)"
  if [[ $what == clean ]]; then
    clean
    return
  fi
  command -v buildah >/dev/null || die "buildah is missing (apt-get install buildah)"
  mkdir -p "$IMAGES" "$STORE"
  # One build at a time: the base image and the prune are shared.
  exec 9>"$IMAGES/.lock"
  flock 9
  TMP=$(mktemp -d "$IMAGES/.tmp.XXXXXX")
  "build_${what//-/_}"
}

main "$@"
