package server

// Drain ends the live reads in progress (SSE and long-poll, whose clients
// resume from their last offset elsewhere or later) and makes new ones end
// at once, so that http.Server.Shutdown only waits for the requests that
// finish by themselves. Call it when shutting down, e.g. with
// http.Server.RegisterOnShutdown(srv.Drain). Other requests are served as
// before.
func (s *Server) Drain() { s.drainCancel() }
