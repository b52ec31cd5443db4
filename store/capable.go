package store

// The forwarding methods of capable: one per method of each optional
// capability (store.go, world.go).

import (
	"context"
	"fmt"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/world"
)

// CreateHook is Hooks.CreateHook, or ErrUnsupported.
func (c *capable) CreateHook(ctx context.Context, p *HookParams) error {
	if c.hooks == nil {
		return unsupported("hooks")
	}
	return c.hooks.CreateHook(ctx, p)
}

// DisposeHook is Hooks.DisposeHook, or ErrUnsupported.
func (c *capable) DisposeHook(ctx context.Context, p *HookParams) error {
	if c.hooks == nil {
		return unsupported("hooks")
	}
	return c.hooks.DisposeHook(ctx, p)
}

// DeliverHook is Hooks.DeliverHook, or ErrUnsupported.
func (c *capable) DeliverHook(ctx context.Context, p *DeliverHookParams) (*HookDelivery, error) {
	if c.hooks == nil {
		return nil, unsupported("hooks")
	}
	return c.hooks.DeliverHook(ctx, p)
}

// GetHook is Hooks.GetHook, or ErrUnsupported.
func (c *capable) GetHook(ctx context.Context, token string) (*HookInfo, error) {
	if c.hooks == nil {
		return nil, unsupported("hooks")
	}
	return c.hooks.GetHook(ctx, token)
}

// ListHooks is Hooks.ListHooks, or ErrUnsupported.
func (c *capable) ListHooks(ctx context.Context, runID string) ([]*HookInfo, error) {
	if c.hooks == nil {
		return nil, unsupported("hooks")
	}
	return c.hooks.ListHooks(ctx, runID)
}

// SendMessage is Messages.SendMessage, or ErrUnsupported.
func (c *capable) SendMessage(ctx context.Context, p *SendMessageParams) (*MessageSent, error) {
	if c.msgs == nil {
		return nil, unsupported("messages")
	}
	return c.msgs.SendMessage(ctx, p)
}

// GetRunEvent is Messages.GetRunEvent, or ErrUnsupported.
func (c *capable) GetRunEvent(ctx context.Context, runID, key string) (*RunEvent, error) {
	if c.msgs == nil {
		return nil, unsupported("messages")
	}
	return c.msgs.GetRunEvent(ctx, runID, key)
}

// ListRunEvents is Messages.ListRunEvents, or ErrUnsupported.
func (c *capable) ListRunEvents(ctx context.Context, runID string) ([]*RunEvent, error) {
	if c.msgs == nil {
		return nil, unsupported("messages")
	}
	return c.msgs.ListRunEvents(ctx, runID)
}

// ListRunEventsPage is Messages.ListRunEventsPage, or ErrUnsupported.
func (c *capable) ListRunEventsPage(ctx context.Context, p *ListRunEventsParams) (*RunEventPage, error) {
	if c.msgs == nil {
		return nil, unsupported("messages")
	}
	return c.msgs.ListRunEventsPage(ctx, p)
}

// CountMessages is Messages.CountMessages, or ErrUnsupported.
func (c *capable) CountMessages(ctx context.Context, runID string) (*MessageCounts, error) {
	if c.msgs == nil {
		return nil, unsupported("messages")
	}
	return c.msgs.CountMessages(ctx, runID)
}

// CreateStream is Standalone.CreateStream, or ErrUnsupported.
func (c *capable) CreateStream(ctx context.Context, p *CreateStreamParams) (info *StreamInfo, created bool, err error) {
	if c.standalone == nil {
		return nil, false, unsupported("standalone streams")
	}
	return c.standalone.CreateStream(ctx, p)
}

// ListStandaloneStreams is Standalone.ListStandaloneStreams, or ErrUnsupported.
func (c *capable) ListStandaloneStreams(ctx context.Context, p *ListStandaloneParams) (*StreamList, error) {
	if c.standalone == nil {
		return nil, unsupported("standalone streams")
	}
	return c.standalone.ListStandaloneStreams(ctx, p)
}

// DeleteStream is Standalone.DeleteStream, or ErrUnsupported.
func (c *capable) DeleteStream(ctx context.Context, p *DeleteStreamParams) (DeleteResult, error) {
	if c.standalone == nil {
		return 0, unsupported("standalone streams")
	}
	return c.standalone.DeleteStream(ctx, p)
}

// TouchStream is Standalone.TouchStream, or ErrUnsupported.
func (c *capable) TouchStream(ctx context.Context, p *TouchStreamParams) error {
	if c.standalone == nil {
		return unsupported("standalone streams")
	}
	return c.standalone.TouchStream(ctx, p)
}

