package server

// routes registers everything outside /v1/stream/ (which ServeHTTP routes
// itself): the runs API, /healthz and /metrics. Every other path is a 404
// with a one-line reason; a known path with another method is a 405 with
// an Allow header.
func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/runs", s.handleStartRun)
	s.mux.HandleFunc("GET /v1/runs", s.handleListRuns)
	s.mux.HandleFunc("POST /v1/runs/migrate", s.handleMigrate)
	s.mux.HandleFunc("GET /v1/runs/{id}", s.handleGetRun)
	s.mux.HandleFunc("GET /v1/runs/{id}/events", s.handleEvents)
	s.mux.HandleFunc("POST /v1/runs/{id}/cancel", s.handleCancel)
	s.mux.HandleFunc("POST /v1/runs/{id}/fork", s.handleFork)
	s.mux.HandleFunc("POST /v1/runs/{id}/retry", s.handleRetry)
	s.mux.HandleFunc("POST /v1/runs/{id}/resume", s.handleResume)
	s.mux.HandleFunc("GET /v1/runs/{id}/streams", s.handleStreams)
	s.mux.HandleFunc("GET /v1/workflows", s.handleWorkflows)
	s.mux.HandleFunc("GET /v1/streams", s.handleListStandalone)
	s.mux.HandleFunc("POST /v1/hooks/{token}", s.handleDeliverHook)
	s.mux.HandleFunc("GET /v1/runs/{id}/hooks", s.handleHooks)
	s.mux.HandleFunc("POST /v1/runs/{id}/messages/{topic}", s.handleSendMessage)
	s.mux.HandleFunc("GET /v1/runs/{id}/events/{key}", s.handleRunEvent)
	s.mux.HandleFunc("GET /v1/runs/{id}/state", s.handleRunState)
	s.mux.HandleFunc("GET /v1/runs/{id}/waiting", s.handleWaiting)
	s.mux.HandleFunc("GET /v1/limiters", s.handleLimiters)
	s.mux.HandleFunc("GET /v1/limiters/{name}", s.handleLimiter)
	s.mux.HandleFunc("PUT /v1/limiters/{name}", s.handleSetLimiter)
	s.mux.HandleFunc("DELETE /v1/limiters/{name}", s.handleDeleteLimiter)
	s.mux.HandleFunc("GET /v1/schedules", s.handleSchedules)
	s.mux.HandleFunc("GET /v1/schedules/{name}", s.handleSchedule)
	s.mux.HandleFunc("PUT /v1/schedules/{name}", s.handleSetSchedule)
	s.mux.HandleFunc("DELETE /v1/schedules/{name}", s.handleDeleteSchedule)
	s.mux.HandleFunc("POST /v1/schedules/{name}/pause", s.handlePauseSchedule)
	s.mux.HandleFunc("POST /v1/schedules/{name}/resume", s.handlePauseSchedule)
	s.worldRoutes() // world.go

	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /metrics", s.serveMetrics)

	s.mux.Handle("GET /ui/", uiHandler())
	s.mux.Handle("GET /ui", uiHandler())

	s.mux.HandleFunc("/", s.handleUnknown)
}
