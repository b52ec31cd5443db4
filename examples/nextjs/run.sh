#!/usr/bin/env bash
# One command for the example: ./run.sh (or npm run weir) from this folder.
# Builds weir (unless $WEIR_BIN names one, or weir is on PATH), packs the two
# npm tarballs of this checkout (make npm) and installs them as a user would,
# builds the app, then runs weir server (SQLite in .weir/) and the app
# with the World's settings until Ctrl-C. Open http://127.0.0.1:${PORT:-3000}.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"
port=${PORT:-3000}
weir_port=${WEIR_PORT:-4437}
bin=${WEIR_BIN:-$(command -v weir || true)}
if [ -z "$bin" ]; then
  echo "building weir (go build ./cmd/weir)…"
  (cd "$root" && go build -o "$here/.weir/weir" ./cmd/weir)
  bin=$here/.weir/weir
fi
version=$(tr -d ' \n' < "$root/VERSION")
echo "packing @weirhq/client and @weirhq/world (make npm)…"
make -C "$root" npm >/dev/null
npm install --no-audit --no-fund --loglevel=error
npm install --no-save --no-audit --no-fund --loglevel=error "$root/dist/weirhq-client-$version.tgz" "$root/dist/weirhq-world-$version.tgz"
npx next build >/dev/null
mkdir -p .weir
secret=${WEIR_WORLD_SECRET:-$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')}
"$bin" server --addr "127.0.0.1:$weir_port" --store "sqlite:$here/.weir/weir.db" --world-secret "$secret" &
weir_pid=$!
trap 'kill $weir_pid 2>/dev/null || true' EXIT
echo "weir server: http://127.0.0.1:$weir_port/ui/   the app: http://127.0.0.1:$port"
WORKFLOW_TARGET_WORLD=@weirhq/world WEIR_URL=http://127.0.0.1:$weir_port WEIR_WORLD_SECRET=$secret \
  WEIR_APP_URL=http://127.0.0.1:$port npx next start -p "$port" -H 127.0.0.1
