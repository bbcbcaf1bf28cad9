// Package netpoll tells when parked connections become readable or hang up, without a
// goroutine per connection: one epoll instance and one goroutine per Poller (Linux, via
// golang.org/x/sys/unix); elsewhere New returns ErrUnsupported and callers keep their
// goroutine-per-connection path.
//
// A parked connection is one its owner does not read with a goroutine blocked in Read:
// an SSE response after its request (the client sends nothing more, so readable or hung
// up means it is gone), an idle WebSocket between frames. Its owner Adds it with a
// callback; the callback runs once when the descriptor turns readable, hangs up or fails
// (one-shot), and must not block: it hands the work to a goroutine of its owner, which
// reads or ends the connection and Rearms the Handle to be told again. The poller's
// goroutine only waits and queues: callbacks run on at most 8 dispatching goroutines,
// started as events come and gone when idle, so a slow callback delays the ones queued
// behind it, never the wait itself nor every connection.
//
// The Go runtime's netpoller already has the descriptor in its own epoll set; a second
// epoll instance watching it is allowed, and reading and writing through the net.Conn
// keep working as before.
//
// Ownership: a Poller owns its goroutine and its dispatchers; Close stops them and waits
// for them. Every method of Poller and Handle is safe for concurrent use. Remove a Handle
// before closing its connection: a closed descriptor number may be reused by the next
// connection, and a late Remove (EPOLL_CTL_DEL, by number) would then unwatch that one.
// An owner that must end a watched connection's traffic first shuts it down (shutdown(2)
// keeps the number).
//
// Failure: when epoll_wait fails with anything but EINTR the instance is unusable and the
// goroutine returns; Options.OnFail is told once (on that goroutine, so it must not
// block), and from then on Add and Rearm return ErrFailed instead of accepting
// descriptors nothing will report on: the owner moves its connections to goroutines.
// Poller.Fail injects that failure, for the owners' tests.
package netpoll
