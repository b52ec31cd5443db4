package server

import "net/http"

// handleStream serves the Durable Streams protocol under /v1/stream/.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "not implemented", http.StatusNotImplemented)
}
