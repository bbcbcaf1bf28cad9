// Command aepctl is the command-line client of aep-gateway.
//
//	aepctl publish [flags] [FILE|-]   post NDJSON events, in batches, with retries
//	aepctl gen [flags]                print synthetic valid events as NDJSON
//	aepctl tail [flags]               print live events
//
// The benchmarks are a command of their own, cmd/aepbench, so the client
// users install carries no load generator.
//
// The CLI is a thin layer over functions that tests drive directly: the
// gateway's HTTP and WebSocket API is internal/aepclient ([aepclient.Client]
// posts request bodies and opens streams), the generator of synthetic events
// is internal/eventgen, the flag and config plumbing aepctl shares with
// aepbench is internal/cli; [Publish] batches a stream of NDJSON lines.
//
// Concurrency: an aepclient.Client is safe for concurrent use (it holds only
// its configuration and an *http.Client). A Generator is owned by one
// goroutine.
//
// Exit codes: 0 everything accepted, 1 a request failed or an event was
// rejected, 2 usage error. See docs/aepctl.md.
package main
