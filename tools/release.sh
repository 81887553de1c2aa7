#!/usr/bin/env bash
# tools/release.sh - writes the release of the VERSION file into dist/ (or --out DIR):
#
#   ctrain-v<V>-install.yaml             the CRD (manifests/crds) and everything `kubectl apply
#                                        --server-side -k manifests/` installs, the image
#                                        ctrain:v<V>; for `kubectl apply --server-side -f`
#   ctrain-v<V>-install-namespaced.yaml  the same for manifests/namespaced (a Role, one namespace)
#   ctrain-v<V>-tfjob.yaml               the TFJob-mode add-on, applied over the install: the
#                                        TFJob CRD, the rights on TFJobs, the Deployment with
#                                        --enable-tfjob (what manifests/with-tfjob changes)
#   ctrain-<V>.tgz                       the Helm chart (charts/ctrain, `helm package`)
#   ctrain-v<V>-image.tar                the image ctrain:v<V> as a docker-archive
#                                        (tools/image/build.sh ctrain-release: root, buildah)
#   SHA256SUMS                           `sha256sum -c SHA256SUMS` checks them all
#
#   bash tools/release.sh [--out DIR] [--no-images]
#
# It refuses a release whose VERSION is not MAJOR.MINOR.PATCH, whose chart says another
# version, or whose CHANGELOG.md has no "## v<V>" section. Helm is built once from its Go
# module (tools/helm/build.sh); kustomize is kubectl's.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/dist
IMAGES=1
die() {
  echo "release.sh: $*" >&2
  exit 1
}
while (($#)); do
  case $1 in
  --out) OUT=$(realpath -m "${2:?--out needs a directory}") && shift ;;
  --no-images) IMAGES=0 ;;
  *) die "usage: release.sh [--out DIR] [--no-images]" ;;
  esac
  shift
done

V=$(<"$ROOT/VERSION")
[[ $V =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION: '$V' is not MAJOR.MINOR.PATCH"
TAG=v$V
grep -qx "version: $V" "$ROOT/charts/ctrain/Chart.yaml" || die "charts/ctrain/Chart.yaml: version is not $V"
grep -qx "appVersion: $TAG" "$ROOT/charts/ctrain/Chart.yaml" ||
  die "charts/ctrain/Chart.yaml: appVersion is not $TAG"
grep -q "^## $TAG\b" "$ROOT/CHANGELOG.md" || die "CHANGELOG.md: no '## $TAG' section"
KUBECTL=$(command -v kubectl || true)
if [[ -z $KUBECTL ]]; then
  KUBECTL=$(bash "$ROOT/tools/localcluster/build.sh" | tail -n 1)/kubectl
fi
HELM=$(bash "$ROOT/tools/helm/build.sh" | tail -n 1)

rm -rf "$OUT"
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# render FILE KUSTOMIZATION...: what kustomize renders from each (the CRDs' path first, then
# the install's) with the release's image, which must be named exactly once (the controller
# Deployment). kubectl apply --server-side applies the CRDs first in one file, as it does
# Namespaces.
render() {
  local out=$1 k
  shift
  : >"$TMP/r.yaml"
  for k in "$@"; do
    "$KUBECTL" kustomize "$ROOT/$k" >>"$TMP/r.yaml"
    echo "---" >>"$TMP/r.yaml"
  done
  [[ $(grep -c '^ *image: ctrain:latest$' "$TMP/r.yaml") == 1 ]] ||
    die "$*: expected one 'image: ctrain:latest'"
  { echo "# ctrain $TAG: kubectl apply --server-side -f $(basename "$out")"
    sed '$d' "$TMP/r.yaml" | sed "s|^\( *image: \)ctrain:latest$|\1ctrain:$TAG|"; } >"$out"
}
render "$OUT/ctrain-$TAG-install.yaml" manifests/crds manifests
render "$OUT/ctrain-$TAG-install-namespaced.yaml" manifests/crds manifests/namespaced
render "$TMP/tf.yaml" manifests/crds-tfjob manifests/with-tfjob
# The add-on: what manifests/with-tfjob has that the install has not, or has otherwise.
python3 - "$OUT/ctrain-$TAG-install.yaml" "$TMP/tf.yaml" "$OUT/ctrain-$TAG-tfjob.yaml" "$TAG" <<'PY'
import sys
import yaml
def objs(p):
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
            for d in yaml.safe_load_all(open(p)) if d}
base, tf = objs(sys.argv[1]), objs(sys.argv[2])
add = [o for k, o in tf.items() if base.get(k) != o]
with open(sys.argv[3], "w") as f:
    f.write(f"# ctrain {sys.argv[4]} TFJob mode, over the install: "
            f"kubectl apply --server-side -f {sys.argv[3].rsplit('/', 1)[-1]}\n")
    yaml.safe_dump_all(add, f, sort_keys=False)
PY

"$HELM" lint --strict "$ROOT/charts/ctrain" >&2
"$HELM" package "$ROOT/charts/ctrain" --destination "$OUT" >&2

if ((IMAGES)); then
  tar=$(bash "$ROOT/tools/image/build.sh" ctrain-release | tail -n 1)
  [[ -f $tar ]] || die "no image archive from tools/image/build.sh ctrain-release"
  cp "$tar" "$OUT/ctrain-$TAG-image.tar"
fi

(cd "$OUT" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort |
  xargs sha256sum >SHA256SUMS)
echo "release.sh: $OUT:" >&2
(cd "$OUT" && ls -l >&2)
echo "$OUT"
