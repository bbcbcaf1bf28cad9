package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// Socket is the server side of one WebSocket connection (RFC 6455) over
// the hijacked TCP connection: the lean layer the gateway writes its
// fan-out through. Server frames are unmasked, so a frame is a 2-10 byte
// header and the payload: AppendFrame builds many into one buffer and
// Write sends them with one write. Reading takes the client's masked
// frames, joins fragments, answers pings, echoes a close, checks text is
// UTF-8 and bounds a message's size.
//
// Concurrency: one goroutine reads (ReadMessage); writes (Write, Ping and
// the reader's own pongs and closes) are serialized by a mutex and may come
// from any goroutine.
type Socket struct {
	nc    net.Conn
	early []byte // bytes read with the handshake, consumed first
	limit int64

	// rhdr is the reader's header scratch; reader only.
	rhdr [14]byte
	// msgTimeout bounds a parked read (0: no bound); rbase is the
	// deadline the owner set (SetReadDeadline, in UnixNano; 0: none),
	// restored after it. Reader only.
	msgTimeout time.Duration
	rbase      int64

	wmu       sync.Mutex
	closeSent bool // a close frame was written; guarded by wmu
	closing   bool // the close handshake's read deadline is set; guarded by wmu

	written int64     // bytes written; guarded by wmu
	hooks   *parkHook // the request's OnPark hooks (nil: none)

	gotClose atomic.Bool // the peer's close frame was read
	sentAny  atomic.Bool // closeSent, readable without wmu
	onPong   atomic.Pointer[func()]
}

func newSocket(nc net.Conn, early []byte, limit int64) *Socket {
	return &Socket{nc: nc, early: early, limit: limit}
}

// closeWait bounds the wait for the peer's close frame once ours is
// written (coder/websocket waits as long).
const closeWait = 5 * time.Second

// Read-side errors that close the connection with a status.
var errWSClosed = errors.New("transport: websocket closed")

// errNoMessage is readMessage's answer, for a parked connection, when it
// read control frames and no data message has begun.
var errNoMessage = errors.New("transport: websocket: control frames only")

// op codes (RFC 6455 §5.2).
const (
	opCont  = 0x0
	opText  = 0x1
	opBin   = 0x2
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

// AppendFrame appends one unmasked final frame of op carrying p to b.
func AppendFrame(b []byte, op byte, p []byte) []byte {
	b = append(b, 0x80|op)
	switch n := len(p); {
	case n <= 125:
		b = append(b, byte(n))
	case n <= 0xFFFF:
		b = append(b, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, p...)
}

// appendClose appends a close frame with status and reason (at most 123
// bytes of reason: truncated).
func appendClose(b []byte, status websocket.StatusCode, reason string) []byte {
	reason = truncReason(reason)
	var p [125]byte
	binary.BigEndian.PutUint16(p[:2], uint16(status))
	n := 2 + copy(p[2:], reason)
	return AppendFrame(b, opClose, p[:n])
}

// Write writes frames (built with AppendFrame) with one write under
// deadline; closes, when set, says b ends with a close frame: nothing is
// written after it, and the peer then has closeWait to answer. After a
// close frame was written, or a write failed (the connection is then
// closed: a frame may have been cut), Write fails.
func (s *Socket) Write(b []byte, timeout time.Duration, closes bool) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeLocked(b, timeout, closes)
}

// writeLocked is Write; must hold s.wmu.
func (s *Socket) writeLocked(b []byte, timeout time.Duration, closes bool) error {
	if s.closeSent {
		return errWSClosed
	}
	if err := s.nc.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("transport: websocket write deadline: %w", err)
	}
	if closes {
		s.closeSent = true
		s.sentAny.Store(true)
	}
	n, err := s.nc.Write(b)
	s.written += int64(n)
	if err != nil {
		// A frame may be cut: nothing can follow it. The reader returns.
		s.closeSent = true
		s.sentAny.Store(true)
		s.kill()
		return fmt.Errorf("transport: websocket write: %w", err)
	}
	if closes && !s.gotClose.Load() {
		s.closing = true
		_ = s.nc.SetReadDeadline(time.Now().Add(closeWait))
	}
	return nil
}

