package server

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web UI is plain HTML, CSS and JavaScript with no build step: what is
// in ui/ is what the browser gets.
//
//go:embed ui
var uiFiles embed.FS

// uiHandler serves the web UI under /ui/. It is a static page that talks to
// the runs API and the stream endpoints with the user's token, so it needs
// no auth of its own: the API it calls enforces it.
func uiHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded folder is part of the binary
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		// frame-ancestors: no other page can frame the UI and have its
		// Cancel button clicked through an overlay.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'; base-uri 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if r.URL.Path == "/ui" {
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
			return
		}
		files.ServeHTTP(w, r)
	})
}
