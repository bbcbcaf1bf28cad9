// Package aep is the wire model of the two Agent Event Protocol dialects the
// gateway speaks: dialect R ("relay", agenteventprotocol.io AEP-0001..0004,
// version attribute "aep") and dialect D ("delivery", axisrobo AEP 0.1,
// version attribute "aep_version").
//
// It owns dialect detection, envelope validation against each dialect's own
// rules, the error vocabularies clients see, and the extraction of the
// neutral routing attributes ([Attrs]) that the rest of the gateway routes,
// partitions and filters on. It never re-encodes an event: the bytes a client
// sent are the bytes stored and delivered.
//
// Everything in this package is safe for concurrent use; it holds no state.
package aep
