package apply

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/store"
)

// Hook is a hook's row as the rules see it.
type Hook struct {
	Token     string
	RunID     string
	Op        int64
	Disposed  bool
	Received  int64
	CreatedAt time.Time
}

// Info is h as the store returns it.
func (h *Hook) Info() *store.HookInfo {
	return &store.HookInfo{Token: h.Token, RunID: h.RunID, Op: h.Op, Disposed: h.Disposed, Received: h.Received, CreatedAt: h.CreatedAt}
}

// HookTx is what the hook rules load and save: a narrow part of a
// backend's write transaction.
type HookTx interface {
	// Run returns run id's lease and log position; store.ErrNotFound if
	// there is none.
	Run(id string) (*Run, error)
	// Hook returns the hook holding token, nil if none.
	Hook(token string) (*Hook, error)
	// HookKey returns what a delivery with key to token left, nil if none
	// (expired keys may be returned).
	HookKey(token, key string) (*Key, error)
	// AddEvents appends evs (their Seq and At set) to run's log.
	AddEvents(run *Run, evs []store.Event) error
	// SaveRun applies c to run's row.
	SaveRun(run *Run, c *RunChange) error
	// SaveHook persists h; fresh: its row is new, or replaces the row of a
	// hook that held the token before (whose delivery keys go with it).
	SaveHook(h *Hook, fresh bool) error
	// SaveHookKey stores what a delivery with key to token left.
	SaveHookKey(token, key string, k *Key) error
	// A delivery's payload counts in its run's inbox.
	InboxTx
}

// CreateHook applies store.Store.CreateHook. p must be checked and have
// its defaults.
//
// Every hook rule loads the hook before any run, so that backends that lock
// what they load lock in one order.
func CreateHook(tx HookTx, p *store.HookParams) error {
	h, err := tx.Hook(p.Token)
	if err != nil {
		return err
	}
	run, err := tx.Run(p.RunID)
	if err != nil {
		return err
	}
	if err := CheckLease(run, p.LeaseEpoch); err != nil {
		return err
	}
	if h != nil && h.RunID == p.RunID && h.Op == p.Op {
		return nil // created before: a retry
	}
	if h != nil && !h.Disposed {
		owner := run
		if h.RunID != run.ID {
			if owner, err = tx.Run(h.RunID); err != nil && !isNotFound(err) {
				return err
			}
		}
		if owner != nil && !owner.Status.Terminal() {
			// Named by its reference: this error becomes the failing run's,
			// which logs and traces carry; the token is a capability.
			return fmt.Errorf("%w: the token of %s is the hook of run %s (op %d)", store.ErrHookConflict, store.HookRef(p.Token), h.RunID, h.Op)
		}
	}
	nh := &Hook{Token: p.Token, RunID: run.ID, Op: p.Op, CreatedAt: p.Now}
	if err := tx.SaveHook(nh, true); err != nil {
		return err
	}
	return addEvent(tx, run, store.Event{Type: store.EventHookCreated, Op: p.Op, Name: p.Token}, p.Now)
}

// DisposeHook applies store.Store.DisposeHook. p must be checked and have
// its defaults.
func DisposeHook(tx HookTx, p *store.HookParams) error {
	h, err := tx.Hook(p.Token)
	if err != nil {
		return err
	}
	run, err := tx.Run(p.RunID)
	if err != nil {
		return err
	}
	if err := CheckLease(run, p.LeaseEpoch); err != nil {
		return err
	}
	if h == nil || h.RunID != run.ID || h.Op != p.Op {
		return fmt.Errorf("run %s has no hook %q at op %d: %w", run.ID, p.Token, p.Op, store.ErrNotFound)
	}
	if h.Disposed {
		return nil
	}
	h.Disposed = true
	if err := tx.SaveHook(h, false); err != nil {
		return err
	}
	return addEvent(tx, run, store.Event{Type: store.EventHookDisposed, Op: p.Op, Name: p.Token}, p.Now)
}

