package main

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/rs/zerolog"
)

func TestLifecycleStopsInReverseOrderAndJoinsErrors(t *testing.T) {
	var got []string
	l := &lifecycle{log: zerolog.New(io.Discard)}
	boom := errors.New("boom")
	l.adds("broker", func() { got = append(got, "broker") })
	l.add("producer", func(context.Context) error { got = append(got, "producer"); return boom })
	l.add("http", func(ctx context.Context) error { got = append(got, "http"); return ctx.Err() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // out of time: every component is still stopped
	err := l.stop(ctx)
	if want := []string{"http", "producer", "broker"}; !slices.Equal(got, want) {
		t.Fatalf("stop order %v, want %v", got, want)
	}
	if !errors.Is(err, boom) || !errors.Is(err, context.Canceled) {
		t.Fatalf("stop error %v, want both failures joined", err)
	}
	if err := l.stop(context.Background()); err != nil || len(got) != 3 {
		t.Fatalf("second stop: %v, %v (must be a no-op)", err, got)
	}
}
