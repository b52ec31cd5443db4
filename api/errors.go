package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/weirhq/weir/names"
	"github.com/weirhq/weir/store"
	"github.com/weirhq/weir/stream"
	"github.com/weirhq/weir/world"
)

// Sentinels of the server and the engine that cross the wire. The engine
// (package weir) re-exports the ones its callers meet.
var (
	// ErrUnknownWorkflow is returned to start a run of a workflow that no
	// engine here has registered. It matches store.ErrNotFound too.
	ErrUnknownWorkflow error = &kindOf{"unknown workflow", store.ErrNotFound}
	// ErrEngineClosed is returned after the engine closed.
	ErrEngineClosed = errors.New("engine closed")
	// ErrConflict is returned for a request that conflicts with what the
	// server holds: a stream of another configuration at the path, a
	// content type that is not the stream's.
	ErrConflict = errors.New("conflict")
	// ErrInFlight is returned for a request whose Idempotency-Key another
	// request still being served carries: sent again later, it gets that
	// request's reply.
	ErrInFlight = errors.New("request in flight")
	// ErrBadRequest is returned for a malformed request.
	ErrBadRequest = errors.New("bad request")
	// ErrUnauthorized is returned without the right bearer token.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrMethod is returned for a method a path does not take.
	ErrMethod = errors.New("method not allowed")
	// ErrForbidden is a request the server refuses whoever sends it: a
	// Host it does not answer to, a state-changing request from a web page
	// of another origin.
	ErrForbidden = errors.New("forbidden")
	// ErrUnsupportedMedia is a body of a content type the endpoint does not
	// take.
	ErrUnsupportedMedia = errors.New("unsupported media type")
	// ErrBusy is a request refused because a budget is spent (concurrent
	// readers, upload bytes in flight): send it again later
	// (Retry-After).
	ErrBusy = errors.New("server busy")
	// ErrUnsigned is a World delivery without a valid, fresh signature
	// (the World package answers it; package delivery signs).
	ErrUnsigned = errors.New("delivery not signed")
	// ErrNoDelivery is a World queue message sent to a server that has no
	// delivery secret, and so cannot deliver it.
	ErrNoDelivery = errors.New("world deliveries are not configured")
)

// kindOf is a sentinel that is also a kind of a more general one.
type kindOf struct {
	msg  string
	kind error
}

func (e *kindOf) Error() string { return e.msg }
func (e *kindOf) Unwrap() error { return e.kind }

// ErrorHeader carries an error reply's Code.
const ErrorHeader = "Weir-Error"

// Error is one row of the table of errors.
type Error struct {
	// Err is the sentinel (errors.Is).
	Err error
	// Code is the stable wire code, sent in the Weir-Error header: a client
	// turns it back into Err.
	Code string
	// Status is the HTTP status.
	Status int
	// Reason, if set, is the label /metrics counts a refused stream write
	// under (weir_stream_rejected_total{reason}); "fenced" ones are counted
	// apart.
	Reason string
	// Retryable reports that the same request, sent again later, may
	// succeed.
	Retryable bool
}

