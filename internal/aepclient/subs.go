package aepclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Subscription is a durable subscription as GET /aep/subscriptions/{id}
// shows it (the list and the create answer carry the first fields only).
type Subscription struct {
	ID            string           `json:"subscription_id"`
	Filter        json.RawMessage  `json:"filter"`
	DeliveryMode  string           `json:"delivery_mode"`
	ExpiresAt     *time.Time       `json:"expires_at"`
	CreatedAt     time.Time        `json:"created_at"`
	AckTimeoutMS  int64            `json:"ack_timeout_ms"`
	MaxAttempts   int              `json:"max_attempts"`
	MaxAckPending int              `json:"max_ack_pending"`
	Cursor        string           `json:"cursor,omitempty"`
	Committed     []PartitionState `json:"committed,omitempty"`
	Lag           *int64           `json:"lag,omitempty"`
	Streaming     bool             `json:"streaming"`
	PendingAcks   int              `json:"pending_acks"`
	Redeliveries  uint64           `json:"redeliveries"`
	DeadLettered  uint64           `json:"dead_lettered"`
	Acked         uint64           `json:"acked"`
	Handed        uint64           `json:"handed"`
}

// PartitionState is one partition's committed offset, end and lag.
type PartitionState struct {
	Partition int32 `json:"partition"`
	Committed int64 `json:"committed"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
}

// SubscriptionRequest is the body of POST /aep/subscriptions: the seed 000
// filter members plus the durable options.
type SubscriptionRequest struct {
	Types          []string `json:"types,omitempty"`
	Source         []string `json:"source,omitempty"`
	Target         []string `json:"target,omitempty"`
	Topic          []string `json:"topic,omitempty"`
	SessionID      []string `json:"session_id,omitempty"`
	ConversationID []string `json:"conversation_id,omitempty"`
	TaskID         []string `json:"task_id,omitempty"`
	FromCursor     string   `json:"from_cursor,omitempty"`
	ExpiresAt      string   `json:"expires_at,omitempty"`
	AckTimeoutMS   int64    `json:"ack_timeout_ms,omitempty"`
	MaxAttempts    int      `json:"max_attempts,omitempty"`
	MaxAckPending  int      `json:"max_ack_pending,omitempty"`
}

func SubPath(id string, rest string) string {
	return "/aep/subscriptions/" + url.PathEscape(id) + rest
}

// CreateSubscription posts req; raw is the gateway's answer as sent.
func (c *Client) CreateSubscription(ctx context.Context, req SubscriptionRequest) (sub Subscription, raw json.RawMessage, err error) {
	if err = c.DoJSON(ctx, http.MethodPost, "/aep/subscriptions", req, &raw); err == nil {
		err = json.Unmarshal(raw, &sub)
	}
	return sub, raw, err
}

// ListSubscriptions returns the tenant's subscriptions.
func (c *Client) ListSubscriptions(ctx context.Context) (subs []Subscription, raw json.RawMessage, err error) {
	if err = c.DoJSON(ctx, http.MethodGet, "/aep/subscriptions", nil, &raw); err != nil {
		return nil, nil, err
	}
	var l struct {
		Subscriptions []Subscription `json:"subscriptions"`
	}
	err = json.Unmarshal(raw, &l)
	return l.Subscriptions, raw, err
}

// GetSubscription returns one subscription with its lag and, when a stream
// of it is open on the answering node, its acknowledgement counters.
func (c *Client) GetSubscription(ctx context.Context, id string) (sub Subscription, raw json.RawMessage, err error) {
	if err = c.DoJSON(ctx, http.MethodGet, SubPath(id, ""), nil, &raw); err == nil {
		err = json.Unmarshal(raw, &sub)
	}
	return sub, raw, err
}

// DeleteSubscription deletes one subscription and its consumer group.
func (c *Client) DeleteSubscription(ctx context.Context, id string) error {
	return c.DoJSON(ctx, http.MethodDelete, SubPath(id, ""), nil, nil)
}

// Ack is one acknowledgement (or, with Reject, a rejection) of an event.
type Ack struct {
	EventID   string
	Reject    bool
	Code      string // rejection code (default task_error)
	Message   string
	Retryable bool // a retryable rejection: redelivered after the backoff, dead-lettered when out of attempts
}

// AckResult is the gateway's answer for one ack: applied, rejected, retry
// (a retryable rejection: redelivered), unknown, recorded (durable; applied by the stream's holder elsewhere),
// closed (older gateways) or invalid.
type AckResult struct {
	EventID string          `json:"acknowledged_event_id"`
	Result  string          `json:"result"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// MaxAcksPerRequest is the gateway's limit of envelopes in one acks body.
const MaxAcksPerRequest = 10000

// ErrNoStreamHere is a 409 from the acks endpoint.
var ErrNoStreamHere = errors.New("no stream of this subscription is open on the node that answered (acks go to the node serving the stream)")

// SendAcks posts acks as event.acknowledged / event.rejected envelopes
// (docs/delivery-durable-d.md), in requests of at most 10,000.
func (c *Client) SendAcks(ctx context.Context, id string, acks []Ack) ([]AckResult, error) {
	var all []AckResult
	for len(acks) > 0 {
		n := min(len(acks), MaxAcksPerRequest)
		envs := make([]DEnvelope, n)
		for i, a := range acks[:n] {
			payload := map[string]any{"acknowledged_event_id": a.EventID}
			typ := "event.acknowledged"
			if a.Reject {
				typ = "event.rejected"
				code := a.Code
				if code == "" {
					code = "task_error"
				}
				payload["error"] = map[string]any{"code": code, "message": a.Message, "retryable": a.Retryable}
			}
			envs[i] = NewDEnvelope(typ, "", payload)
		}
		var ans struct {
			Results []AckResult `json:"results"`
		}
		if err := c.DoJSON(ctx, http.MethodPost, SubPath(id, "/acks"), envs, &ans); err != nil {
			if ae := (*APIError)(nil); errors.As(err, &ae) && ae.Status == http.StatusConflict {
				return all, fmt.Errorf("%w: %w", ErrNoStreamHere, err)
			}
			return all, err
		}
		all = append(all, ans.Results...)
		acks = acks[n:]
	}
	return all, nil
}

// AckCounts sums results by kind.
type AckCounts map[string]int

func (a AckCounts) Add(rs []AckResult) {
	for _, r := range rs {
		a[r.Result]++
	}
}

func (a AckCounts) String() string {
	s := fmt.Sprintf("applied %d, rejected %d, unknown %d, closed %d, invalid %d",
		a["applied"], a["rejected"], a["unknown"], a["closed"], a["invalid"])
	for _, k := range []string{"retry", "recorded"} {
		if a[k] > 0 {
			s += fmt.Sprintf(", %s %d", k, a[k])
		}
	}
	return s
}
