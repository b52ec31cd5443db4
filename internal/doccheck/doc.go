// Package doccheck keeps the code in weir's docs true: every code snippet in
// docs/ and the READMEs compiles or runs in CI.
//
// A doc's code block is a copy, and a copy drifts: an API is renamed, an
// option moves, and the README goes on showing code that no longer builds.
// So each Go, TypeScript, JavaScript or Python block in README.md,
// docs/*.md, js/client/README.md, js/world/README.md, examples/*/README.md
// and clients/python/README.md names the real file it is copied from, in an
// HTML comment on the line before its opening fence (blank lines allowed
// between):
//
//	<!-- snippet: internal/doccheck/snippets_test.go#readme-sdk -->
//
// That file holds the region between a line containing
// "snippet:readme-sdk" (a comment: // snippet:readme-sdk, or # snippet:...
// in Python) and the next line containing "end snippet". The file is code
// CI already builds: a Go test file (go vet and go test compile it), a
// TypeScript file of a project CI type-checks (js/client's test files,
// examples/nextjs), a Python file pyright checks. TestSnippets fails when a
// checked block has no marker, when its marker names a file or region that
// does not exist, and when the block differs from the region (after
// removing the region's common indentation and every line's trailing
// white space), naming the doc's file and line and the first line that
// differs.
//
// The package has no code of its own: its tests are the checker
// (doccheck_test.go) and the Go snippets (snippets_test.go,
// main_snippet_test.go), which compile against weir's real packages and
// are never run.
package doccheck
