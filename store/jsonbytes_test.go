package store

import (
	"bytes"
	"encoding/json"
	"testing"
)

// encoded is s's length in a JSON reply as the server writes it (no HTML
// escaping), quotes left out.
func encoded(t testing.TB, s string) int {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return buf.Len() - 3 // the quotes and the newline
}

func TestJSONStringBytes(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int
	}{
		{"", 0}, {"plain", 5}, {"a\"b\\c", 7}, {"\x00\x01\x1f", 18}, {"\n\t", 12},
		{"é中😀", 9}, {"\xff\xfe", 12}, {"\u2028\u2029", 12}, {"<&>", 3},
	} {
		if got := JSONStringBytes(c.s); got != c.want {
			t.Errorf("JSONStringBytes(%q) = %d, want %d", c.s, got, c.want)
		}
		if enc := encoded(t, c.s); JSONStringBytes(c.s) < enc {
			t.Errorf("%q: bound %d under its encoding's %d bytes", c.s, JSONStringBytes(c.s), enc)
		}
	}
}

// The bound is never under what the encoder writes, whatever the bytes.
func FuzzJSONStringBytes(f *testing.F) {
	for _, s := range []string{"", "x", "\x00", "\"\\", "\xff", "\u2028", "é😀", "<>&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, enc := JSONStringBytes(s), encoded(t, s); n < enc || n > 6*len(s) {
			t.Fatalf("%q: bound %d, encoded %d", s, n, enc)
		}
	})
}
