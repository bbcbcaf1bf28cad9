// Package connlimit bounds the connections a listener hands out: a global
// cap and a cap per client address, and an accept loop that outlives
// transient accept errors (EMFILE, ENFILE, ECONNABORTED) by backing off
// instead of returning them.
//
// A Listener is safe for concurrent use. The goroutines it starts (one per
// refusal being answered, at most Config.MaxRefusing at a time) are owned
// by the Listener: Close stops accepting and waits for them.
package connlimit

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Reasons passed to Config.OnRefuse.
const (
	ReasonGlobal  = "max-connections"
	ReasonPerHost = "max-connections-per-ip"
)

// Config bounds a Listener. Zero fields mean "no limit" or the documented
// default.
type Config struct {
	// Max is the most connections open at once. Zero means unbounded.
	Max int
	// MaxPerHost is the most connections open at once from one client IP
	// address (IPv6: one /64 prefix). Zero means unbounded.
	MaxPerHost int
	// PerHostExempt are the addresses MaxPerHost does not apply to: the
	// trusted proxies (an Ingress controller, a load balancer) through
	// which many clients arrive from a few addresses. Their connections
	// still count toward Max.
	PerHostExempt []netip.Prefix
	// Refusal, when set, gives the bytes written to a connection refused
	// for reason before it is closed (for HTTP, a complete 503 response).
	// They are written with a one-second deadline from a bounded set of
	// goroutines; when all are busy the connection is closed without them.
	Refusal func(reason string) []byte
	// MaxRefusing bounds the refusals being answered at once. Zero means 64.
	MaxRefusing int
	// OnRefuse, when set, is called with the reason of every refusal.
	OnRefuse func(reason string)
	// OnAcceptError, when set, is called with every accept error that the
	// listener backs off from (it is not called for a closed listener).
	OnAcceptError func(err error, backoff time.Duration)
}

// Listener is a net.Listener that enforces Config.
type Listener struct {
	net.Listener
	cfg Config

	mu     sync.Mutex
	open   int            // guarded by mu
	byHost map[string]int // guarded by mu

	refusing chan struct{} // semaphore of refusal goroutines
	wg       sync.WaitGroup
	quit     chan struct{}
	stopOnce sync.Once
}

var _ net.Listener = (*Listener)(nil)

// New wraps ln.
func New(ln net.Listener, cfg Config) *Listener {
	if cfg.MaxRefusing <= 0 {
		cfg.MaxRefusing = 64
	}
	return &Listener{
		Listener: ln, cfg: cfg, byHost: map[string]int{},
		refusing: make(chan struct{}, cfg.MaxRefusing), quit: make(chan struct{}),
	}
}

const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = time.Second
)

// Accept returns the next connection within the caps. Connections over a
// cap are refused (answered with Config.Refusal when set, then closed) and
// Accept goes on waiting. An accept error other than a closed listener is
// backed off from (5 ms doubling to 1 s) and accepting resumes; Accept
// returns an error only once the listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	backoff := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.closed() {
				return nil, err
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			if l.cfg.OnAcceptError != nil {
				l.cfg.OnAcceptError(err, backoff)
			}
			select {
			case <-time.After(backoff):
				continue
			case <-l.quit:
				return nil, net.ErrClosed
			}
		}
		backoff = 0
		host := hostOf(c.RemoteAddr())
		if l.exempt(c.RemoteAddr()) {
			host = "" // counted toward Max only
		}
		if reason := l.admit(host); reason != "" {
			l.refuse(c, reason)
			continue
		}
		return &conn{Conn: c, l: l, host: host}, nil
	}
}

// exempt reports whether a is in Config.PerHostExempt.
func (l *Listener) exempt(a net.Addr) bool {
	if len(l.cfg.PerHostExempt) == 0 {
		return false
	}
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	for _, p := range l.cfg.PerHostExempt {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// admit counts a new connection from host (the empty host: one exempt
// from MaxPerHost), or returns why it may not open.
func (l *Listener) admit(host string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.Max > 0 && l.open >= l.cfg.Max {
		return ReasonGlobal
	}
	if host == "" {
		l.open++
		return ""
	}
	if l.cfg.MaxPerHost > 0 && l.byHost[host] >= l.cfg.MaxPerHost {
		return ReasonPerHost
	}
	l.open++
	l.byHost[host]++
	return ""
}

func (l *Listener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if host == "" {
		return
	}
	if n := l.byHost[host] - 1; n > 0 {
		l.byHost[host] = n
	} else {
		delete(l.byHost, host)
	}
}

// Open is the number of connections open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *Listener) refuse(c net.Conn, reason string) {
	if l.cfg.OnRefuse != nil {
		l.cfg.OnRefuse(reason)
	}
	var msg []byte
	if l.cfg.Refusal != nil {
		msg = l.cfg.Refusal(reason)
	}
	if len(msg) == 0 {
		_ = c.Close()
		return
	}
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close() // every refusal slot is busy: no answer, just close
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() { <-l.refusing }()
		answer(c, msg)
	}()
}

// answer waits for the client's first bytes (an HTTP client that gets an
// answer before it sent its request takes it for a broken connection),
// writes msg, half-closes, and drains what the client sent for a moment,
// so that the client reads the answer instead of a reset. The whole
// exchange is bounded by one second.
func answer(c net.Conn, msg []byte) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 512)
	if _, err := c.Read(buf); err != nil {
		return
	}
	if _, err := c.Write(msg); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

func (l *Listener) closed() bool {
	select {
	case <-l.quit:
		return true
	default:
		return false
	}
}

// Close stops accepting and waits for the refusals being answered (each is
// bounded by its one-second deadline). Connections already handed out stay
// open: they are their users' to close. Idempotent.
func (l *Listener) Close() error {
	var err error
	l.stopOnce.Do(func() {
		close(l.quit)
		err = l.Listener.Close()
	})
	l.wg.Wait()
	return err
}

// hostOf is the key a connection is counted under: its IPv4 address, or
// the /64 prefix of its IPv6 address (one host commonly holds a whole /64).
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ta.IP.To4() == nil && len(ta.IP) == net.IPv6len {
			return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
		}
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// conn gives its slot back when closed (once, however often Close is
// called): also after net/http handed it over (Hijack), so a parked stream
// or a WebSocket counts against the caps until it is really closed.
type conn struct {
	net.Conn
	l        *Listener
	host     string
	rmu      sync.Once
	closeErr error
}

func (c *conn) Close() error {
	c.rmu.Do(func() {
		c.closeErr = c.Conn.Close()
		c.l.release(c.host)
	})
	return c.closeErr
}

// errNoSyscallConn answers SyscallConn on a connection without a descriptor.
var errNoSyscallConn = errors.New("connlimit: connection has no descriptor")

// SyscallConn exposes the descriptor of the connection (internal/netpoll
// watches parked streams through it); a hijacked connection stays counted
// until its Close.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNoSyscallConn
}

// CloseWrite half-closes a TCP connection (net/http uses it when it can).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
