// Package names holds the rules of every name and id a client of weir
// chooses: run ids, stream names, message topics and run event keys,
// limiter (and queue) names, schedule names, versions. Every entry point
// (the HTTP API, the SDK, the stores' checks) asks here, so that a name is
// refused before any store sees it, the same on every backend, with
// ErrInvalid.
//
// The rules keep names printable and unambiguous: no control bytes (a CR
// or LF that would split a log line or a header, a NUL that PostgreSQL's
// text refuses and SQLite keeps), no path separators where a name is a
// path segment of the API, and, for run ids, a small alphabet that needs
// no escaping anywhere. Ids weir mints itself carry reserved prefixes,
// which clients may not use (ReservedRunIDPrefixes).
package names

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid is a name or id that its rule refuses. The stores' errors
// for it also match store.ErrInvalid.
var ErrInvalid = errors.New("invalid name")

// MaxRunID bounds a run id a client chooses. Ids weir mints from a
// client's (a child's, a schedule tick's) may be longer.
const MaxRunID = 128

// MaxName bounds a stream's name, a topic, a limiter's name and a version.
const MaxName = 256

// ReservedRunIDPrefixes begin the run ids weir mints: a schedule's ticks
// (sched:NAME:TICK), the runs an Idempotency-Key stands for (idem_…),
// Vercel Workflow runs (wrun_…). A client's run id may not begin with
// one, so it cannot take a run weir will make (a tick's, say) before it.
var ReservedRunIDPrefixes = []string{"sched:", "idem_", "wrun_"}

// ReservedMessageKeyPrefix begins the Idempotency-Keys of the messages a
// run sends (weir.Send: weir/SENDER/OP). A client's key may not begin with
// it: the key is predictable from the sender's log, and one planted first
// with another body would fail the sender's send as a reused key (red
// team, round fifteen).
const ReservedMessageKeyPrefix = "weir/"

// MessageKey refuses a message's Idempotency-Key that a client chose and
// that begins with ReservedMessageKeyPrefix. Its length and characters are
// the store's to check.
func MessageKey(key string) error {
	if strings.HasPrefix(key, ReservedMessageKeyPrefix) {
		return fmt.Errorf("%w: idempotency key %q: the prefix %q is weir's own (the keys of messages runs send)", ErrInvalid, key, ReservedMessageKeyPrefix)
	}
	return nil
}

// Text refuses s unless it is 1 to max bytes of UTF-8 without control
// characters (C0, DEL, C1): what every backend stores and gives back, and
// every log line and header shows, as it is.
func Text(what, s string, max int) error {
	if s == "" {
		return fmt.Errorf("%w: an empty %s", ErrInvalid, what)
	}
	if len(s) > max {
		return fmt.Errorf("%w: a %s of %d bytes, the limit is %d", ErrInvalid, what, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: a %s that is not UTF-8", ErrInvalid, what)
	}
	for i, r := range s {
		if r < 0x20 || r >= 0x7f && r < 0xa0 {
			return fmt.Errorf("%w: %s %q has a control character at byte %d", ErrInvalid, what, s, i)
		}
		if spoofs(r) {
			return fmt.Errorf("%w: %s %q has a character that changes how text around it shows (%U) at byte %d", ErrInvalid, what, s, r, i)
		}
	}
	return nil
}

// spoofs reports the characters that make a name show as another, or as
// nothing: every format character (Unicode's Cf: the bidirectional
// overrides and isolates, the soft hyphen, the invisible spaces and
// operators, the tags), the line and paragraph separators (U+2028,
// U+2029), and the letters that show as blank (the Hangul fillers U+115F,
// U+1160, U+3164, U+FFA0, the Khmer vowels U+17B4, U+17B5, the braille
// blank U+2800). The joiners (U+200C, U+200D) stay: scripts and emoji
// need them.
func spoofs(r rune) bool {
	switch r {
	case 0x200c, 0x200d:
		return false
	case 0x2028, 0x2029, 0x115f, 0x1160, 0x3164, 0xffa0, 0x17b4, 0x17b5, 0x2800, 0x180e, 0x034f:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

// Segment is Text for a name that is a path segment of the HTTP API: no
// / ? # nor %, not . or .., no space at either end nor two in a row, and
// no space but U+0020.
func Segment(what, s string, max int) error {
	if err := Text(what, s, max); err != nil {
		return err
	}
	if strings.ContainsAny(s, "/?#%") || s == "." || s == ".." {
		return fmt.Errorf("%w: %s %q: it must not be . or .. nor hold a / ? # or %%", ErrInvalid, what, s)
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' || strings.Contains(s, "  ") {
		// "gpt ", "g  pt" and "gpt", "g pt" show alike in a list.
		return fmt.Errorf("%w: %s %q begins or ends with a space, or holds two in a row", ErrInvalid, what, s)
	}
	for i, r := range s {
		// Every space but the ASCII one: a no-break or an ideographic
		// space shows as the plain one (red team, round eight:
		// "\u00a0gpt" beside " gpt" and "gpt").
		if r != ' ' && unicode.Is(unicode.Zs, r) {
			return fmt.Errorf("%w: %s %q has a space other than U+0020 (%U) at byte %d", ErrInvalid, what, s, r, i)
		}
	}
	return nil
}

// ID refuses s unless it is 1 to max letters, digits and - _ . : (and
// not . or ..): an id that needs no escaping in a URL, a header or a
// file name.
func ID(what, s string, max int) error {
	if s == "" {
		return fmt.Errorf("%w: an empty %s", ErrInvalid, what)
	}
	if len(s) > max {
		return fmt.Errorf("%w: a %s of %d bytes, the limit is %d", ErrInvalid, what, len(s), max)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%w: %s %q", ErrInvalid, what, s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return fmt.Errorf("%w: %s %q: use letters, digits and - _ . : only", ErrInvalid, what, s)
		}
	}
	return nil
}

// RunID refuses a run id a client chooses (a run it starts or forks): an
// ID of at most MaxRunID bytes that begins with no reserved prefix.
func RunID(id string) error {
	if err := ID("run id", id, MaxRunID); err != nil {
		return err
	}
	for _, p := range ReservedRunIDPrefixes {
		if strings.HasPrefix(id, p) {
			return fmt.Errorf("%w: run id %q: the prefix %q is weir's own (its ids begin with %s)", ErrInvalid, id, p, strings.Join(ReservedRunIDPrefixes, ", "))
		}
	}
	return nil
}

// MintedRunID refuses a run id the stores take from anyone (a child's, a
// tick's, a fork's, a run the SDK starts by name): a Segment of at most
// 1 KiB, with any prefix. A run id holds no / so that its streams' paths
// are its own (runs/<run>/<name>).
func MintedRunID(id string) error { return Segment("run id", id, 1<<10) }

// Stream refuses a run stream's name: a Segment of at most MaxName bytes.
func Stream(name string) error { return Segment("stream name", name, MaxName) }

// Topic refuses a message topic or a run event's key: a Segment of at
// most max bytes.
func Topic(what, name string, max int) error { return Segment(what, name, max) }

// Limiter refuses a limiter's (or queue's) name: a Segment of at most
// MaxName bytes.
func Limiter(name string) error { return Segment("limiter name", name, MaxName) }

// Version refuses an application version: a Text of at most max bytes.
func Version(v string, max int) error { return Text("version", v, max) }
