package client

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Errors of the client's own, for statuses without a sentinel of their own.
var (
	// ErrUnauthorized matches a 401: no token, or the wrong one
	// (api.ErrUnauthorized).
	ErrUnauthorized = api.ErrUnauthorized
	// ErrBadRequest matches a 400 (api.ErrBadRequest); a request the store
	// found invalid also matches store.ErrInvalid.
	ErrBadRequest = api.ErrBadRequest
	// ErrUnavailable matches a 503: the server is stopping or its store is
	// closed (and store.ErrClosedStore or api.ErrEngineClosed).
	ErrUnavailable = fmt.Errorf("unavailable")
)

// Error is a reply with an error status. It matches (errors.Is) the
// sentinel of the wire code the server sent in its Weir-Error header (the
// table in package api), or, from a server that sends none, the sentinel
// its status stands for. errors.As finds the typed error the reply's headers
// describe: *stream.FencedError (403, Weir-Attempt), *stream.GapError (409,
// Weir-Expected-Seq), *stream.StaleEpochError and *stream.ProducerGapError
// (producer headers).
type Error struct {
	Status  int    // the HTTP status
	Code    string // the wire code (api.Errors); empty if the server sent none
	Message string // the server's one-line reason
	Method  string
	Path    string
	Header  http.Header // the reply's headers: Weir-Attempt, Weir-Expected-Seq, …
	cause   error       // the sentinel or typed error the reply stands for
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s %s: %s (HTTP %d)", e.Method, e.Path, msg, e.Status)
}

// Unwrap returns the sentinel (or typed error) the reply stands for, nil if
// none.
func (e *Error) Unwrap() error { return e.cause }

// Is matches ErrUnavailable to a 503 and ErrBadRequest to a 400, whatever
// their codes.
func (e *Error) Is(target error) bool {
	return target == ErrUnavailable && e.Status == http.StatusServiceUnavailable ||
		target == ErrBadRequest && e.Status == http.StatusBadRequest
}

// Retryable reports whether sending the request again may succeed
// (api.Retryable of what the reply stands for).
func (e *Error) Retryable() bool {
	if e.cause == nil {
		return e.Status >= 500
	}
	return api.Retryable(e.cause)
}

// CurrentAttempt is, for a fenced write (403), the writer's current attempt
// the server reported; 0 if none.
func (e *Error) CurrentAttempt() int64 { return headerInt(e.Header, "Weir-Attempt") }

// errorFrom reads an error reply; it does not close the body.
func errorFrom(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(b))
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	e := &Error{Status: resp.StatusCode, Code: resp.Header.Get(api.ErrorHeader), Message: msg,
		Method: resp.Request.Method, Path: resp.Request.URL.Path, Header: resp.Header}
	e.cause = causeOf(e)
	return e
}

// causeOf is what e stands for: the typed error its headers describe, else
// its code's sentinel, else its status's.
func causeOf(e *Error) error {
	var sentinel error
	if row, ok := api.ByCode(e.Code); ok {
		sentinel = row.Err
	} else {
		sentinel = byStatus(e)
	}
	h := e.Header
	switch sentinel {
	case stream.ErrFenced:
		return &stream.FencedError{Current: headerInt(h, "Weir-Attempt")}
	case stream.ErrGap:
		return &stream.GapError{Expected: headerInt(h, "Weir-Expected-Seq")}
	case stream.ErrStaleEpoch:
		return &stream.StaleEpochError{Current: headerInt(h, "Producer-Epoch")}
	case stream.ErrProducerGap:
		return &stream.ProducerGapError{Expected: headerInt(h, "Producer-Expected-Seq"), Received: headerInt(h, "Producer-Received-Seq")}
	}
	return sentinel
}

// byStatus maps a reply without a wire code, from a server before them or a
// proxy, by its status and headers.
func byStatus(e *Error) error {
	switch e.Status {
	case http.StatusNotFound:
		return store.ErrNotFound
	case http.StatusForbidden:
		return stream.ErrFenced
	case http.StatusGone:
		return store.ErrGone
	case http.StatusRequestEntityTooLarge:
		return store.ErrTooLarge
	case http.StatusUnprocessableEntity:
		return stream.ErrConflict
	case http.StatusConflict:
		switch {
		case strings.EqualFold(e.Header.Get("Stream-Closed"), "true"):
			return stream.ErrClosed
		case e.Header.Get("Weir-Expected-Seq") != "":
			return stream.ErrGap
		}
	case http.StatusUnauthorized:
		return api.ErrUnauthorized
	case http.StatusBadRequest:
		return api.ErrBadRequest
	}
	return nil
}

func headerInt(h http.Header, name string) int64 {
	n, _ := strconv.ParseInt(h.Get(name), 10, 64)
	return n
}
