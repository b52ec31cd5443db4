package server

import (
	"context"

	"github.com/weirhq/weir/store"
)

// InstrumentStore wraps s so that a Server whose engine uses the wrapper
// counts run outcomes in /metrics: runs created, completed, failed and
// cancelled by any engine on this process (the runs API and the SDK alike).
// Build the engine on the returned store:
//
//	st := server.InstrumentStore(sqlite)
//	e, _ := weir.New(st, nil)
//	srv := server.New(e, nil)
//
// Without it, /metrics counts only the runs started through the runs API.
func InstrumentStore(s store.Store) store.Store {
	if is, ok := s.(*instrumentedStore); ok {
		return is
	}
	return &instrumentedStore{Full: store.Capable(s), runs: &runCounters{}}
}

// instrumentedStore counts run outcomes as the engine records them. It
// forwards every capability of the store it wraps (store.Capable).
type instrumentedStore struct {
	store.Full
	runs *runCounters
}

// Unwrap returns the wrapped store.
func (s *instrumentedStore) Unwrap() store.Store { return s.Full }

func (s *instrumentedStore) CreateRun(ctx context.Context, p *store.CreateRunParams) (*store.Run, bool, error) {
	r, created, err := s.Full.CreateRun(ctx, p)
	if err == nil && created {
		s.runs.started.Add(1)
	}
	return r, created, err
}

func (s *instrumentedStore) Advance(ctx context.Context, p *store.AdvanceParams) error {
	err := s.Full.Advance(ctx, p)
	if err == nil {
		for i := range p.Events {
			s.runs.event(p.Events[i].Type, 1)
		}
		switch p.Status {
		case store.RunCompleted:
			s.runs.completed.Add(1)
		case store.RunFailed:
			s.runs.failed.Add(1)
		case store.RunCancelled:
			s.runs.cancelled.Add(1)
		}
	}
	return err
}

// OpenAppend forwards store.StepAppender, counting the start's events.
func (s *instrumentedStore) OpenAppend(ctx context.Context, p *store.OpenAppendParams) (*store.OpenAppendResult, error) {
	sa, ok := store.StepAppenderOf(s.Full)
	if !ok {
		return nil, store.ErrUnsupported
	}
	res, err := sa.OpenAppend(ctx, p)
	if err == nil && p.Start != nil {
		for i := range p.Start.Events {
			s.runs.event(p.Start.Events[i].Type, 1)
		}
	}
	return res, err
}

func (s *instrumentedStore) CreateHook(ctx context.Context, p *store.HookParams) error {
	err := s.Full.CreateHook(ctx, p)
	if err == nil {
		s.runs.event(store.EventHookCreated, 1)
	}
	return err
}

func (s *instrumentedStore) DisposeHook(ctx context.Context, p *store.HookParams) error {
	err := s.Full.DisposeHook(ctx, p)
	if err == nil {
		s.runs.event(store.EventHookDisposed, 1)
	}
	return err
}

func (s *instrumentedStore) DeliverHook(ctx context.Context, p *store.DeliverHookParams) (*store.HookDelivery, error) {
	res, err := s.Full.DeliverHook(ctx, p)
	switch {
	case err != nil:
		s.runs.hookRefused.Add(1)
	case !res.Duplicate:
		s.runs.event(store.EventHookReceived, 1)
	}
	return res, err
}

func (s *instrumentedStore) SendMessage(ctx context.Context, p *store.SendMessageParams) (*store.MessageSent, error) {
	res, err := s.Full.SendMessage(ctx, p)
	switch {
	case err != nil:
		s.runs.messageRefused.Add(1)
	case !res.Duplicate:
		s.runs.event(store.EventMessageReceived, 1)
	}
	return res, err
}
