package server

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// allocated is the bytes f allocates.
func allocated(f func()) int64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return int64(b.TotalAlloc - a.TotalAlloc)
}

// A body that says its length is read into one buffer of exactly that
// size; one that does not, in blocks joined once. (io.ReadAll allocated
// about 2.5 times a 16 MiB body, and kept up to twice it.)
func TestReadBodyAllocatesItsSize(t *testing.T) {
	const size = 16 << 20
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	for _, c := range []struct {
		name   string
		length int64
		most   int64 // bytes it may allocate
	}{
		{"Content-Length", size, size + 64<<10},
		{"chunked", -1, 2*size + 2<<20},
	} {
		req := httptest.NewRequest("POST", "/v1/stream/s", io.NopCloser(bytes.NewReader(data)))
		req.ContentLength = c.length
		var got []byte
		var err error
		n := allocated(func() { got, err = readBody(httptest.NewRecorder(), req, store.MaxAppendBytes) })
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes, %v", c.name, len(got), err)
		}
		if c.length >= 0 && cap(got) != len(got) {
			t.Fatalf("%s: a buffer of %d for %d bytes", c.name, cap(got), len(got))
		}
		t.Logf("%s: a 16 MiB body allocated %.1f MiB", c.name, float64(n)/(1<<20))
		if n > c.most {
			t.Errorf("%s: a 16 MiB body allocated %.1f MiB, more than %.1f", c.name, float64(n)/(1<<20), float64(c.most)/(1<<20))
		}
	}
}

func TestReadBodyCutShort(t *testing.T) {
	for _, c := range []struct {
		name   string
		length int64
		body   io.Reader
		want   error
	}{
		{"shorter than its Content-Length", 10, strings.NewReader("12345"), api.ErrBadRequest},
		{"empty, for a Content-Length", 10, strings.NewReader(""), api.ErrBadRequest},
		{"chunked, cut", -1, io.MultiReader(strings.NewReader(strings.Repeat("x", 30)), errReader{io.ErrUnexpectedEOF}), api.ErrBadRequest},
		{"chunked, over the limit", -1, strings.NewReader(strings.Repeat("x", 100)), store.ErrTooLarge},
	} {
		req := httptest.NewRequest("POST", "/v1/stream/s", io.NopCloser(c.body))
		req.ContentLength = c.length
		if _, err := readBody(httptest.NewRecorder(), req, 64); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	for _, body := range []string{"", "x", strings.Repeat("y", 5000), strings.Repeat("z", 3<<20)} {
		for _, length := range []int64{int64(len(body)), -1} {
			req := httptest.NewRequest("POST", "/v1/stream/s", io.NopCloser(strings.NewReader(body)))
			req.ContentLength = length
			got, err := readBody(httptest.NewRecorder(), req, store.MaxAppendBytes)
			if err != nil || string(got) != body {
				t.Errorf("a body of %d bytes (length %d): %d bytes, %v", len(body), length, len(got), err)
			}
		}
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
