package server

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/weirhq/weir/api"
)

// What a web page the user visits may do to a server it can reach (a
// loopback server is reachable from every page): nothing but what the
// server's origins allow.
//
//   - Host: with Config.AllowedHosts set (weir server sets it on a loopback
//     bind), a request naming another host is refused, so a DNS name the
//     attacker points at 127.0.0.1 (DNS rebinding) reaches nothing.
//   - Origin: a state-changing request (any method but GET, HEAD and
//     OPTIONS) from a browser page of another origin is refused, unless
//     Config.CORSOrigins allows that origin. Requests without Origin (curl,
//     SDKs, servers) are not browsers' and pass. Browsers send Origin on
//     every cross-origin request that is not a GET or HEAD.
//   - CORS: reads from other origins get Access-Control-Allow-Origin only
//     for allowed origins, so a page of another origin cannot read what the
//     server answers; preflights answer what the Durable Streams protocol
//     needs, and allow only allowed origins.
//   - Bodies: the runs and World APIs take JSON only, so that a form or a
//     text/plain POST (which needs no preflight) is refused before anything
//     happens.

// checkHost refuses a Host the server does not answer to.
func (s *Server) checkHost(r *http.Request) error {
	if len(s.cfg.AllowedHosts) == 0 {
		return nil
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if slices.Contains(s.cfg.AllowedHosts, host) {
		return nil
	}
	return fmt.Errorf("%w: host %q: this server answers to %s only (it is bound to loopback)", api.ErrForbidden, clip(r.Host),
		strings.Join(s.cfg.AllowedHosts, ", "))
}

// LoopbackHosts are the host names a loopback server answers to, besides
// the one it was told to listen on.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// originAllowed reports whether a request's Origin may act on the server:
// its own origin, or one Config.CORSOrigins lists ("*": any).
func (s *Server) originAllowed(r *http.Request, origin string) bool {
	if origin == "" {
		return true
	}
	if u, err := url.Parse(origin); err == nil && strings.EqualFold(u.Host, r.Host) && (u.Scheme == "http" || u.Scheme == "https") {
		return true
	}
	for _, o := range s.cfg.CORSOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

// safeMethod reports a method that changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// checkOrigin refuses a state-changing request of a page of another origin
// (or, without Origin, one a browser marks cross-site).
func (s *Server) checkOrigin(r *http.Request) error {
	if safeMethod(r.Method) {
		return nil
	}
	origin := r.Header.Get("Origin")
	if origin == "" && r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		origin = "null"
	}
	if s.originAllowed(r, origin) {
		return nil
	}
	return fmt.Errorf("%w: a request from origin %q: only this server's own pages and the origins of --cors-origin may change anything",
		api.ErrForbidden, clip(origin))
}

// corsHeaders sets the CORS headers of a response to r: for an allowed
// other origin, Access-Control-Allow-Origin (and, for streams, the protocol's
// exposed headers).
func (s *Server) corsHeaders(w http.ResponseWriter, r *http.Request, stream bool) {
	origin := r.Header.Get("Origin")
	h := w.Header()
	h.Add("Vary", "Origin")
	if origin == "" || !s.originAllowed(r, origin) {
		return
	}
	if slices.Contains(s.cfg.CORSOrigins, "*") && s.cfg.Token == "" {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
	}
	if stream {
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	} else {
		h.Set("Access-Control-Expose-Headers", "Weir-Error, Retry-After")
	}
}

// preflight answers a CORS preflight: the methods and headers the path
// takes, for an allowed origin; an origin not allowed gets them too, but no
// Access-Control-Allow-Origin, so its browser goes no further.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request, stream bool) {
	s.corsHeaders(w, r, stream)
	h := w.Header()
	if stream {
		h.Set("Access-Control-Allow-Methods", corsAllowMethods)
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	} else {
		h.Set("Access-Control-Allow-Methods", "GET, POST, HEAD, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization, Idempotency-Key")
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// requireJSON refuses a body that is not JSON: the runs and World APIs take
// nothing else, and a page can POST text/plain or a form without a
// preflight.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if mediaType(ct) != "application/json" {
		return fmt.Errorf("%w: Content-Type %q: this endpoint takes application/json", api.ErrUnsupportedMedia, clip(ct))
	}
	return nil
}

// readJSON reads a request that takes a JSON body and no query: the
// query checked, the media type JSON, the body at most limit bytes,
// decoded into v strictly (unknown fields refused).
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	if err := requireJSON(r); err != nil {
		return err
	}
	body, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// activeTypes are media types a browser would render as a document that
// runs scripts.
var activeTypes = []string{"text/html", "application/xhtml+xml", "image/svg+xml", "text/xml", "application/xml",
	"text/javascript", "application/javascript", "application/ecmascript", "text/ecmascript", "application/x-shockwave-flash",
	"application/pdf", "text/xsl", "application/vnd.wap.xhtml+xml", "multipart/x-mixed-replace"}

// attachActive makes a browser save, not render, a stream of an active
// type (besides the sandbox every stream reply carries).
func attachActive(h http.Header, contentType string) {
	mt := mediaType(contentType)
	if slices.Contains(activeTypes, mt) || strings.HasSuffix(mt, "+xml") || strings.Contains(mt, "script") {
		h.Set("Content-Disposition", "attachment")
	}
}

// reader takes a slot of Config.MaxReaders for a stream read, or answers
// that the server is busy (503, Retry-After).
func (s *Server) reader() (release func(), err error) {
	select {
	case s.readers <- struct{}{}:
		return func() { <-s.readers }, nil
	default:
		return nil, fmt.Errorf("%w: %d stream reads are being served, the limit is %d: read again shortly", api.ErrBusy, len(s.readers), cap(s.readers))
	}
}
