package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
)

// Every sentinel that can reach the wire has one row, one code and a status
// that is an error.
func TestTableIsComplete(t *testing.T) {
	codes := map[string]bool{}
	for _, e := range Errors {
		if e.Err == nil || e.Code == "" || e.Status < 400 {
			t.Errorf("row %+v", e)
		}
		if codes[e.Code] {
			t.Errorf("code %q twice", e.Code)
		}
		codes[e.Code] = true
		if got, ok := ByCode(e.Code); !ok || got.Err != e.Err {
			t.Errorf("ByCode(%q) = %v", e.Code, got.Err)
		}
	}
	for _, s := range []error{
		store.ErrNotFound, store.ErrLeaseLost, store.ErrTooLarge, store.ErrInvalid, store.ErrRunConflict,
		store.ErrClosedStore, store.ErrGone, store.ErrKeyReused, store.ErrQuota, stream.ErrFull, store.ErrHookConflict,
		stream.ErrClosed, stream.ErrFenced, stream.ErrGap, stream.ErrConflict, stream.ErrWriterFinished,
		stream.ErrUnknownWriter, stream.ErrMode, stream.ErrStaleEpoch, stream.ErrEpochSeq, stream.ErrProducerGap,
		stream.ErrStreamSeq,
		ErrUnknownWorkflow, ErrEngineClosed, ErrConflict, ErrInFlight, ErrBadRequest, ErrUnauthorized, ErrMethod,
	} {
		if e, ok := Lookup(s); !ok || e.Err != s {
			t.Errorf("%v: row of %v", s, e.Err)
		}
	}
}

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("append: %w", &stream.FencedError{Attempt: 1, Current: 2}), http.StatusForbidden, "fenced"},
		{&stream.GapError{Expected: 3, Got: 5}, http.StatusConflict, "gap"},
		{fmt.Errorf("%w: fork source: %w", ErrConflict, store.ErrGone), http.StatusConflict, "conflict"},
		{fmt.Errorf("start: %w: %q", ErrUnknownWorkflow, "x"), http.StatusNotFound, "unknown_workflow"},
		{fmt.Errorf("x: %w", store.ErrKeyReused), http.StatusUnprocessableEntity, "key_reused"},
		{fmt.Errorf("append: %w", &stream.FullError{Limit: 2, Holds: 2, Adding: 1}), http.StatusRequestEntityTooLarge, "stream_full"},
		{fmt.Errorf("create stream: %w: 5 streams", store.ErrQuota), http.StatusInsufficientStorage, "quota"},
		{errors.New("disk on fire"), http.StatusInternalServerError, "internal"},
	} {
		e, _ := Lookup(tc.err)
		if e.Status != tc.status || e.Code != tc.code || Status(tc.err) != tc.status {
			t.Errorf("Lookup(%v) = %d %q, want %d %q", tc.err, e.Status, e.Code, tc.status, tc.code)
		}
	}
	if !errors.Is(ErrUnknownWorkflow, store.ErrNotFound) {
		t.Error("an unknown workflow is not a kind of not found")
	}
}

type temporary bool

func (t temporary) Error() string   { return "backend" }
func (t temporary) Temporary() bool { return bool(t) }

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{stream.ErrGap, false},
		{fmt.Errorf("x: %w", stream.ErrFenced), false},
		{store.ErrClosedStore, true},
		{ErrInFlight, true},
		{context.Canceled, false},
		{fmt.Errorf("append: %w", context.DeadlineExceeded), false},
		{temporary(true), true},
		{fmt.Errorf("append: %w", temporary(false)), false},
		{errors.New("connection reset"), true},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
