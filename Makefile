# The release artifacts (scripts/dist.sh): weir for linux and darwin on amd64
# and arm64, the npm tarballs, the Python wheel and sdist, SHA256SUMS.
.PHONY: dist test
dist:
	scripts/dist.sh dist

# The tests, as CI runs them (.ci/run runs more: the JS, the World, the UI, torture).
test:
	go test -race ./...
