// Command aepctl is the command-line client of aep-gateway and its load tool.
//
//	aepctl publish [flags] [FILE|-]   post NDJSON events, in batches, with retries
//	aepctl gen [flags]                print synthetic valid events as NDJSON
//	aepctl bench ingest [flags]       bounded load against a gateway on loopback
//
// The CLI is a thin layer over functions that tests drive directly:
// [Client.Send] and [Client.SendRetry] post one request body, [Publish]
// batches a stream of NDJSON lines, [Generator] makes events and
// [RunBench] runs the load loop.
//
// Concurrency: a [Client] is safe for concurrent use (it holds only its
// configuration and an *http.Client). A [Generator] is owned by one
// goroutine. [RunBench] owns every goroutine it starts (one dispatcher and
// Concurrency workers per phase), joins them before it returns, and passes
// batches through a channel bounded to Concurrency entries.
//
// Exit codes: 0 everything accepted, 1 a request failed or an event was
// rejected, 2 usage error. See docs/aepctl.md.
package main
