package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// handleCreate serves PUT: create a stream, or a fork of one; 200 if the
// stream exists with the same configuration, 409 if with another.
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request, path string) {
	ch, err := parseCreateHeaders(r.Header)
	if err != nil {
		s.streamError(w, err)
		return
	}
	if err := wellFormedQuery(r); err != nil {
		s.streamError(w, err)
		return
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.streamError(w, err)
		return
	}
	ctx := r.Context()
	now := s.now()

	existing, err := s.lookup(ctx, path, now)
	switch {
	case errors.Is(err, store.ErrGone):
		s.streamError(w, fmt.Errorf("%w: %w", api.ErrConflict, err))
		return
	case err == nil:
		s.createdReply(w, r, existing, ch, false)
		return
	case !errors.Is(err, store.ErrNotFound):
		s.streamError(w, err)
		return
	}

	p := &store.CreateStreamParams{Path: path, ContentType: ch.contentType, Expiry: ch.expiry, Closed: ch.closed, Now: now,
		MaxStreams: limit(s.cfg.MaxStreams), MaxBytes: limit(s.cfg.MaxStreamBytes)}
	if ch.isFork {
		src, err := s.lookup(ctx, ch.forkedFrom, now)
		switch {
		case errors.Is(err, store.ErrGone):
			s.streamError(w, fmt.Errorf("%w: fork source: %w", api.ErrConflict, err))
			return
		case err != nil:
			s.streamError(w, fmt.Errorf("fork source: %w", err))
			return
		}
		if ch.contentType != "" && mediaType(ch.contentType) != mediaType(src.ContentType) {
			s.streamError(w, fmt.Errorf("%w: content type %s differs from the fork source's %s", api.ErrConflict,
				mediaType(ch.contentType), mediaType(src.ContentType)))
			return
		}
		if ch.contentType == "" {
			p.ContentType = src.ContentType
		}
		if !ch.hasTTL && !ch.hasExpiresAt {
			p.Expiry = src.Expiry // a fork inherits its source's TTL window or deadline
		}
		p.Fork = &store.ForkParams{SourceID: src.ID, Offset: -1, SubOffset: ch.subOffset, SubRecords: isJSONType(src.ContentType)}
		if ch.hasForkOff {
			p.Fork.Offset = ch.forkOffset
		}
	}
	if len(body) > 0 {
		if isJSONType(p.ContentType) {
			if p.Chunks, err = jsonValues(body, store.MaxAppendChunks); err != nil {
				s.streamError(w, err)
				return
			}
		} else {
			p.Chunks = splitChunks(body)
		}
	}
	info, created, err := s.store.CreateStream(ctx, p)
	if err != nil {
		if errors.Is(err, store.ErrGone) {
			err = fmt.Errorf("%w: fork source: %w", api.ErrConflict, err)
		}
		s.streamError(w, err)
		return
	}
	s.createdReply(w, r, info, ch, created)
}

// createdReply answers a PUT: 201 for a new stream; for an existing one 200
// if the request's configuration matches, else 409.
func (s *Server) createdReply(w http.ResponseWriter, r *http.Request, info *store.StreamInfo, ch *createHeaders, created bool) {
	if !created {
		if info.Deleted {
			s.streamError(w, fmt.Errorf("%w: the stream at this path was deleted; its forks live on", api.ErrConflict))
			return
		}
		if why := configDiffers(info, ch); why != "" {
			s.streamError(w, fmt.Errorf("%w: a stream exists at this path with another configuration: %s", api.ErrConflict, why))
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", info.ContentType)
	h.Set("Stream-Next-Offset", formatOffset(info.NextOffset))
	if info.Closed {
		h.Set("Stream-Closed", "true")
	}
	if !created {
		w.WriteHeader(http.StatusOK)
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	h.Set("Location", scheme+"://"+r.Host+r.URL.EscapedPath())
	w.WriteHeader(http.StatusCreated)
}

// configDiffers says how an existing stream's configuration differs from a
// create request's, or "" if it matches. What a fork request leaves out (its
// content type, expiry, offset) is what it would inherit, so it matches.
func configDiffers(info *store.StreamInfo, ch *createHeaders) string {
	switch {
	case ch.contentType != "" && mediaType(ch.contentType) != mediaType(info.ContentType):
		return fmt.Sprintf("content type %s, not %s", mediaType(info.ContentType), mediaType(ch.contentType))
	case ch.contentType == "" && !ch.isFork && mediaType(info.ContentType) != defaultContentType:
		return fmt.Sprintf("content type %s, not %s", mediaType(info.ContentType), defaultContentType)
	case ch.closed != info.Closed:
		if info.Closed {
			return "it is closed"
		}
		return "it is open"
	}
	if ch.hasTTL || ch.hasExpiresAt || !ch.isFork {
		if ch.expiry.HasTTL != info.Expiry.HasTTL || ch.expiry.HasTTL && ch.expiry.TTL != info.Expiry.TTL {
			return "another Stream-TTL"
		}
		if !ch.expiry.At.Equal(info.Expiry.At) {
			return "another Stream-Expires-At"
		}
	}
	switch {
	case !ch.isFork && info.Fork != nil:
		return "it is a fork"
	case ch.isFork && info.Fork == nil:
		return "it is not a fork"
	case ch.isFork && ch.forkedFrom != info.Fork.SourcePath:
		return "it is forked from another stream"
	case ch.isFork && ch.hasForkOff && ch.forkOffset != info.Fork.Offset:
		return "another Stream-Fork-Offset"
	case ch.isFork && ch.subOffset != info.Fork.SubOffset:
		return "another Stream-Fork-Sub-Offset"
	}
	return ""
}

// splitChunks cuts a byte body into chunks of at most store.MaxChunkSize:
// one record per request, unless the body is larger than a chunk can be.
func splitChunks(body []byte) [][]byte {
	if len(body) <= store.MaxChunkSize {
		return [][]byte{body}
	}
	var out [][]byte
	for len(body) > 0 {
		n := min(len(body), store.MaxChunkSize)
		out = append(out, body[:n:n])
		body = body[n:]
	}
	return out
}
