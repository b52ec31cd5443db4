package doccheck

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docGlobs are the markdown files whose code blocks are checked, as
// filepath.Glob patterns relative to the repository's root.
var docGlobs = []string{
	"README.md",
	"docs/*.md",
	"js/client/README.md",
	"js/world/README.md",
	"examples/*/README.md",
	"clients/python/README.md",
}

// checkedLangs are the languages of the blocks that must name their
// source (the first word of a fence's info string, lower-cased). Shell
// sessions, output, JSON and diagrams are not checked; a block of any
// language that has a marker is.
var checkedLangs = map[string]bool{
	"go": true, "ts": true, "tsx": true, "js": true, "mjs": true, "py": true, "python": true,
}

// markerRE matches a snippet marker: <!-- snippet: path/to/file#name -->.
var markerRE = regexp.MustCompile(`^\s*<!--\s*snippet:\s*(\S*)\s*-->\s*$`)

// fenceRE matches a line that opens or closes a fenced code block.
var fenceRE = regexp.MustCompile("^([ \t]*)(`{3,}|~{3,})(.*)$")

func TestSnippets(t *testing.T) {
	root := repoRoot(t)
	docs := docFiles(t, root)
	if len(docs) == 0 {
		t.Fatalf("no markdown file matched %v under %s", docGlobs, root)
	}
	total := 0
	for _, doc := range docs {
		n, problems := checkDoc(root, doc)
		for _, p := range problems {
			t.Error(p)
		}
		if n > 0 {
			t.Logf("%s: snippets checked: %d", doc, n)
		}
		total += n
	}
	if total == 0 {
		t.Errorf("no snippet checked in %d files: is the parser broken?", len(docs))
	}
	if t.Failed() {
		t.Log("Each go, ts, tsx, js, mjs, py or python block needs, on the line before its fence, " +
			"<!-- snippet: <repo-relative path>#<name> -->, naming a file CI compiles that holds the " +
			"same lines between a line containing \"snippet:<name>\" and the next containing " +
			"\"end snippet\" (internal/doccheck/doc.go).")
	}
}

// TestCheckerFindsProblems runs the checker on a made-up repository with
// one block of each kind of mistake.
func TestCheckerFindsProblems(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("code/a.go", "package a\n\nfunc f() {\n\t// snippet:good\n\tif x {\n\t\ty()   \n\t}\n\t// end snippet\n"+
		"\t// snippet:bad\n\tx := 1\n\ty := 2\n\t// end snippet\n\t// snippet:short\n\tx := 1\n\t// end snippet\n"+
		"\t// snippet:open\n\tx := 1\n")
	write("code/b.py", "def f() -> None:\n    # snippet:py\n    import weir\n\n    weir.Client()\n    # end snippet\n")
	write("doc.md", strings.Join([]string{
		"# A doc", // 1
		"",
		"<!-- snippet: code/a.go#good -->", // 3
		"",
		"```go", // 5: matches, after the region's indentation is removed
		"if x {",
		"\ty()",
		"}",
		"```",
		"```go", // 10: no marker
		"x := 1",
		"```",
		"<!-- snippet: code/missing.go#good -->",
		"```go", // 14: no such file
		"```",
		"<!-- snippet: code/a.go#nothere -->",
		"```go", // 17: no such region
		"```",
		"<!-- snippet: code/a.go#bad -->",
		"```go", // 20: differs at its second line
		"x := 1",
		"y := 3",
		"```",
		"<!-- snippet: code/a.go#short -->",
		"```go", // 25: longer than its region
		"x := 1",
		"y := 2",
		"```",
		"<!-- snippet: code/a.go#open -->",
		"```go", // 30: a region with no end
		"x := 1",
		"```",
		"<!-- snippet: code/a.go -->",
		"```go", // 34: no #name
		"```",
		"<!-- snippet: code/b.py#py -->",
		"  ```python", // 37: indented (in a list), matches
		"  import weir",
		"",
		"  weir.Client()",
		"  ```",
		"```sh", // 42: not checked
		"go test ./...",
		"```",
		"<!-- snippet: code/a.go#good -->", // 45: no block after it
		"Some text.",
		"<!-- snippet: ../outside.go#x -->",
		"```go", // 48: outside the repository
		"```",
		"",
	}, "\n"))
	n, problems := checkDoc(root, "doc.md")
	want := []string{
		"doc.md:10: a go block with no snippet marker",
		"doc.md:14: code/missing.go#good: no such file",
		"doc.md:17: code/a.go#nothere: no line containing \"snippet:nothere\" in code/a.go",
		"doc.md:20: differs from code/a.go#bad (code/a.go:10): at doc.md:22 the doc has\n\t\ty := 3\n\tand code/a.go:11\n\t\ty := 2",
		"doc.md:25: differs from code/a.go#short (code/a.go:14): at doc.md:27 the doc has\n\t\ty := 2\n\tand code/a.go:15\n\t\t(the region has ended)",
		"doc.md:30: code/a.go#open: no \"end snippet\" line after code/a.go:16",
		"doc.md:34: \"code/a.go\": a marker is <!-- snippet: <repo-relative path>#<name> -->",
		"doc.md:45: a snippet marker with no code block after it",
		"doc.md:48: \"../outside.go#x\": not a path inside the repository",
	}
	if n != 9 {
		t.Errorf("checked %d blocks, want 9", n)
	}
	got := strings.Join(problems, "\n---\n")
	if got != strings.Join(want, "\n---\n") {
		t.Errorf("problems:\n%s\n\nwant:\n%s", got, strings.Join(want, "\n---\n"))
	}
}

