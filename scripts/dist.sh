#!/usr/bin/env bash
# Builds weir's release artifacts from a clean checkout, offline but for the
# Go module proxy and the npm registry the builds fetch from:
#
#   weir_<version>_<os>_<arch>.tar.gz   weir for linux and darwin, amd64 and arm64
#                                       (pure Go: the SQLite store is modernc's; static, -trimpath)
#   weirhq-client-<version>.tgz         @weirhq/client, as npm pack makes it
#   weirhq-world-<version>.tgz          @weirhq/world, the same
#   weir_client-<version>-py3-none-any.whl, weir_client-<version>.tar.gz
#                                       the Python client, by its in-tree backend
#   SHA256SUMS                          the checksums of all of them
#
# into dist/ (or the directory given). VERSION says the version; the npm
# packages' and the Python client's must be the same, or it fails.
#
#   scripts/dist.sh [OUT]        (make dist)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/weir_* "$out"/weirhq-* "$out"/SHA256SUMS

version=$(tr -d ' \n' < VERSION)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
fail() { echo "dist: $*" >&2; exit 1; }
for pkg in js/client js/world; do
  v=$(node -p "require('./$pkg/package.json').version")
  [ "$v" = "$version" ] || fail "$pkg is version $v, VERSION says $version"
done
pyv=$(sed -n 's/^version = "\(.*\)"$/\1/p' clients/python/pyproject.toml)
[ "$pyv" = "$version" ] || fail "clients/python is version $pyv, VERSION says $version"

# The same sources make the same archives: a fixed time for every file.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}
tarball() { # tarball OUT DIR NAME: DIR/NAME as OUT, reproducibly
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -C "$2" -cf - "$3" | gzip -n > "$1"
}

echo "dist: weir $version ($commit) into $out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for os in linux darwin; do
  for arch in amd64 arm64; do
    name=weir_${version}_${os}_${arch}
    mkdir -p "$work/$name"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=$version -X main.commit=$commit" -o "$work/$name/weir" ./cmd/weir
    cp LICENSE README.md "$work/$name/"
    tarball "$out/$name.tar.gz" "$work" "$name"
    echo "  $name.tar.gz"
  done
done

# npm: the workspace installed from its lockfile, then each package packed
# (prepack builds it).
(cd js && npm install --no-audit --no-fund --loglevel=error && npm pack -w @weirhq/client -w @weirhq/world --pack-destination "$out" --loglevel=error >/dev/null)
for f in weirhq-client-$version.tgz weirhq-world-$version.tgz; do
  [ -f "$out/$f" ] || fail "npm pack made no $f"
  echo "  $f"
done

# Python: the wheel and the sdist, by the PEP 517 hooks of the in-tree
# backend (the standard library alone).
python3 - "$root/clients/python" "$out" <<'PY'
import importlib.util, sys
root, out = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("backend", root + "/_build/backend.py")
backend = importlib.util.module_from_spec(spec)
spec.loader.exec_module(backend)
print("  " + backend.build_wheel(out))
print("  " + backend.build_sdist(out))
PY

(cd "$out" && sha256sum weir_* weirhq-* > SHA256SUMS)
echo "  SHA256SUMS"
