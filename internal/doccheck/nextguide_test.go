package doccheck

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Next.js guide's "From an empty directory" is examples/nextjs's chat:
// every file of the app that the chat's workflow, routes and page import
// (relative or '@/' imports, followed to the end) is named in the guide,
// so following it by hand gives the app CI builds and tests in Chromium.
// (The guide named four files; the workflow imports a fifth.)
func TestNextGuideNamesTheAppsFiles(t *testing.T) {
	root := repoRoot(t)
	app := filepath.Join(root, "examples", "nextjs")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "world.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, guide, ok := strings.Cut(string(doc), "**From an empty directory**")
	if !ok {
		t.Fatal(`docs/world.md has no "**From an empty directory**" guide`)
	}
	guide, _, _ = strings.Cut(guide, "\n## ")
	guide, _, _ = strings.Cut(guide, "\n### ")
	seen := map[string]bool{}
	todo := []string{"next.config.ts", "workflows/chat.ts", "app/api/chat/route.ts", "app/api/chat/[runId]/stream/route.ts", "app/page.tsx"}
	for len(todo) > 0 {
		f := todo[0]
		todo = todo[1:]
		if seen[f] {
			continue
		}
		seen[f] = true
		if !strings.Contains(guide, "`"+f+"`") {
			t.Errorf("docs/world.md's guide from an empty directory does not name examples/nextjs/%s, which the chat needs", f)
		}
		src, err := os.ReadFile(filepath.Join(app, filepath.FromSlash(f)))
		if err != nil {
			t.Errorf("examples/nextjs/%s: %v", f, err)
			continue
		}
		for _, m := range importRE.FindAllStringSubmatch(string(src), -1) {
			spec := m[1] + m[2]
			var p string
			switch {
			case strings.HasPrefix(spec, "@/"):
				p = strings.TrimPrefix(spec, "@/")
			case strings.HasPrefix(spec, "./"), strings.HasPrefix(spec, "../"):
				p = path.Join(path.Dir(f), spec)
			default:
				continue // a package
			}
			found := false
			for _, ext := range []string{"", ".ts", ".tsx", "/index.ts"} {
				if st, err := os.Stat(filepath.Join(app, filepath.FromSlash(p+ext))); err == nil && !st.IsDir() {
					todo, found = append(todo, p+ext), true
					break
				}
			}
			if !found {
				t.Errorf("examples/nextjs/%s imports %q, which is no file of the app", f, spec)
			}
		}
	}
}

// importRE matches an import's module specifier.
var importRE = regexp.MustCompile(`(?m)^\s*import\s[^'"]*?from\s+['"]([^'"]+)['"]|^\s*import\s+['"]([^'"]+)['"]`)
