# The release artifacts (scripts/dist.sh): weir for linux and darwin on amd64
# and arm64, the npm tarballs, the Python wheel and sdist, SHA256SUMS.
.PHONY: dist npm test
dist:
	scripts/dist.sh dist

# Just the npm tarballs (@weirhq/client, @weirhq/world), packed from the
# workspace's lockfile into dist/, as make dist packs them.
npm:
	mkdir -p dist
	cd js && npm install --no-audit --no-fund --loglevel=error && npm pack -w @weirhq/client -w @weirhq/world --pack-destination ../dist --loglevel=error

# The tests, as CI runs them (.ci/run runs more: the JS, the World, the UI, torture).
test:
	go test -race -timeout 20m ./...
