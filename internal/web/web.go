// Package web serves DiStash's web console: one page that shows the
// cluster at a glance (nodes, pools, stashes, distribution, log,
// ratekeeper) and charts it live, and /status.json, the same document as
// `distash cli status json` (internal/statusjson), which the page polls
// every second. The page is static HTML, CSS and JavaScript embedded in
// the binary (no build step, no CDN: the machines that run DiStash often
// have no internet access); the charts are plain SVG drawn by the page.
// The page computes rates from successive counters and keeps the charts'
// history itself (five minutes): the server keeps no history, and a
// reload starts the charts afresh.
//
// The node's HTTP server (server/http.go) mounts Handler at / next to
// /metrics.
package web

import (
	"context"
	"net/http"

	"github.com/distash/distash/internal/wire"
)

// Options configure Handler.
type Options struct {
	// Status returns the cluster's status (clusterstatus.Gather, or an
	// embedded server's own status). Required.
	Status func(ctx context.Context) (*wire.StatusResponse, error)
}

// Handler returns the console's handler: / (the page), /static/ (its
// assets), /status.json. Anything else is 404, a method other than GET
// or HEAD is 405, a query string that is too long or malformed is 400.
func Handler(opts Options) http.Handler {
	return newHandler(opts)
}
