package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// Transports of the fan-out and idle benches.
const (
	transportSSE = "sse"
	transportWS  = "ws"
)

// benchMark occurs exactly once in every event the fan-out bench publishes
// (the generator's dialect R events carry it), and in nothing else either
// server sends: subscribers count deliveries by counting it, so both servers
// are counted by the same bytes. benchMarkD is the same for dialect D.
var (
	benchMark  = []byte(`"agent":"aepctl"`)
	benchMarkD = []byte(`"source":"agent:aepctl"`)
)

// markOf is the delivery marker of dialect d's generated events.
func markOf(d aep.Dialect) []byte {
	if d == aep.DialectD {
		return benchMarkD
	}
	return benchMark
}

// peer is a server the fan-out, latency and idle benches drive: the gateway
// or Centrifugo. Methods are safe for concurrent use.
type peer interface {
	// Server is the process measured.
	Server() *server
	// Subscribe opens one live subscriber over transport and returns once
	// the server has it subscribed (events published after that reach it).
	Subscribe(ctx context.Context, transport string) (subscriber, error)
	// Publish sends events (one JSON event each) and returns when the
	// server has accepted them.
	Publish(ctx context.Context, events [][]byte) error
}

// subscriber is one open subscription. Run reads until the stream ends or
// Close, calling count with the benchMark occurrences of each message it
// reads (from Run's goroutine only). Close ends Run; it is idempotent.
type subscriber interface {
	Run(count func(msg []byte))
	Close()
}

// sseSubscriber reads one text/event-stream response.
type sseSubscriber struct {
	body io.ReadCloser
	br   *bufio.Reader
}

// openSSESub sends req and waits for the 200 and, when firstData, for the
// first data: line too (Centrifugo's connect reply, sent once the
// subscriptions are made).
func openSSESub(hc *http.Client, req *http.Request, firstData bool) (*sseSubscriber, error) {
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: status %d: %.200s", req.URL.Path, resp.StatusCode, b)
	}
	s := &sseSubscriber{body: resp.Body, br: bufio.NewReaderSize(resp.Body, 16<<10)}
	for firstData {
		line, err := s.br.ReadSlice('\n')
		if err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("%s: before the first message: %w", req.URL.Path, err)
		}
		firstData = !bytes.HasPrefix(line, []byte("data:"))
	}
	return s, nil
}

func (s *sseSubscriber) Run(count func([]byte)) {
	for {
		line, err := s.br.ReadSlice('\n')
		if len(line) > 0 {
			count(line)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func (s *sseSubscriber) Close() { s.body.Close() }

// wsSubscriber reads one WebSocket; onMsg, when set, may answer a message
// (the gateway's pings) before it is counted.
type wsSubscriber struct {
	conn   *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	onMsg  func(ctx context.Context, conn *websocket.Conn, msg []byte)
}

func newWSSubscriber(conn *websocket.Conn, onMsg func(context.Context, *websocket.Conn, []byte)) *wsSubscriber {
	ctx, cancel := context.WithCancel(context.Background())
	return &wsSubscriber{conn: conn, ctx: ctx, cancel: cancel, onMsg: onMsg}
}

func (s *wsSubscriber) Run(count func([]byte)) {
	for {
		_, msg, err := s.conn.Read(s.ctx)
		if err != nil {
			return
		}
		if s.onMsg != nil {
			s.onMsg(s.ctx, s.conn, msg)
		}
		count(msg)
	}
}

func (s *wsSubscriber) Close() {
	s.cancel()
	s.conn.CloseNow()
}

// benchHTTPClient is a client with no bound on connections per host: every
// subscriber holds one.
func benchHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, DisableCompression: true,
		ResponseHeaderTimeout: 30 * time.Second, IdleConnTimeout: 30 * time.Second,
	}}
}

