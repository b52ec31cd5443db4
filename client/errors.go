package client

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/weirhq/weir"
)

// Errors of the client's own, for statuses weir's sentinels do not cover.
var (
	// ErrUnauthorized matches a 401: no token, or the wrong one.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrBadRequest matches a 400: the server found the request malformed.
	ErrBadRequest = errors.New("bad request")
	// ErrUnavailable matches a 503: the server is stopping or its store is
	// closed.
	ErrUnavailable = errors.New("unavailable")
)

// Error is a reply with an error status. errors.Is matches it to weir's
// sentinels by status: 404 weir.ErrNotFound, 403 weir.ErrFenced, 413
// weir.ErrTooLarge, 422 weir.ErrConflict, 409 weir.ErrClosed (with
// Stream-Closed: true) or weir.ErrGap (with Weir-Expected-Seq); and to
// ErrUnauthorized (401), ErrBadRequest (400), ErrUnavailable (503).
type Error struct {
	Status  int    // the HTTP status
	Message string // the server's one-line reason
	Method  string
	Path    string
	Header  http.Header // the reply's headers: Weir-Attempt, Weir-Expected-Seq, …
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s %s: %s (HTTP %d)", e.Method, e.Path, msg, e.Status)
}

// Is matches e to the sentinel its status stands for.
func (e *Error) Is(target error) bool {
	switch e.Status {
	case http.StatusNotFound:
		return target == weir.ErrNotFound
	case http.StatusForbidden:
		return target == weir.ErrFenced
	case http.StatusRequestEntityTooLarge:
		return target == weir.ErrTooLarge
	case http.StatusUnprocessableEntity:
		return target == weir.ErrConflict
	case http.StatusConflict:
		switch {
		case strings.EqualFold(e.Header.Get("Stream-Closed"), "true"):
			return target == weir.ErrClosed
		case e.Header.Get("Weir-Expected-Seq") != "":
			return target == weir.ErrGap
		}
	case http.StatusUnauthorized:
		return target == ErrUnauthorized
	case http.StatusBadRequest:
		return target == ErrBadRequest
	case http.StatusServiceUnavailable:
		return target == ErrUnavailable
	}
	return false
}

// CurrentAttempt is, for a fenced write (403), the writer's current attempt
// the server reported; 0 if none.
func (e *Error) CurrentAttempt() int64 {
	n, _ := strconv.ParseInt(e.Header.Get("Weir-Attempt"), 10, 64)
	return n
}

// errorFrom reads an error reply; it does not close the body.
func errorFrom(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(b))
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	path := resp.Request.URL.Path
	return &Error{Status: resp.StatusCode, Message: msg, Method: resp.Request.Method, Path: path, Header: resp.Header}
}
