package names

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct {
		rule string
		f    func(string) error
		ok   []string
		bad  []string
	}{
		{"RunID", RunID,
			[]string{"order-42", "a", "A.b_c:d-9", long(MaxRunID), "schedule:x", "idem-x", "run_1"},
			[]string{"", ".", "..", "a/b", "../x", "victim/spoof", "a b", "a\x00b", "a\nb", "é", long(MaxRunID + 1), "sched:nightly:20261206T000000.000Z", "idem_0123", "wrun_01J"}},
		{"MintedRunID", MintedRunID,
			[]string{"sched:nightly:20261206T000000.000Z", "idem_0123", "parent-3", "näive", "a b", long(1 << 10)},
			[]string{"", "a/b", "a%2fb", "a\nb", "..", long(1<<10 + 1)}},
		{"Stream", Stream,
			[]string{"tokens", "ui messages", "é", "a.b", long(MaxName)},
			[]string{"", ".", "..", "a/b", "a?b", "a#b", "a%2fb", "a\rb", "a\x7fb", "a\u0085b", "\xff", long(MaxName + 1)}},
		{"Limiter", Limiter,
			[]string{"openai", "tenant queue", "ö", "क्\u200dष", "👩\u200d💻", "a\u200cb"},
			[]string{"", "a\x00b", "a/b", "a\nb", "..", "gpt\u202eipa", "a\u2028b", "a\u200bb", "\ufeffa",
				// Invisible, or blank (red team, round five, L3).
				"open\u00adai", "a\u3164", "\u115f", "a\uffa0b", "a\u2061b", "a\U000e0041", "a\u180eb", "a\u2800", "a\u17b4",
				// Blanks that show as a plain space, or as nothing at an
				// end (red team, round eight, L4).
				"gpt ", " gpt", " ", "g  pt", "\u00a0gpt", "gpt\u3000", "a\u2003b", "a\u202fb"}},
		{"Topic", func(s string) error { return Topic("topic", s, 255) },
			[]string{"approve", "a.b"},
			[]string{"", "a\r\nb", "a/b", "..", long(256), "a\u2066b", "a\u200fb"}},
		{"Version", func(s string) error { return Version(s, 128) },
			[]string{"v1.2.3", "2026-12-06 build 7"},
			[]string{"", "v1\n", "\x00", long(129)}},
	} {
		for _, s := range c.ok {
			if err := c.f(s); err != nil {
				t.Errorf("%s(%q) = %v, want nil", c.rule, s, err)
			}
		}
		for _, s := range c.bad {
			if err := c.f(s); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s(%q) = %v, want ErrInvalid", c.rule, s, err)
			}
		}
	}
}

// A name any rule takes is printable text a client can send back as it is.
func FuzzRules(f *testing.F) {
	for _, s := range []string{"a", "a/b", "sched:x", "é", "\x00", "a\nb", "..", "%2f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, rule := range []func(string) error{RunID, MintedRunID, Stream, Limiter} {
			err := rule(s)
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: an error that is not ErrInvalid: %v", s, err)
			}
			if err == nil && (!utf8.ValidString(s) || strings.ContainsAny(s, "\x00\r\n/") || s == ".." || s == "") {
				t.Fatalf("%q taken", s)
			}
		}
		if RunID(s) == nil {
			for _, p := range ReservedRunIDPrefixes {
				if strings.HasPrefix(s, p) {
					t.Fatalf("%q taken with a reserved prefix", s)
				}
			}
		}
	})
}
