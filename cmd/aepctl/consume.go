package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// ConsumeOptions configure Consume.
type ConsumeOptions struct {
	TailOptions
	Ack         bool              // acknowledge every printed event (reject those RejectTypes matches)
	RejectTypes *filtering.Filter // nil: reject nothing
	RejectCode  string            // code of the rejections (default task_error)
	AckBatch    int               // most acks per request; zero means 100
	AckInterval time.Duration     // longest an ack waits before it is sent; zero means 1s
}

// ConsumeSummary counts what Consume did.
type ConsumeSummary struct {
	Events      int // events printed (redelivered ones included)
	Redelivered int // event.redelivered notices
	DeadLetters int // event.dead_lettered notices
	Acks        aepclient.AckCounts
}

// settleWait bounds how long consume keeps the stream open after its last
// acks for the gateway to settle them.
const settleWait = 5 * time.Second

// settle keeps the stream open until the gateway has dead-lettered the
// rejected events it applied (an applied ack is settled when it is
// answered; a rejection is settled once its dead letter is written), or
// settleWait passed, or the answering node does not serve the stream:
// closing the stream commits what is settled, and a rejection not yet
// dead-lettered would be dead-lettered by the next stream. It does not wait
// for the stream's pending events to reach zero: the gateway may have
// handed more events after the last acks (up to the stream's
// max_ack_pending), which come again, marked, on the next stream.
func settle(c *aepclient.Client, id string, rejected int, errw io.Writer) {
	if rejected == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleWait)
	defer cancel()
	for {
		s, _, err := c.GetSubscription(ctx, id)
		if err != nil || !s.Streaming || int(s.DeadLettered) >= rejected {
			return
		}
		if !aepclient.SleepCtx(ctx, 50*time.Millisecond) {
			fmt.Fprintf(errw, "consume: %d of %d rejected events dead-lettered on the gateway after %v\n", s.DeadLettered, rejected, settleWait)
			return
		}
	}
}

// streamPath is the stream request of a consume: with a count, the
// stream's max_ack_pending is lowered to it (at most maxAckPending), so
// the gateway hands out no more than the consumer reads before it leaves.
func streamPath(id string, count int) string {
	p := aepclient.SubPath(id, "/stream")
	if count > 0 {
		p += "?max_ack_pending=" + strconv.Itoa(min(count, maxAckPending))
	}
	return p
}

// maxAckPending is the highest max_ack_pending the gateway takes.
const maxAckPending = 10000

// consumeQueue bounds the items the stream reader hands to the loop.
const consumeQueue = 64

// Consume streams a durable subscription (GET /aep/subscriptions/{id}/stream)
// and prints its events like Tail. With opt.Ack it acknowledges each event
// after printing it, in batches of opt.AckBatch or every opt.AckInterval,
// and sends what is pending before it returns, also after Ctrl-C: the acks
// go to the same node as the stream, which must still be open for them.
func Consume(ctx context.Context, c *aepclient.Client, id string, opt ConsumeOptions, out, errw io.Writer) (ConsumeSummary, error) {
	if opt.AckBatch <= 0 {
		opt.AckBatch = 100
	}
	if opt.AckInterval <= 0 {
		opt.AckInterval = time.Second
	}
	sum := ConsumeSummary{Acks: aepclient.AckCounts{}}
	parent := ctx
	if opt.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.Timeout)
		defer cancel()
	}
	// The stream lives on its own context: it must outlast ctx long enough
	// for the last acks.
	streamCtx, stopStream := context.WithCancel(context.Background())
	defer stopStream()
	src, err := aepclient.OpenSSESource(streamCtx, c, streamPath(id, opt.Count))
	if err != nil {
		return sum, fmt.Errorf("consume: %w", err)
	}
	defer src.Close()
	fmt.Fprintf(errw, "consume: stream of subscription %s open on %s\n", id, c.BaseURL)

	type next struct {
		it  aepclient.Item
		err error
	}
	items := make(chan next, consumeQueue)
	readerDone := make(chan struct{})
	go func() { // owned by Consume: stopped by stopStream, joined below
		defer close(readerDone)
		for {
			it, err := src.Next(streamCtx)
			select {
			case items <- next{it, err}:
			case <-streamCtx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() { stopStream(); <-readerDone }()

	p := &printer{w: out, format: opt.Output, width: opt.Width}
	var pending []aepclient.Ack
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rs, err := c.SendAcks(actx, id, pending)
		sum.Acks.Add(rs)
		for _, r := range rs {
			if r.Result != "applied" && r.Result != "recorded" {
				fmt.Fprintf(errw, "consume: ack of %s: %s %s\n", r.EventID, r.Result, r.Error)
			}
		}
		pending = pending[:0]
		return err
	}
	tick := time.NewTicker(opt.AckInterval)
	defer tick.Stop()
	var end error
loop:
	for opt.Count == 0 || sum.Events < opt.Count {
		select {
		case <-ctx.Done():
			end = tailEnd(parent, ctx, ctx.Err(), opt.TailOptions, sum.Events)
			break loop
		case <-tick.C:
			if err := flush(); err != nil {
				end = err
				break loop
			}
		case n := <-items:
			if n.err != nil {
				end = tailEnd(parent, ctx, n.err, opt.TailOptions, sum.Events)
				break loop
			}
			if n.it.Note != "" {
				fmt.Fprintf(errw, "consume: %s\n", n.it.Note)
				continue
			}
			var v eventView
			_ = json.Unmarshal(n.it.Data, &v)
			p.print(n.it, &v)
			switch {
			case v.Type == "event.redelivered":
				sum.Redelivered++
				continue
			case v.Type == "event.dead_lettered":
				sum.DeadLetters++
				continue
			case v.Type == "subscription.expired":
				continue // the stream ends next
			}
			sum.Events++
			if !opt.Ack || v.ID == "" {
				continue
			}
			a := aepclient.Ack{EventID: v.ID}
			if opt.RejectTypes != nil && opt.RejectTypes.Match(&aep.Attrs{Dialect: aep.DialectD, Type: v.Type, Source: v.Source, Session: v.SessionID}) {
				a = aepclient.Ack{EventID: v.ID, Reject: true, Code: opt.RejectCode, Message: "rejected by aepctl consume --reject-types"}
			}
			pending = append(pending, a)
			if len(pending) >= opt.AckBatch {
				if err := flush(); err != nil {
					end = err
					break loop
				}
			}
		}
	}
	if err := flush(); err != nil && end == nil {
		end = err
	}
	if opt.Ack && sum.Events > 0 && end == nil {
		settle(c, id, sum.Acks["rejected"], errw)
	}
	fmt.Fprintf(errw, "consume: %d events, %d redelivered, %d dead-lettered", sum.Events, sum.Redelivered, sum.DeadLetters)
	if opt.Ack {
		fmt.Fprintf(errw, "; acks: %s", sum.Acks)
	}
	fmt.Fprintln(errw)
	if end == nil && (sum.Acks["closed"] > 0 || sum.Acks["invalid"] > 0) {
		end = errors.New("some acks were not applied")
	}
	return sum, end
}
