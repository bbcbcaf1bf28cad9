// Package aep is the wire model of the two Agent Event Protocol dialects the
// gateway speaks: dialect R ("relay", agenteventprotocol.io AEP-0001..0004,
// version attribute "aep") and dialect D ("delivery", axisrobo AEP 0.1,
// version attribute "aep_version").
//
// It owns dialect detection, envelope validation against each dialect's own
// rules, the error vocabularies clients see, and the extraction of the
// neutral routing attributes ([Attrs]) that the rest of the gateway routes,
// partitions and filters on. Validation never re-encodes an event: the bytes
// a client sent are the bytes stored, and delivered as they are, with one
// exception: [Downlevel] rewrites a dialect R event whose capture level is
// above a consumer's ceiling (AEP-0001 §8.2), keeping every other member's
// bytes, and returns the stored bytes themselves when nothing must change.
//
// [Parse] and [ParseAs] validate one event in a single pass over its bytes
// (JSON syntax, UTF-8, depth and size [Limits], then the dialect's envelope
// rules on the recorded top-level members) and return fresh copies of the
// routing attributes; every refusal is an [*Error] carrying the dialect's own
// code. With [Limits].ValidatePayloads, the data of a dialect R event of a
// registered AEP-0002 type is also checked against the specification's
// payload schema (embedded from schemas/r). [Codes] lists both dialects' complete error vocabularies with the HTTP
// statuses the specs give; [SupportedVersions] and [AcceptVersionHeader] cover
// version negotiation. docs/dialects.md is the ingest contract built on this
// package and the record of the choices made where the specs are silent.
//
// Everything in this package is safe for concurrent use; it holds no state
// but the payload schemas, compiled once on first use and read-only after.
package aep