// PurgeRuns is Purger.PurgeRuns, or ErrUnsupported.
func (c *capable) PurgeRuns(ctx context.Context, p *PurgeRunsParams) (int, error) {
	if c.purger == nil {
		return 0, unsupported("purging runs")
	}
	return c.purger.PurgeRuns(ctx, p)
}

// WorldEvent is WorldStore.WorldEvent, or ErrUnsupported.
func (c *capable) WorldEvent(ctx context.Context, p *WorldEventParams) (*WorldEventResult, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldEvent(ctx, p)
}

// WorldRun is WorldStore.WorldRun, or ErrUnsupported.
func (c *capable) WorldRun(ctx context.Context, id string) (*world.Run, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldRun(ctx, id)
}

// WorldRunHead is WorldStore.WorldRunHead, or ErrUnsupported.
func (c *capable) WorldRunHead(ctx context.Context, id string) (*world.Run, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldRunHead(ctx, id)
}

// WorldRuns is WorldStore.WorldRuns, or ErrUnsupported.
func (c *capable) WorldRuns(ctx context.Context, p *WorldListParams) (*WorldPage[world.Run], error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldRuns(ctx, p)
}

// WorldEvents is WorldStore.WorldEvents, or ErrUnsupported.
func (c *capable) WorldEvents(ctx context.Context, p *WorldListParams) (*WorldPage[world.Event], error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldEvents(ctx, p)
}

// WorldEventByID is WorldStore.WorldEventByID, or ErrUnsupported.
func (c *capable) WorldEventByID(ctx context.Context, runID, eventID string) (*world.Event, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldEventByID(ctx, runID, eventID)
}

// WorldStep is WorldStore.WorldStep, or ErrUnsupported.
func (c *capable) WorldStep(ctx context.Context, runID, stepID string) (*world.Step, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldStep(ctx, runID, stepID)
}

// WorldSteps is WorldStore.WorldSteps, or ErrUnsupported.
func (c *capable) WorldSteps(ctx context.Context, p *WorldListParams) (*WorldPage[world.Step], error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldSteps(ctx, p)
}

// WorldHook is WorldStore.WorldHook, or ErrUnsupported.
func (c *capable) WorldHook(ctx context.Context, hookID string) (*world.Hook, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldHook(ctx, hookID)
}

// WorldHookByToken is WorldStore.WorldHookByToken, or ErrUnsupported.
func (c *capable) WorldHookByToken(ctx context.Context, token string) (*world.Hook, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldHookByToken(ctx, token)
}

// WorldHooks is WorldStore.WorldHooks, or ErrUnsupported.
func (c *capable) WorldHooks(ctx context.Context, p *WorldListParams) (*WorldPage[world.Hook], error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldHooks(ctx, p)
}

// WorldOpenStream is WorldStore.WorldOpenStream, or ErrUnsupported.
func (c *capable) WorldOpenStream(ctx context.Context, runID, name string) (*StreamInfo, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldOpenStream(ctx, runID, name)
}

// WorldStream is WorldStore.WorldStream, or ErrUnsupported.
func (c *capable) WorldStream(ctx context.Context, name string) (*StreamInfo, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldStream(ctx, name)
}

// WorldStreams is WorldStore.WorldStreams, or ErrUnsupported.
func (c *capable) WorldStreams(ctx context.Context, runID string) ([]string, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.WorldStreams(ctx, runID)
}

// WorldCloseStream is WorldStore.WorldCloseStream, or ErrUnsupported.
func (c *capable) WorldCloseStream(ctx context.Context, p *WorldCloseParams) (closed bool, err error) {
	if c.world == nil {
		return false, unsupported("the World")
	}
	return c.world.WorldCloseStream(ctx, p)
}

// Enqueue is WorldStore.Enqueue, or ErrUnsupported.
func (c *capable) Enqueue(ctx context.Context, p *EnqueueParams) (msg *Message, created bool, err error) {
	if c.world == nil {
		return nil, false, unsupported("the World")
	}
	return c.world.Enqueue(ctx, p)
}

// ClaimMessages is WorldStore.ClaimMessages, or ErrUnsupported.
func (c *capable) ClaimMessages(ctx context.Context, p *ClaimMessagesParams) ([]*Message, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.ClaimMessages(ctx, p)
}

// SettleMessage is WorldStore.SettleMessage, or ErrUnsupported.
func (c *capable) SettleMessage(ctx context.Context, p *SettleParams) error {
	if c.world == nil {
		return unsupported("the World")
	}
	return c.world.SettleMessage(ctx, p)
}