// Errors is the one table from error to status, code, reason and
// retryability. Order matters: the first row an error matches is its row, so
// a conflict that wraps another error (an in-flight request, a deleted fork
// source) is a conflict first.
var Errors = []Error{
	{Err: stream.ErrFenced, Code: "fenced", Status: http.StatusForbidden, Reason: "fenced"},
	{Err: stream.ErrStaleEpoch, Code: "stale_epoch", Status: http.StatusForbidden, Reason: "fenced"},
	{Err: ErrInFlight, Code: "in_flight", Status: http.StatusConflict, Reason: "conflict", Retryable: true},
	{Err: ErrConflict, Code: "conflict", Status: http.StatusConflict, Reason: "conflict"},
	{Err: store.ErrGone, Code: "gone", Status: http.StatusGone},
	{Err: ErrUnknownWorkflow, Code: "unknown_workflow", Status: http.StatusNotFound},
	// The World's (package world): the runtime maps each status to the
	// error class it tests for (docs/world.md), and conflicts are a normal
	// path of its replays.
	{Err: world.ErrConflict, Code: "world_conflict", Status: http.StatusConflict},
	{Err: world.ErrRunExpired, Code: "run_expired", Status: http.StatusGone},
	{Err: world.ErrTooEarly, Code: "too_early", Status: http.StatusTooEarly, Retryable: true},
	{Err: world.ErrRunNotFound, Code: "run_not_found", Status: http.StatusNotFound},
	{Err: world.ErrHookNotFound, Code: "hook_not_found", Status: http.StatusNotFound},
	{Err: world.ErrStepNotFound, Code: "step_not_found", Status: http.StatusNotFound},
	{Err: world.ErrWaitNotFound, Code: "wait_not_found", Status: http.StatusNotFound},
	{Err: world.ErrNotSupported, Code: "run_not_supported", Status: http.StatusUnprocessableEntity},
	{Err: world.ErrInvalid, Code: "invalid_event", Status: http.StatusBadRequest},
	{Err: ErrUnsigned, Code: "unsigned", Status: http.StatusUnauthorized},
	{Err: ErrNoDelivery, Code: "no_delivery", Status: http.StatusServiceUnavailable},
	{Err: stream.ErrUnknownWriter, Code: "unknown_writer", Status: http.StatusNotFound},
	{Err: store.ErrNotFound, Code: "not_found", Status: http.StatusNotFound},
	{Err: stream.ErrConflict, Code: "chunk_conflict", Status: http.StatusUnprocessableEntity, Reason: "conflict"},
	{Err: store.ErrKeyReused, Code: "key_reused", Status: http.StatusUnprocessableEntity, Reason: "key_reused"},
	{Err: stream.ErrGap, Code: "gap", Status: http.StatusConflict, Reason: "gap"},
	{Err: stream.ErrClosed, Code: "closed", Status: http.StatusConflict, Reason: "closed"},
	{Err: stream.ErrWriterFinished, Code: "writer_finished", Status: http.StatusConflict, Reason: "finished"},
	{Err: stream.ErrMode, Code: "writer_mode", Status: http.StatusConflict, Reason: "mode"},
	{Err: store.ErrRunConflict, Code: "run_conflict", Status: http.StatusConflict},
	{Err: store.ErrNotResumable, Code: "not_resumable", Status: http.StatusConflict},
	{Err: store.ErrHookConflict, Code: "hook_in_use", Status: http.StatusConflict},
	{Err: store.ErrLimiterInUse, Code: "limiter_in_use", Status: http.StatusConflict},
	{Err: store.ErrLeaseLost, Code: "lease_lost", Status: http.StatusConflict},
	{Err: stream.ErrProducerGap, Code: "producer_gap", Status: http.StatusConflict, Reason: "producer_seq"},
	{Err: stream.ErrStreamSeq, Code: "stream_seq", Status: http.StatusConflict, Reason: "stream_seq"},
	{Err: store.ErrTooLarge, Code: "too_large", Status: http.StatusRequestEntityTooLarge, Reason: "too_large"},
	// A stream at its byte limit, a store at its stream limit: retrying
	// does not help until something is deleted.
	{Err: stream.ErrFull, Code: "stream_full", Status: http.StatusRequestEntityTooLarge, Reason: "full"},
	{Err: store.ErrQuota, Code: "quota", Status: http.StatusInsufficientStorage},
	{Err: stream.ErrEpochSeq, Code: "producer_epoch_seq", Status: http.StatusBadRequest, Reason: "producer_seq"},
	{Err: names.ErrInvalid, Code: "invalid_name", Status: http.StatusBadRequest},
	{Err: store.ErrInvalid, Code: "invalid", Status: http.StatusBadRequest},
	{Err: ErrBadRequest, Code: "bad_request", Status: http.StatusBadRequest},
	{Err: ErrUnauthorized, Code: "unauthorized", Status: http.StatusUnauthorized},
	{Err: ErrMethod, Code: "method_not_allowed", Status: http.StatusMethodNotAllowed},
	{Err: ErrForbidden, Code: "forbidden", Status: http.StatusForbidden},
	{Err: ErrUnsupportedMedia, Code: "unsupported_media_type", Status: http.StatusUnsupportedMediaType},
	{Err: ErrBusy, Code: "busy", Status: http.StatusServiceUnavailable, Retryable: true},
	{Err: store.ErrClosedStore, Code: "store_closed", Status: http.StatusServiceUnavailable, Retryable: true},
	{Err: ErrEngineClosed, Code: "engine_closed", Status: http.StatusServiceUnavailable, Retryable: true},
}

// internal is the row of errors the table does not know: a failure of the
// server, not of the request.
var internal = Error{Code: "internal", Status: http.StatusInternalServerError, Retryable: true}

// Lookup returns err's row; an error the table does not know is "internal"
// (500, retryable) and ok is false.
func Lookup(err error) (e Error, ok bool) {
	for _, e := range Errors {
		if errors.Is(err, e.Err) {
			return e, true
		}
	}
	return internal, false
}

// ByCode returns the row of a wire code.
func ByCode(code string) (Error, bool) {
	for _, e := range Errors {
		if e.Code == code {
			return e, true
		}
	}
	return Error{}, false
}

// Status returns err's HTTP status.
func Status(err error) int {
	e, _ := Lookup(err)
	return e.Status
}

// Retryable reports whether sending the same request again may succeed: a
// row of the table says so; a context's end says no; an error of a store
// backend says so with its Temporary method; any other error is a failure
// of the server or the network, which may pass.
func Retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if e, ok := Lookup(err); ok {
		return e.Retryable
	}
	var t interface{ Temporary() bool }
	if errors.As(err, &t) {
		return t.Temporary()
	}
	return true
}