// Written is the number of bytes written to the connection.
func (s *Socket) Written() int64 {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.written
}

// writeClose writes a close frame unless one was written; reader's
// answers and protocol errors.
func (s *Socket) writeClose(status websocket.StatusCode, reason string) {
	var buf [2 + 125]byte
	_ = s.Write(appendClose(buf[:0], status, reason), closeWait, true)
}

// Ping writes a protocol ping.
func (s *Socket) Ping(timeout time.Duration) error {
	var buf [2]byte
	return s.Write(AppendFrame(buf[:0], opPing, nil), timeout, false)
}

// OnPong sets what runs (in the reader) when a pong arrives.
func (s *Socket) OnPong(f func()) { s.onPong.Store(&f) }

// SetReadDeadline bounds the next reads; ignored once the close
// handshake's own deadline is set. Reader only.
func (s *Socket) SetReadDeadline(t time.Time) {
	s.rbase = 0
	if !t.IsZero() {
		s.rbase = t.UnixNano()
	}
	s.applyReadDeadline(t)
}

// applyReadDeadline sets the connection's read deadline unless the close
// handshake's own is set.
func (s *Socket) applyReadDeadline(t time.Time) {
	s.wmu.Lock()
	if !s.closing {
		_ = s.nc.SetReadDeadline(t)
	}
	s.wmu.Unlock()
}

// boundMessage bounds a parked read by msgTimeout (or the owner's earlier
// deadline); false when there is no bound (nothing to restore).
func (s *Socket) boundMessage() bool {
	if s.msgTimeout <= 0 {
		return false
	}
	t := time.Now().Add(s.msgTimeout)
	if s.rbase != 0 && s.rbase < t.UnixNano() {
		t = time.Unix(0, s.rbase)
	}
	s.applyReadDeadline(t)
	return true
}

// restoreDeadline puts the owner's read deadline back after a message.
func (s *Socket) restoreDeadline() {
	var t time.Time
	if s.rbase != 0 {
		t = time.Unix(0, s.rbase)
	}
	s.applyReadDeadline(t)
}

// Abort ends the TCP connection's traffic at once (a blocked read or
// write returns); Finish closes it.
func (s *Socket) Abort() { s.kill() }

// halfCloser is a connection that can stop each direction without giving
// up its descriptor (*net.TCPConn, *net.UnixConn).
type halfCloser interface {
	CloseRead() error
	CloseWrite() error
}

// kill ends the connection's traffic without closing its descriptor, so
// that its number cannot be reused while a poller may still watch it
// (internal/netpoll: Remove before Close): a blocked read returns end of
// file, writes fail, the peer sees the end. Finish closes the descriptor,
// after the connection left the poller. A connection that cannot shut
// down one direction (no descriptor of its own, e.g. TLS: never parked)
// is closed.
func (s *Socket) kill() {
	if hc, ok := s.nc.(halfCloser); ok {
		_ = hc.CloseWrite()
		_ = hc.CloseRead()
		return
	}
	_ = s.nc.Close()
}

// Finish ends the connection: when our close frame went out and the
// peer's has not come, it reads (and drops) what the peer still sends
// until its close frame, for at most closeWait, so that closing the socket
// with unread bytes does not reset the connection before the peer has read
// our close; then it closes the TCP connection.
func (s *Socket) Finish() {
	s.wmu.Lock()
	drain := s.closeSent && !s.gotClose.Load()
	s.wmu.Unlock()
	if drain {
		_ = s.nc.SetReadDeadline(time.Now().Add(closeWait))
		for {
			if _, _, err := s.ReadMessage(); err != nil {
				break
			}
		}
	}
	_ = s.nc.Close()
}

// readAhead is what one read from the connection asks for when less is
// needed (a frame's header, a short payload): the frames a client sent
// together come in one system call instead of three or four each, and a
// parked connection's reader handles them without going back to the
// poller between them (Conn.readParked). What it read beyond p waits in
// early; a connection parks only with early empty, so an idle one holds
// none of it.
const readAhead = 4 << 10

var readAheadBufs = sync.Pool{New: func() any { b := make([]byte, readAhead); return &b }}

