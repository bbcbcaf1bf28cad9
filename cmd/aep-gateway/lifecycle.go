package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"
)

// lifecycle is the process's components in the order they started; stop
// ends them in reverse order under one deadline.
type lifecycle struct {
	log   zerolog.Logger
	parts []part
}

type part struct {
	name string
	stop func(context.Context) error
}

// add registers a started component and how to stop it. stop must be
// idempotent and return once ctx ends.
func (l *lifecycle) add(name string, stop func(context.Context) error) {
	l.parts = append(l.parts, part{name: name, stop: stop})
}

// adds registers a component whose stop takes no deadline.
func (l *lifecycle) adds(name string, stop func()) {
	l.add(name, func(context.Context) error { stop(); return nil })
}

// stop stops every component, the last started first, all within ctx; a
// component that fails or runs out of time does not keep the others from
// stopping. The errors of all are joined.
func (l *lifecycle) stop(ctx context.Context) error {
	var errs []error
	for i := len(l.parts) - 1; i >= 0; i-- {
		p := l.parts[i]
		if err := p.stop(ctx); err != nil {
			l.log.Warn().Err(err).Str("component", p.name).Msg("stop")
			errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
			continue
		}
		l.log.Debug().Str("component", p.name).Msg("stopped")
	}
	l.parts = nil
	return errors.Join(errs...)
}
