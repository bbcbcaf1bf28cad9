// Package cursor turns Kafka coordinates into what clients hold, and back.
//
// It owns:
//
//   - the cursor codec (Cursor, Keyring.Encode, Keyring.Decode): opaque,
//     versioned, signed, base64url text naming a topic incarnation, its
//     partition count, a delivery sequence and a per-partition frontier;
//   - dialect R session positions (Position, ParsePosition) and the resume
//     index that maps a position to a partition offset in time proportional
//     to the replayed tail (Indexer writes checkpoints to a compacted topic,
//     Resolver reads them and scans a bounded stretch of one partition);
//   - ack tracking for durable subscriptions (AckTracker): the offset each
//     partition may commit given out-of-order acknowledgements, with a
//     bounded in-flight window, and the Committer that stores those offsets
//     as the subscription's consumer-group offsets;
//   - gap detection (Gap, CheckFrontier): a resume point that the log no
//     longer holds is reported with where delivery really restarts, never
//     turned into "from now" or "from the beginning".
//
// Topic, group and header names are parameters; this package does not
// decide the Kafka layout (see partitioning/).
//
// Concurrency: Keyring, Committer and Resolver are safe for concurrent use.
// AckTracker is not: one delivery goroutine owns each tracker. Indexer and
// Resolver each own one goroutine, started by their constructor and stopped
// and waited for by Close.
package cursor