// read fills p from the early bytes, then the connection.
func (s *Socket) read(p []byte) error {
	n := copy(p, s.early)
	s.early = s.early[n:]
	if len(s.early) == 0 {
		s.early = nil
	}
	if n == len(p) {
		return nil
	}
	p = p[n:]
	if len(p) >= readAhead {
		_, err := io.ReadFull(s.nc, p)
		return err
	}
	bp := readAheadBufs.Get().(*[]byte)
	defer readAheadBufs.Put(bp)
	m, err := io.ReadAtLeast(s.nc, *bp, len(p))
	if err != nil { // m < len(p): what came is of no use
		return err
	}
	copy(p, (*bp)[:len(p)])
	if m > len(p) {
		s.early = append([]byte(nil), (*bp)[len(p):m]...)
	}
	return nil
}

// buffered reports whether bytes already read wait to be handled.
func (s *Socket) buffered() bool { return len(s.early) > 0 }

// frameHeader is one frame's header as read.
type frameHeader struct {
	fin  bool
	op   byte
	n    int64
	mask [4]byte
}

func (s *Socket) readHeader() (frameHeader, error) {
	b := s.rhdr[:2]
	if err := s.read(b); err != nil {
		return frameHeader{}, err
	}
	h := frameHeader{fin: b[0]&0x80 != 0, op: b[0] & 0x0F}
	if b[0]&0x70 != 0 {
		return h, s.fail(websocket.StatusProtocolError, "reserved bits set")
	}
	if b[1]&0x80 == 0 {
		return h, s.fail(websocket.StatusProtocolError, "unmasked client frame")
	}
	n, ext := int64(b[1]&0x7F), 0
	switch n {
	case 126:
		ext = 2
	case 127:
		ext = 8
	}
	b = s.rhdr[:ext+4]
	if err := s.read(b); err != nil {
		return h, err
	}
	switch ext {
	case 2:
		n = int64(binary.BigEndian.Uint16(b))
	case 8:
		u := binary.BigEndian.Uint64(b)
		if u > 1<<62 {
			return h, s.fail(websocket.StatusProtocolError, "frame length overflows")
		}
		n = int64(u)
	}
	h.n = n
	copy(h.mask[:], b[ext:])
	return h, nil
}

// fail closes the connection with status (a protocol error of the peer)
// and returns the error the reader ends with.
func (s *Socket) fail(status websocket.StatusCode, reason string) error {
	s.writeClose(status, reason)
	return fmt.Errorf("transport: websocket: %s: %w", reason, websocket.CloseError{Code: status, Reason: reason})
}

// ReadMessage reads the next data message, handling the control frames
// before it. A close frame from the peer is answered (unless ours went
// first) and returned as a websocket.CloseError.
func (s *Socket) ReadMessage() (websocket.MessageType, []byte, error) {
	bounded := false
	typ, msg, err := s.readFrames(false, &bounded)
	if bounded {
		s.restoreDeadline()
	}
	return typ, msg, err
}

// readParked is ReadMessage for a connection the poller woke (bytes
// came): the whole read is bounded by the Conn's ReadTimeout, and it
// returns errNoMessage after control frames read outside a message.
func (s *Socket) readParked() (websocket.MessageType, []byte, error) {
	bounded := s.boundMessage()
	typ, msg, err := s.readFrames(true, &bounded)
	if bounded {
		s.restoreDeadline()
	}
	return typ, msg, err
}

