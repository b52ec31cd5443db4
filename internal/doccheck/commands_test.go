package doccheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/weirhq/weir/weircli"
)

// shellLangs are the blocks of commands: a shell script (every line), or a
// console session (the lines after a "$ " prompt).
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// Every weir command a doc tells a reader to type names a command weir has
// and only flags that command takes, checked against the command line's
// own help (weircli.Run with -h); every sh or bash block is valid shell
// (bash -n). A doc that said `weir runs list --server URL`, a flag that
// never existed, fails here.
func TestShellCommands(t *testing.T) {
	root := repoRoot(t)
	bash, _ := exec.LookPath("bash")
	help := helpCache{}
	total := 0
	for _, doc := range docFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if err != nil {
			t.Fatal(err)
		}
		blocks, _ := parseDoc(string(text))
		for _, b := range blocks {
			if !shellLangs[b.lang] {
				continue
			}
			if b.lang != "console" && bash != "" {
				if msg := bashSyntax(bash, b.body); msg != "" {
					t.Errorf("%s:%d: not valid shell: %s", doc, b.line, msg)
				}
			}
			for _, c := range commandLines(b) {
				for _, args := range weirInvocations(c.text) {
					total++
					if msg := help.check(args); msg != "" {
						t.Errorf("%s:%d: weir %s: %s", doc, c.line, strings.Join(args, " "), msg)
					}
				}
			}
		}
	}
	t.Logf("weir commands checked: %d", total)
	if total == 0 {
		t.Error("no weir command found in the docs: is the parser broken?")
	}
}

// A command line naming a flag or a command weir does not have is found;
// one that does is not.
func TestShellCommandsCheckerFindsProblems(t *testing.T) {
	help := helpCache{}
	for _, c := range []struct {
		line string
		bad  bool
	}{
		{`WEIR_URL=http://127.0.0.1:4437 weir runs list --status failed`, false},
		{`weir runs list --server http://x`, true},
		{`weir nope`, true},
		{`weir runs nope`, true},
		{`go run ./cmd/weir demo --fast`, false},
		{`./weir bench scale --processes 1 --store 'postgres://…' --json`, false},
		{`weir bench scale --no-such-flag`, true},
		{`go test ./... && /tmp/weir torture --quiet --trials 1 --seed 626822 --store 'sqlite:'`, false},
		{`weir stream tail RUN out --url=http://x`, false},
	} {
		inv := weirInvocations(c.line)
		if len(inv) != 1 {
			t.Errorf("%q: %d invocations of weir found, want 1", c.line, len(inv))
			continue
		}
		if msg := help.check(inv[0]); (msg != "") != c.bad {
			t.Errorf("%q: %q, want a problem: %v", c.line, msg, c.bad)
		}
	}
}

// docFiles are the docs of docGlobs, relative to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	var docs []string
	for _, g := range docGlobs {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(g)))
		if err != nil {
			t.Fatalf("glob %s: %v", g, err)
		}
		for _, p := range m {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
	}
	return docs
}

// bashSyntax returns bash -n's complaint about body, or "".
func bashSyntax(bash string, body []string) string {
	cmd := exec.Command(bash, "-n")
	cmd.Stdin = strings.NewReader(strings.Join(body, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out))
	}
	return ""
}

// commandLine is one command of a block, its continuation lines joined.
type commandLine struct {
	line int
	text string
}

// commandLines are b's commands: in a console block only what follows a
// "$ " prompt; comments dropped; lines ending in a backslash joined to the
// next.
func commandLines(b block) []commandLine {
	var out []commandLine
	var cur *commandLine
	for i, l := range b.body {
		l = strings.TrimSpace(l)
		if cur == nil {
			if b.lang == "console" {
				rest, ok := strings.CutPrefix(l, "$ ")
				if !ok {
					continue
				}
				l = rest
			}
			if strings.HasPrefix(l, "#") || l == "" {
				continue
			}
			out = append(out, commandLine{line: b.bodyLine + i})
			cur = &out[len(out)-1]
		}
		if rest, ok := strings.CutSuffix(l, `\`); ok {
			cur.text += rest + " "
			continue
		}
		cur.text += l
		cur = nil
	}
	return out
}

// weirInvocations finds the invocations of weir in a command line (weir,
// a path to it, go run ./cmd/weir), each as the arguments that follow it.
func weirInvocations(line string) [][]string {
	var out [][]string
	for _, seg := range splitCommands(line) {
		words := seg
		// Past assignments and wrappers to the command word.
		for len(words) > 0 && (assignRE.MatchString(words[0]) || wrappers[words[0]]) {
			words = words[1:]
		}
		switch {
		case len(words) >= 1 && filepath.Base(words[0]) == "weir":
			out = append(out, words[1:])
		case len(words) >= 3 && words[0] == "go" && words[1] == "run" && strings.TrimSuffix(words[2], "/") == "./cmd/weir":
			out = append(out, words[3:])
		}
	}
	return out
}

var (
	assignRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	wrappers = map[string]bool{"time": true, "nohup": true, "exec": true, "sudo": true, "env": true}
)

// splitCommands splits a shell line into the words of its commands (at
// ; & | && || and parentheses, outside quotes), quotes removed. Enough for
// a doc's commands, not a shell.
func splitCommands(line string) [][]string {
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		inW   bool
		quote rune
	)
	endWord := func() {
		if inW {
			words = append(words, word.String())
			word.Reset()
			inW = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
			words = nil
		}
	}
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inW = r, true
		case r == ' ' || r == '\t':
			endWord()
		case strings.ContainsRune(";&|()`", r):
			endCmd()
		default:
			word.WriteRune(r)
			inW = true
		}
	}
	endCmd()
	return cmds
}

// helpCache holds weir's help texts by command path.
type helpCache map[string]string

// help runs `weir <path> -h` in process and returns what it printed.
func (h helpCache) help(path []string) string {
	k := strings.Join(path, " ")
	if s, ok := h[k]; ok {
		return s
	}
	var out bytes.Buffer
	weircli.Run(context.Background(), &weircli.Config{Name: "weir", Builtin: true}, append(append([]string{}, path...), "-h"), &out, &out)
	h[k] = out.String()
	return h[k]
}

// check returns what is wrong with the weir command of args ("" if
// nothing): a command it does not have, a flag that command does not take.
func (h helpCache) check(args []string) string {
	var words []string // the command and subcommand, as typed
	for _, a := range args {
		if len(words) == 2 || !wordRE.MatchString(a) {
			break
		}
		words = append(words, a)
	}
	if len(words) == 0 {
		return "" // weir alone, or weir -h: its usage
	}
	// A command with subcommands says so of a word it does not know; one
	// without takes the word as an argument and prints its own help.
	path := words
	text := h.help(path)
	if strings.Contains(text, "unknown command") || strings.Contains(text, "unknown subcommand") {
		return fmt.Sprintf("no such command (%s)", firstLine(text))
	}
	for _, a := range args[len(words):] {
		if a == "-" || a == "--" || !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" || !flagNameRE.MatchString(name) {
			continue
		}
		if !regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(name) + `(\s|$)`).MatchString(text) {
			return fmt.Sprintf("weir %s takes no flag -%s", strings.Join(path, " "), name)
		}
	}
	return ""
}

var (
	wordRE     = regexp.MustCompile(`^[a-z][a-z-]*$`)
	flagNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