// repoRoot walks up from the test's directory to the one holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod in any parent of the test's directory")
		}
		dir = parent
	}
}

// block is a fenced code block of a doc.
type block struct {
	line       int    // its opening fence's line, from 1
	lang       string // the info string's first word, lower-cased
	marker     string // the marker's target before it, or ""
	body       []string
	bodyLine   int  // the line of body[0]
	markerSeen bool // a marker line came right before it
}

// parseDoc returns the fenced code blocks of a markdown text and the lines
// of markers that no code block follows.
func parseDoc(text string) (blocks []block, stray []int) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	marker, markerLine := "", 0 // a marker waiting for its block
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := markerRE.FindStringSubmatch(line); m != nil {
			if markerLine != 0 {
				stray = append(stray, markerLine)
			}
			marker, markerLine = m[1], i+1
			continue
		}
		f := fenceRE.FindStringSubmatch(line)
		if f == nil {
			if strings.TrimSpace(line) != "" && markerLine != 0 {
				stray = append(stray, markerLine)
				marker, markerLine = "", 0
			}
			continue
		}
		indent, fence, info := f[1], f[2], strings.TrimSpace(f[3])
		b := block{line: i + 1, marker: marker, markerSeen: markerLine != 0, bodyLine: i + 2}
		if words := strings.Fields(info); len(words) > 0 {
			b.lang = strings.ToLower(words[0])
		}
		marker, markerLine = "", 0
		for i++; i < len(lines); i++ {
			if c := fenceRE.FindStringSubmatch(lines[i]); c != nil && c[2][0] == fence[0] &&
				len(c[2]) >= len(fence) && strings.TrimSpace(c[3]) == "" {
				break
			}
			b.body = append(b.body, trimIndent(lines[i], len(indent)))
		}
		blocks = append(blocks, b)
	}
	if markerLine != 0 {
		stray = append(stray, markerLine)
	}
	return blocks, stray
}

// trimIndent removes up to n leading spaces or tabs from line, as a fence's
// indentation is removed from its block's lines.
func trimIndent(line string, n int) string {
	for k := 0; k < n && line != "" && (line[0] == ' ' || line[0] == '\t'); k++ {
		line = line[1:]
	}
	return line
}

// checkDoc checks the blocks of the markdown file doc (relative to root)
// and returns how many it compared and one message per problem.
func checkDoc(root, doc string) (checked int, problems []string) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
	if err != nil {
		return 0, []string{fmt.Sprintf("%s: %v", doc, err)}
	}
	blocks, stray := parseDoc(string(data))
	for _, l := range stray {
		problems = append(problems, fmt.Sprintf("%s:%d: a snippet marker with no code block after it", doc, l))
	}
	for _, b := range blocks {
		if !b.markerSeen {
			if checkedLangs[b.lang] {
				problems = append(problems, fmt.Sprintf("%s:%d: a %s block with no snippet marker", doc, b.line, b.lang))
			}
			continue
		}
		checked++
		if p := checkBlock(root, doc, b); p != "" {
			problems = append(problems, p)
		}
	}
	// The stray markers were found first; report in the doc's order.
	sortByLine(problems)
	return checked, problems
}