// readFrames reads frames up to a whole data message; parked: see
// readParked. *bounded says the read is bounded by msgTimeout (the caller
// restores the owner's deadline); a payload longer than one chunk bounds
// it (readPayload).
func (s *Socket) readFrames(parked bool, bounded *bool) (websocket.MessageType, []byte, error) {
	var (
		msg    []byte
		typ    byte
		inData bool
	)
	for {
		h, err := s.readHeader()
		if err != nil {
			return 0, nil, err
		}
		switch h.op {
		case opClose, opPing, opPong:
			if !h.fin || h.n > 125 {
				return 0, nil, s.fail(websocket.StatusProtocolError, "invalid control frame")
			}
			var p [125]byte
			if err := s.read(p[:h.n]); err != nil {
				return 0, nil, err
			}
			unmask(p[:h.n], h.mask)
			if err := s.control(h.op, p[:h.n]); err != nil {
				return 0, nil, err
			}
			if parked && !inData {
				return 0, nil, errNoMessage
			}
			continue
		case opText, opBin:
			if inData {
				return 0, nil, s.fail(websocket.StatusProtocolError, "new message inside a fragmented one")
			}
			inData, typ = true, h.op
		case opCont:
			if !inData {
				return 0, nil, s.fail(websocket.StatusProtocolError, "continuation without a message")
			}
		default:
			return 0, nil, s.fail(websocket.StatusProtocolError, fmt.Sprintf("unknown opcode %d", h.op))
		}
		if int64(len(msg))+h.n > s.limit {
			return 0, nil, s.fail(websocket.StatusMessageTooBig, fmt.Sprintf("read limited at %d bytes", s.limit))
		}
		if msg, err = s.readPayload(msg, h, bounded); err != nil {
			return 0, nil, err
		}
		if !h.fin {
			continue
		}
		if typ == opText && !utf8.Valid(msg) {
			return 0, nil, s.fail(websocket.StatusInvalidFramePayloadData, "invalid UTF-8")
		}
		if typ == opText {
			return websocket.MessageText, msg, nil
		}
		return websocket.MessageBinary, msg, nil
	}
}

// minChunk is the first part of a payload read at once; each next part
// is as long as the message so far.
const minChunk = 16 << 10

// readPayload appends h's payload to msg as it arrives, in parts that
// double the message (minChunk first), so that a peer that announces a
// long frame and sends little of it costs what it sent (at most twice,
// plus minChunk), not what it announced. A payload of more than one part
// is bounded by msgTimeout from its second part on, unless *bounded
// already: a frame stalled past its first part ends the read.
func (s *Socket) readPayload(msg []byte, h frameHeader, bounded *bool) ([]byte, error) {
	off := len(msg)
	for rest := h.n; rest > 0; {
		if len(msg) > off && !*bounded {
			*bounded = s.boundMessage()
		}
		part := min(rest, int64(max(minChunk, len(msg))))
		start := len(msg)
		msg = append(msg, make([]byte, part)...)
		if err := s.read(msg[start:]); err != nil {
			return nil, err
		}
		rest -= part
	}
	unmask(msg[off:], h.mask)
	return msg, nil
}

// control handles a control frame's payload p.
func (s *Socket) control(op byte, p []byte) error {
	switch op {
	case opPing:
		var buf [2 + 125]byte
		_ = s.Write(AppendFrame(buf[:0], opPong, p), closeWait, false)
	case opPong:
		if f := s.onPong.Load(); f != nil {
			(*f)()
		}
	case opClose:
		s.gotClose.Store(true)
		ce := websocket.CloseError{Code: websocket.StatusNoStatusRcvd}
		switch {
		case len(p) == 1:
			return s.fail(websocket.StatusProtocolError, "close payload of one byte")
		case len(p) >= 2:
			ce.Code, ce.Reason = websocket.StatusCode(binary.BigEndian.Uint16(p)), string(p[2:])
			if !validCloseCode(ce.Code) {
				return s.fail(websocket.StatusProtocolError, "invalid close code")
			}
			if !utf8.ValidString(ce.Reason) {
				return s.fail(websocket.StatusInvalidFramePayloadData, "invalid UTF-8 in the close reason")
			}
		}
		echo := ce.Code
		if echo == websocket.StatusNoStatusRcvd {
			echo = websocket.StatusNormalClosure
		}
		s.writeClose(echo, "")
		return fmt.Errorf("transport: websocket closed by the peer: %w", ce)
	}
	return nil
}

// validCloseCode: the codes a close frame may carry (RFC 6455 §7.4).
func validCloseCode(c websocket.StatusCode) bool {
	switch {
	case c >= 3000 && c <= 4999:
		return true
	case c < 1000 || c > 1014:
		return false
	}
	return c != 1004 && c != 1005 && c != 1006
}

// unmask XORs p with the client's mask key (p starts a frame's payload).
func unmask(p []byte, key [4]byte) {
	k := binary.LittleEndian.Uint32(key[:])
	k64 := uint64(k) | uint64(k)<<32
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)^k64)
		p = p[8:]
	}
	for i := range p {
		p[i] ^= key[i&3]
	}
}