// CoalesceMessages is WorldStore.CoalesceMessages, or ErrUnsupported.
func (c *capable) CoalesceMessages(ctx context.Context, p *CoalesceParams) (int, error) {
	if c.world == nil {
		return 0, unsupported("the World")
	}
	return c.world.CoalesceMessages(ctx, p)
}

// RenewMessage is WorldStore.RenewMessage, or ErrUnsupported.
func (c *capable) RenewMessage(ctx context.Context, p *RenewMessageParams) error {
	if c.world == nil {
		return unsupported("the World")
	}
	return c.world.RenewMessage(ctx, p)
}

// Messages is WorldStore.Messages, or ErrUnsupported.
func (c *capable) Messages(ctx context.Context, p *MessagesParams) ([]*Message, error) {
	if c.world == nil {
		return nil, unsupported("the World")
	}
	return c.world.Messages(ctx, p)
}

// RedeliverMessage is WorldStore.RedeliverMessage, or ErrUnsupported.
func (c *capable) RedeliverMessage(ctx context.Context, id string) error {
	if c.world == nil {
		return unsupported("the World")
	}
	return c.world.RedeliverMessage(ctx, id)
}

// NextMessageDue is WorldStore.NextMessageDue, or ErrUnsupported.
func (c *capable) NextMessageDue(ctx context.Context) (time.Time, error) {
	if c.world == nil {
		return time.Time{}, unsupported("the World")
	}
	return c.world.NextMessageDue(ctx)
}

// WatchMessages is WorldStore.WatchMessages, or ErrUnsupported.
func (c *capable) WatchMessages(ctx context.Context) (<-chan struct{}, func()) {
	if c.world == nil {
		return nil, func() {}
	}
	return c.world.WatchMessages(ctx)
}

// ErrUnsupported is returned by a capability the store does not have
// (Capable): the operation needs Hooks, Messages, Standalone, Purger or
// WorldStore.
var ErrUnsupported = fmt.Errorf("not supported by this store")

func unsupported(what string) error { return fmt.Errorf("%w: it has no %s", ErrUnsupported, what) }

// Capable returns s with every capability: s itself when it has them all
// (Full), otherwise s with the capabilities it has, discovered by interface
// assertion, and those it lacks answering ErrUnsupported. The engine and
// the server hold their store through it, so a backend implements the core
// and whichever capabilities it offers; a wrapper of a store (one that
// counts or injects faults) wraps the Full this returns and so forwards
// every capability.
func Capable(s Store) Full {
	if f, ok := s.(Full); ok {
		return f
	}
	c := &capable{Store: s}
	c.hooks, _ = s.(Hooks)
	c.msgs, _ = s.(Messages)
	c.standalone, _ = s.(Standalone)
	c.purger, _ = s.(Purger)
	c.world, _ = s.(WorldStore)
	c.limits, _ = s.(Limits)
	c.schedules, _ = s.(Schedules)
	c.forks, _ = s.(Forks)
	c.within, _ = s.(RunsWithin)
	return c
}

// capable is a Store with the capabilities it lacks answering
// ErrUnsupported.
type capable struct {
	Store
	hooks      Hooks
	msgs       Messages
	standalone Standalone
	purger     Purger
	world      WorldStore
	limits     Limits
	schedules  Schedules
	forks      Forks
	within     RunsWithin
}

// GetRunWithin is RunsWithin.GetRunWithin; a store without it reads the
// whole run and says its size.
func (c *capable) GetRunWithin(ctx context.Context, id string, max int64) (*Run, int64, error) {
	if c.within != nil {
		return c.within.GetRunWithin(ctx, id, max)
	}
	r, err := c.GetRun(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	return r, int64(len(r.Input) + len(r.Output) + len(r.Error)), nil
}

// ForkRun is Forks.ForkRun, or ErrUnsupported.
func (c *capable) ForkRun(ctx context.Context, p *ForkRunParams) (*Run, bool, error) {
	if c.forks == nil {
		return nil, false, unsupported("forks")
	}
	return c.forks.ForkRun(ctx, p)
}

// ResumeRun is Forks.ResumeRun, or ErrUnsupported.
func (c *capable) ResumeRun(ctx context.Context, p *ResumeRunParams) (*Run, error) {
	if c.forks == nil {
		return nil, unsupported("forks")
	}
	return c.forks.ResumeRun(ctx, p)
}

// SetSchedule is Schedules.SetSchedule, or ErrUnsupported.
func (c *capable) SetSchedule(ctx context.Context, p *SetScheduleParams) (*Schedule, error) {
	if c.schedules == nil {
		return nil, unsupported("schedules")
	}
	return c.schedules.SetSchedule(ctx, p)
}

// GetSchedule is Schedules.GetSchedule, or ErrUnsupported.
func (c *capable) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	if c.schedules == nil {
		return nil, unsupported("schedules")
	}
	return c.schedules.GetSchedule(ctx, name)
}