// checkBlock compares one marked block with its region; "" if they match.
func checkBlock(root, doc string, b block) string {
	at := fmt.Sprintf("%s:%d", doc, b.line)
	path, name, ok := strings.Cut(b.marker, "#")
	if !ok || path == "" || name == "" {
		return fmt.Sprintf("%s: %q: a marker is <!-- snippet: <repo-relative path>#<name> -->", at, b.marker)
	}
	if !filepath.IsLocal(filepath.FromSlash(path)) {
		return fmt.Sprintf("%s: %q: not a path inside the repository", at, b.marker)
	}
	region, regionLine, err := readRegion(root, path, name)
	if err != nil {
		return fmt.Sprintf("%s: %s#%s: %v", at, path, name, err)
	}
	docLines, docFirst := trimBlank(trimRight(b.body))
	docLine := b.bodyLine + docFirst
	for i := 0; i < len(docLines) || i < len(region); i++ {
		if i < len(docLines) && i < len(region) && docLines[i] == region[i] {
			continue
		}
		show := func(lines []string, what string) string {
			if i < len(lines) {
				return lines[i]
			}
			return "(the " + what + " has ended)"
		}
		return fmt.Sprintf("%s: differs from %s#%s (%s:%d): at %s:%d the doc has\n\t\t%s\n\tand %s:%d\n\t\t%s",
			at, path, name, path, regionLine, doc, docLine+i, show(docLines, "block"),
			path, regionLine+i, show(region, "region"))
	}
	return ""
}

// readRegion returns the lines of region name of the file at path
// (relative to root), normalized, and the line of its first one.
func readRegion(root, path, name string) ([]string, int, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, errors.New("no such file")
	} else if err != nil {
		return nil, 0, err
	}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	start := regexp.MustCompile(`snippet:` + regexp.QuoteMeta(name) + `($|[^A-Za-z0-9_.-])`)
	begin := -1
	for i, l := range lines {
		if start.MatchString(l) {
			if begin >= 0 {
				return nil, 0, fmt.Errorf("two lines begin it in %s (%d and %d)", path, begin+1, i+1)
			}
			begin = i
		}
	}
	if begin < 0 {
		return nil, 0, fmt.Errorf("no line containing %q in %s", "snippet:"+name, path)
	}
	end := -1
	for i := begin + 1; i < len(lines); i++ {
		if strings.Contains(lines[i], "end snippet") {
			end = i
			break
		}
	}
	if end < 0 {
		return nil, 0, fmt.Errorf("no \"end snippet\" line after %s:%d", path, begin+1)
	}
	region, first := trimBlank(trimRight(lines[begin+1 : end]))
	return dedent(region), begin + 2 + first, nil
}

// trimRight removes each line's trailing white space.
func trimRight(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(l, " \t\r")
	}
	return out
}

// trimBlank removes leading and trailing empty lines, and returns how many
// leading ones it removed.
func trimBlank(lines []string) ([]string, int) {
	first := 0
	for first < len(lines) && lines[first] == "" {
		first++
	}
	last := len(lines)
	for last > first && lines[last-1] == "" {
		last--
	}
	return lines[first:last], first
}

// dedent removes the leading white space (tabs or spaces) that every
// non-empty line shares.
func dedent(lines []string) []string {
	prefix, set := "", false
	for _, l := range lines {
		if l == "" {
			continue
		}
		ws := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if !set {
			prefix, set = ws, true
			continue
		}
		n := 0
		for n < len(prefix) && n < len(ws) && prefix[n] == ws[n] {
			n++
		}
		prefix = prefix[:n]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimPrefix(l, prefix)
	}
	return out
}

// sortByLine orders "file:line: …" messages of one file by their line.
func sortByLine(msgs []string) {
	line := func(m string) int {
		_, rest, _ := strings.Cut(m, ":")
		digits, _, _ := strings.Cut(rest, ":")
		n, _ := strconv.Atoi(digits)
		return n
	}
	slices.SortStableFunc(msgs, func(a, b string) int { return cmp.Compare(line(a), line(b)) })
}
