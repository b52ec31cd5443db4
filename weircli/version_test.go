package weircli

import (
	"runtime/debug"
	"testing"
)

// `weir version` says the module's version under `go install …@v0.1.0`
// (the build's main module carries it), the release's under its -ldflags,
// and "dev" for a build from a checkout; never "dev" for a tagged install.
func TestVersionLine(t *testing.T) {
	build := func(version string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/weirhq/weir", Version: version},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}}
	}
	for _, c := range []struct {
		name string
		cfg  Config
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"go install @v0.1.0", Config{Name: "weir"}, build("v0.1.0"), true, "weir v0.1.0 (0123456789ab) go1.26.8"},
		{"go install @latest, a pseudo-version", Config{Name: "weir"}, build("v0.0.0-20261206120000-0123456789ab"), true, "weir v0.0.0-20261206120000-0123456789ab (0123456789ab) go1.26.8"},
		{"a release's -ldflags", Config{Name: "weir", Version: "0.2.0"}, build("v0.1.0"), true, "weir 0.2.0 (0123456789ab) go1.26.8"},
		{"-ldflags dev, go install", Config{Name: "weir", Version: "dev"}, build("v0.1.0"), true, "weir v0.1.0 (0123456789ab) go1.26.8"},
		{"go build in a checkout", Config{Name: "weir"}, build("(devel)"), true, "weir dev (0123456789ab) go1.26.8"},
		{"no build info", Config{Name: "weir"}, nil, false, "weir dev"},
	} {
		if got := c.cfg.versionOf(c.bi, c.ok); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