// DeliverHook applies store.Store.DeliverHook. p must be checked and have
// its defaults. Its checks (the hook, the key, the run) all come before
// its first save.
func DeliverHook(tx HookTx, p *store.DeliverHookParams) (*store.HookDelivery, error) {
	h, err := tx.Hook(p.Token)
	if err != nil {
		return nil, err
	}
	if h == nil || p.RunID != "" && h.RunID != p.RunID {
		return nil, fmt.Errorf("no hook %q: %w", p.Token, store.ErrNotFound)
	}
	digest := p.RequestDigest
	if digest == nil {
		digest = []byte{}
	}
	if p.IdempotencyKey != "" {
		k, err := tx.HookKey(p.Token, p.IdempotencyKey)
		if err != nil {
			return nil, err
		}
		if k != nil && k.ExpiresAt.After(p.Now) {
			if !bytes.Equal(k.Digest, digest) {
				return nil, fmt.Errorf("%w: key %q was a delivery with another payload", store.ErrKeyReused, p.IdempotencyKey)
			}
			var res store.HookDelivery
			if err := json.Unmarshal(k.Result, &res); err != nil {
				return nil, fmt.Errorf("hook %q key %q: stored result: %w", p.Token, p.IdempotencyKey, err)
			}
			res.Duplicate = true
			return &res, nil
		}
	}
	if h.Disposed {
		return nil, fmt.Errorf("hook %q: %w", p.Token, store.ErrHookGone)
	}
	run, err := tx.Run(h.RunID)
	if isNotFound(err) {
		return nil, fmt.Errorf("hook %q: its run %s was deleted: %w", p.Token, h.RunID, store.ErrHookGone)
	}
	if err != nil {
		return nil, err
	}
	if run.Status.Terminal() {
		return nil, fmt.Errorf("hook %q: its run %s ended (%s): %w", p.Token, run.ID, run.Status, store.ErrHookGone)
	}
	if p.OnlyFirst && h.Received > 0 {
		return &store.HookDelivery{RunID: run.ID, Op: h.Op, Count: h.Received, Duplicate: true}, nil
	}
	// A client's payloads grow the run's log as messages do, and share
	// their bound. An OnlyFirst delivery (a child's end: one per hook
	// ever) is the engine's and is neither counted nor refused.
	counted := !p.OnlyFirst && (len(p.Payload) > 0 || !p.Close)
	if counted {
		if err := checkInbox(tx, run.ID, len(p.Payload)); err != nil {
			return nil, fmt.Errorf("hook %q: %w", p.Token, err)
		}
	}

	// Nothing can refuse the delivery from here on.
	seq := run.LastEvent + 1
	var evs []store.Event
	if len(p.Payload) > 0 || !p.Close {
		evs = append(evs, store.Event{Seq: seq, Type: store.EventHookReceived, Op: h.Op, Name: h.Token, Data: p.Payload, At: p.Now})
		h.Received++
	}
	if p.Close {
		// The sender's last word: the hook is closed after its payload.
		evs = append(evs, store.Event{Seq: seq + int64(len(evs)), Type: store.EventHookDisposed, Op: h.Op, Name: h.Token, At: p.Now})
		h.Disposed = true
	}
	if err := tx.AddEvents(run, evs); err != nil {
		return nil, err
	}
	run.LastEvent = seq + int64(len(evs)) - 1
	if counted {
		if err := tx.AddInbox(run.ID, 1, int64(len(p.Payload))); err != nil {
			return nil, err
		}
	}
	if err := tx.SaveHook(h, false); err != nil {
		return nil, err
	}
	// A parked run (its lease released) waiting for the payload is
	// claimable at once; a leased one's worker reads its log.
	if err := tx.SaveRun(run, &RunChange{Wake: run.Owner == "", Now: p.Now}); err != nil {
		return nil, err
	}
	res := &store.HookDelivery{RunID: run.ID, Op: h.Op, Seq: seq, Count: h.Received, Closed: p.Close}
	if p.IdempotencyKey != "" {
		b, _ := json.Marshal(res)
		if err := tx.SaveHookKey(p.Token, p.IdempotencyKey, &Key{Digest: digest, Result: b, ExpiresAt: p.Now.Add(p.KeyTTL)}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// addEvent appends one event to run's log and saves the run's row.
func addEvent(tx HookTx, run *Run, ev store.Event, now time.Time) error {
	ev.Seq, ev.At = run.LastEvent+1, now
	if err := tx.AddEvents(run, []store.Event{ev}); err != nil {
		return err
	}
	run.LastEvent = ev.Seq
	return tx.SaveRun(run, &RunChange{Now: now})
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
