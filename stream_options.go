package weir

import (
	"fmt"
	"mime"
	"strings"
)

// ErrContentType is a Stream call that asks for a content type other than
// the one its stream has: a stream's content type is set once, by the call
// that creates it.
var ErrContentType error = contentTypeError{}

// contentTypeError is ErrContentType: a mistake in the code, which no retry
// of the write mends (Temporary says so to the writer's retry loop).
type contentTypeError struct{}

func (contentTypeError) Error() string   { return "weir: the stream has another content type" }
func (contentTypeError) Temporary() bool { return false }

// StreamOption configures the stream a Stream call opens.
type StreamOption func(*streamOptions)

type streamOptions struct {
	contentType string // "": any (application/octet-stream when created)
	json        bool   // contentType is application/json: chunks are checked
}

// ContentType makes the stream's content type ct when the call creates it,
// and checks it when the stream exists: a different one fails the Writer's
// writes with ErrContentType. Readers get what it says: over HTTP, the
// records of an "application/json" stream carry each chunk as a JSON value
// (each chunk must then be one JSON value), those of a "text/*" stream as a
// string, any other as base64. Without it a stream is
// "application/octet-stream".
func ContentType(ct string) StreamOption {
	return func(o *streamOptions) {
		o.contentType = ct
		o.json = mediaType(ct) == "application/json"
	}
}

func streamOptionsOf(opts []StreamOption) streamOptions {
	var o streamOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// check reports whether a stream of these options may be opened asking for
// contentType: "" asks for nothing; otherwise the media types must be equal
// (case and parameters aside).
func (o streamOptions) check(name, contentType string) error {
	if contentType == "" || o.contentType == "" {
		return nil
	}
	if mediaType(o.contentType) != mediaType(contentType) {
		return fmt.Errorf("%w: stream %q is %q, asked for %q", ErrContentType, name, o.contentType, contentType)
	}
	return nil
}

func mediaType(ct string) string {
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return mt
	}
	return strings.ToLower(strings.TrimSpace(ct))
}