// gatewayPeer drives an aep-gateway through dialect R (POST /events,
// GET /stream, /socket) or, with dialect D, POST /aep/events, GET
// /aep/events?types=* and /aep (one subscription of types *).
type gatewayPeer struct {
	srv     *server
	c       *aepclient.Client
	dialect aep.Dialect // DialectUnknown means R
}

func newGatewayPeer(srv *server, token string) *gatewayPeer {
	return &gatewayPeer{srv: srv, c: &aepclient.Client{BaseURL: srv.url, Token: token, HTTP: benchHTTPClient()}}
}

func (g *gatewayPeer) Server() *server { return g.srv }

func (g *gatewayPeer) Subscribe(ctx context.Context, transport string) (subscriber, error) {
	if g.dialect == aep.DialectD {
		return g.subscribeD(ctx, transport)
	}
	if transport == transportWS {
		src, err := aepclient.OpenWSR(ctx, g.c, aepclient.StreamSpec{})
		if err != nil {
			return nil, err
		}
		return newWSSubscriber(src.Conn(), g.pong), nil
	}
	req, err := g.c.Request(context.WithoutCancel(ctx), http.MethodGet, "/stream", nil)
	if err != nil {
		return nil, err
	}
	return openSSESub(g.c.HTTP, req, false)
}

func (g *gatewayPeer) subscribeD(ctx context.Context, transport string) (subscriber, error) {
	if transport == transportWS {
		src, err := aepclient.OpenWSD(ctx, g.c, aepclient.StreamSpec{Dialect: aep.DialectD, DFilter: map[string][]string{"types": {"*"}}})
		if err != nil {
			return nil, err
		}
		return newWSSubscriber(src.Conn(), nil), nil
	}
	req, err := g.c.Request(context.WithoutCancel(ctx), http.MethodGet, "/aep/events?types=*", nil)
	if err != nil {
		return nil, err
	}
	return openSSESub(g.c.HTTP, req, false)
}

var pingPrefix = []byte(`{"type":"ping"`)

// pong answers the gateway's pings so a long idle run is not closed as a
// dead peer.
func (g *gatewayPeer) pong(ctx context.Context, conn *websocket.Conn, msg []byte) {
	if !bytes.HasPrefix(msg, pingPrefix) {
		return
	}
	out := append([]byte(`{"type":"pong"`), msg[len(pingPrefix):]...)
	_ = conn.Write(ctx, websocket.MessageText, out)
}

func (g *gatewayPeer) Publish(ctx context.Context, events [][]byte) error {
	body := bytes.Join(events, []byte("\n"))
	d := g.dialect
	if d == aep.DialectUnknown {
		d = aep.DialectR
	}
	res, err := g.c.Send(ctx, d, body, len(events))
	if err != nil {
		return err
	}
	if res.Accepted != len(events) {
		return fmt.Errorf("gateway accepted %d of %d events (status %d)", res.Accepted, len(events), res.Status)
	}
	return nil
}

// deliveryCounter sums the deliveries of every subscriber of a run and
// keeps each one's count, so the publisher can pace itself on the slowest.
type deliveryCounter struct {
	mark []byte // nil means benchMark
	n    atomic.Int64
	mu   sync.Mutex
	per  []*atomic.Int64
}

// counter returns the count function of a new subscriber.
func (d *deliveryCounter) counter() func([]byte) {
	c := new(atomic.Int64)
	d.mu.Lock()
	d.per = append(d.per, c)
	d.mu.Unlock()
	mark := d.mark
	if mark == nil {
		mark = benchMark
	}
	return func(msg []byte) {
		if k := bytes.Count(msg, mark); k > 0 {
			c.Add(int64(k))
			d.n.Add(int64(k))
		}
	}
}

// slowest returns the smallest count of any subscriber (0 with none).
func (d *deliveryCounter) slowest() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.per) == 0 {
		return 0
	}
	least := d.per[0].Load()
	for _, c := range d.per[1:] {
		least = min(least, c.Load())
	}
	return least
}