// ListSchedules is Schedules.ListSchedules, or ErrUnsupported.
func (c *capable) ListSchedules(ctx context.Context, p *ListSchedulesParams) (*SchedulePage, error) {
	if c.schedules == nil {
		return nil, unsupported("schedules")
	}
	return c.schedules.ListSchedules(ctx, p)
}

// DeleteSchedule is Schedules.DeleteSchedule, or ErrUnsupported.
func (c *capable) DeleteSchedule(ctx context.Context, name string) error {
	if c.schedules == nil {
		return unsupported("schedules")
	}
	return c.schedules.DeleteSchedule(ctx, name)
}

// ClaimSchedules is Schedules.ClaimSchedules, or ErrUnsupported.
func (c *capable) ClaimSchedules(ctx context.Context, p *ClaimSchedulesParams) ([]*Schedule, error) {
	if c.schedules == nil {
		return nil, unsupported("schedules")
	}
	return c.schedules.ClaimSchedules(ctx, p)
}

// AdvanceSchedule is Schedules.AdvanceSchedule, or ErrUnsupported.
func (c *capable) AdvanceSchedule(ctx context.Context, p *AdvanceScheduleParams) (bool, error) {
	if c.schedules == nil {
		return false, unsupported("schedules")
	}
	return c.schedules.AdvanceSchedule(ctx, p)
}

// SetLimiter is Limits.SetLimiter, or ErrUnsupported.
func (c *capable) SetLimiter(ctx context.Context, l *limit.Config) error {
	if c.limits == nil {
		return unsupported("limiters")
	}
	return c.limits.SetLimiter(ctx, l)
}

// GetLimiter is Limits.GetLimiter, or ErrUnsupported.
func (c *capable) GetLimiter(ctx context.Context, name string) (*limit.Config, error) {
	if c.limits == nil {
		return nil, unsupported("limiters")
	}
	return c.limits.GetLimiter(ctx, name)
}

// ListLimiters is Limits.ListLimiters, or ErrUnsupported.
func (c *capable) ListLimiters(ctx context.Context) ([]*limit.Config, error) {
	if c.limits == nil {
		return nil, unsupported("limiters")
	}
	return c.limits.ListLimiters(ctx)
}

// AcquireSlot is Limits.AcquireSlot, or ErrUnsupported.
func (c *capable) AcquireSlot(ctx context.Context, p *AcquireSlotParams) (*limit.Decision, error) {
	if c.limits == nil {
		return nil, unsupported("limiters")
	}
	return c.limits.AcquireSlot(ctx, p)
}

// ReleaseSlot is Limits.ReleaseSlot, or ErrUnsupported.
func (c *capable) ReleaseSlot(ctx context.Context, p *ReleaseSlotParams) (bool, error) {
	if c.limits == nil {
		return false, unsupported("limiters")
	}
	return c.limits.ReleaseSlot(ctx, p)
}

// RenewSlot is Limits.RenewSlot, or ErrUnsupported.
func (c *capable) RenewSlot(ctx context.Context, p *RenewSlotParams) (bool, error) {
	if c.limits == nil {
		return false, unsupported("limiters")
	}
	return c.limits.RenewSlot(ctx, p)
}

// SlotHeld is Limits.SlotHeld, or ErrUnsupported.
func (c *capable) SlotHeld(ctx context.Context, p *SlotHeldParams) (time.Time, bool, error) {
	if c.limits == nil {
		return time.Time{}, false, unsupported("limiters")
	}
	return c.limits.SlotHeld(ctx, p)
}

// DeleteLimiter is Limits.DeleteLimiter, or ErrUnsupported.
func (c *capable) DeleteLimiter(ctx context.Context, name string) error {
	if c.limits == nil {
		return unsupported("limiters")
	}
	return c.limits.DeleteLimiter(ctx, name)
}

// LimiterState is Limits.LimiterState, or ErrUnsupported.
func (c *capable) LimiterState(ctx context.Context, name string, now time.Time) (*limit.State, error) {
	if c.limits == nil {
		return nil, unsupported("limiters")
	}
	return c.limits.LimiterState(ctx, name, now)
}

// AdmitRuns is Limits.AdmitRuns; without limiters nothing is queued, so
// nothing is admitted.
func (c *capable) AdmitRuns(ctx context.Context, p *AdmitRunsParams) ([]*Run, error) {
	if c.limits == nil {
		return nil, nil
	}
	return c.limits.AdmitRuns(ctx, p)
}
