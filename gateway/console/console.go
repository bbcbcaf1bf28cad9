// Package console serves a small web console for aep-gateway: a live tail of
// the tenant's events with a filter box and pause/resume, the fleet (agents
// and sessions of the last 15 minutes and since, with their runs, tool
// calls, waiting attention requests, errors and D tasks, event rates per
// type, and a session's timeline), the durable subscriptions with their
// lag and acknowledgement counters (redeliveries among them), the recent dead
// letters, and the node's readiness. It is static HTML, CSS and JavaScript
// (no framework, no build step) embedded in the binary; everything it shows
// comes from the gateway's public API (SSE read with fetch, since= on
// load, GET /aep/subscriptions, /aep/dead-letters, /readyz), so it is also a worked
// example of a browser client.
//
// The handler holds no data and no state: mount it behind the gateway's
// authentication and open it as /console/?access_token=KEY (no key in
// development mode). The page sends the key as a bearer token on its API
// calls and passes the query on to its own assets, so they load through the
// same authentication.
package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"time"
)

//go:embed static
var static embed.FS

var page = template.Must(template.ParseFS(static, "static/index.html"))

// Handler serves the console at the root of where it is mounted (use
// http.StripPrefix): "/" is the page, "/console.js", "/stream.js",
// "/panels.js", "/fleet.js", "/fleetview.js", "/console.css" and
// "/favicon.svg" (the page names its icon, so a browser
// does not ask the gateway's root for /favicon.ico) its assets. Only GET and HEAD are served.
func Handler() http.Handler {
	assets, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer") // the page's URL may hold a key
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		switch p := path.Clean("/" + r.URL.Path); p {
		case "/", "/index.html":
			servePage(w, r)
		case "/console.js", "/stream.js", "/panels.js", "/fleet.js", "/fleetview.js", "/console.css", "/favicon.svg":
			r2 := r.Clone(r.Context())
			r2.URL.Path = p
			files.ServeHTTP(w, r2)
		default:
			http.NotFound(w, r)
		}
	})
}

// servePage renders index.html with the access_token of the request, if
// any, on the asset URLs.
func servePage(w http.ResponseWriter, r *http.Request) {
	q := ""
	if tok := r.URL.Query().Get("access_token"); tok != "" {
		q = "?access_token=" + url.QueryEscape(tok)
	}
	var b bytes.Buffer
	if err := page.Execute(&b, struct{ Query string }{q}); err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(b.Bytes()))
}
