package apply

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/limit"
	"github.com/weirhq/weir/store"
)

// LimiterTx is what the limiter functions need of a transaction. A
// limiter is one row: its configuration and its state (limit.State, as
// EncodeLimiterState writes it).
type LimiterTx interface {
	// LockLimiter loads limiter name and locks it until the transaction
	// ends (PostgreSQL: FOR UPDATE); found is false if there is none.
	LockLimiter(name string) (c *limit.Config, state []byte, found bool, err error)
	// SaveLimiter saves limiter c.Name (creating it if new).
	SaveLimiter(c *limit.Config, state []byte) error
	// CountLimiters returns how many limiters there are. It is asked only
	// to create one; where creations can interleave, they take turns here
	// on a lock held to commit, so that a LockLimiter after it sees a
	// creation of the same name that committed meanwhile.
	CountLimiters() (int, error)
	// QueuedRuns reports whether runs wait in limiter name as a queue, or
	// hold its slots as admitted runs that have not ended.
	QueuedRuns(name string) (bool, error)
	// WakeParkedRuns makes each of runs that is parked (running, its lease
	// given up) claimable at once; any other is left as it is.
	WakeParkedRuns(runs []string) error
	// WakeRunsFor makes every parked run that waits for limiter name
	// (store.AdvanceParams.Limiters) claimable at once, but those parked
	// lined (AdvanceParams.Lined), which wait for a seat.
	WakeRunsFor(name string) error
	// ParkedFor reports whether a parked run waits for limiter name.
	ParkedFor(name string) (bool, error)
	// DeleteLimiter deletes limiter name's row.
	DeleteLimiter(name string) error
}

// EncodeLimiterState is how a limiter's state is kept.
func EncodeLimiterState(st limit.State) ([]byte, error) { return json.Marshal(st) }

// DecodeLimiterState reads a kept state; empty is a new limiter's.
func DecodeLimiterState(b []byte) (limit.State, error) {
	var st limit.State
	if len(b) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("limiter state: %w", err)
	}
	return st, nil
}

// SetLimiter creates or changes a limiter, keeping its state; slots a
// raised bound frees go to its line (limit.HandOff), and it returns the
// holders to wake once committed (store.LimiterWatcher.WatchSlot): those
// handed one, and every other waiter, to ask again under the new bounds;
// the runs of waiters parked for a rate's or a budget's window are made
// claimable. A
// waiter of a limiter that hands off waits to be handed a slot and asks
// at nothing else; once a rate or a budget is added, no slot is handed
// any more, and it slept to its place's renewal (red team, round ten: a
// freed slot idle 2–10 s behind a change).
func SetLimiter(tx LimiterTx, c *limit.Config) ([]string, error) {
	if err := store.CheckLimiter(c); err != nil {
		return nil, err
	}
	old, state, found, err := tx.LockLimiter(c.Name)
	if err != nil {
		return nil, err
	}
	if !found {
		n, err := tx.CountLimiters()
		if err != nil {
			return nil, err
		}
		// Another creation of the same name may have committed while this
		// one waited its turn (CountLimiters): its state (slots already
		// held) is kept, not reset.
		if old, state, found, err = tx.LockLimiter(c.Name); err != nil {
			return nil, err
		}
		if !found && n >= store.MaxLimiters {
			return nil, fmt.Errorf("%w: %d limiters, the most there may be: delete one first", store.ErrQuota, n)
		}
	}
	// The runs parked for its window are woken, when the change opens
	// the window (limit.OpensWindows), by what they say they wait for (a
	// run's place in the line lasts a lease; its window may last a day),
	// and the runs of waiters still in line by their places below (a run
	// parked by a build before limiters were kept on its row). Runs parked
	// lined wait for a seat, not for the limiter: they are not woken.
	opens := found && limit.OpensWindows(old, c)
	if opens {
		if err := tx.WakeRunsFor(c.Name); err != nil {
			return nil, err
		}
	}
	if len(state) == 0 {
		// A new limiter's: nothing held, no one in line.
		return nil, tx.SaveLimiter(c, []byte{})
	}
	st, err := DecodeLimiterState(state)
	if err != nil {
		return nil, err
	}
	// At the time of its latest decision, not pruned: the clock is the
	// asks' (a waiter asked within its lease of it), and a lease that ran
	// out is taken back by the next decision, at the clock its caller
	// gives.
	st, handed := limit.HandOff(c, st, limit.Latest(st, time.Time{}))
	// A waiter that asked at a rate or a budget may be parked for its
	// window (an hour, for a rate of a few an hour): it hears no wake, so
	// its run is made claimable, to ask again under the new bounds.
	var parked []string
	for _, w := range st.Waiters {
		handed = append(handed, w.Holder)
		if run, ok := limit.HolderRun(w.Holder); ok && opens && w.Deaf && !slices.Contains(parked, run) {
			parked = append(parked, run)
		}
	}
	if len(parked) > 0 {
		if err := tx.WakeParkedRuns(parked); err != nil {
			return nil, err
		}
	}
	return handed, saveLimiter(tx, c, st)
}

// DeleteLimiter deletes limiter name if nothing uses it at now: no slot
// held by a live lease, no one in its line, no run queued in it or holding
// a slot as an admitted run, no run parked waiting for it; store.ErrLimiterInUse if something does,
// store.ErrNotFound if there is none. Steps that name it afterwards fail
// as for a limiter never set.
func DeleteLimiter(tx LimiterTx, name string, now time.Time) error {
	if err := store.CheckLimiterName(name); err != nil {
		return err
	}
	_, st, err := lockLimiter(tx, name)
	if err != nil {
		return err
	}
	held := 0
	for _, h := range st.Holds {
		if h.Run || h.Until.After(now) {
			held++
		}
	}
	// A place in line lasts its lease, as a hold does: one that ran out
	// with no decision since (an execution of a run that went on as
	// another, limit.StepHolder, and ended) waits for nothing.
	waiting := 0
	for _, w := range st.Waiters {
		if w.Until.After(now) {
			waiting++
		}
	}
	queued, err := tx.QueuedRuns(name)
	if err != nil {
		return err
	}
	parked, err := tx.ParkedFor(name)
	if err != nil {
		return err
	}
	if held > 0 || waiting > 0 || queued || parked {
		return fmt.Errorf("%w: limiter %q: %d slots held, %d waiting, runs queued: %v, runs parked for it: %v", store.ErrLimiterInUse, name, held, waiting, queued, parked)
	}
	return tx.DeleteLimiter(name)
}

// lockLimiter loads limiter name with its state, ErrNotFound if none.
func lockLimiter(tx LimiterTx, name string) (*limit.Config, limit.State, error) {
	c, b, found, err := tx.LockLimiter(name)
	if err != nil {
		return nil, limit.State{}, err
	}
	if !found {
		return nil, limit.State{}, fmt.Errorf("%w: no limiter %q", store.ErrNotFound, name)
	}
	st, err := DecodeLimiterState(b)
	return c, st, err
}

func saveLimiter(tx LimiterTx, c *limit.Config, st limit.State) error {
	b, err := EncodeLimiterState(st)
	if err != nil {
		return err
	}
	return tx.SaveLimiter(c, b)
}

// AcquireSlot decides an AcquireSlot call (limit.Acquire) and saves the
// limiter's state. p.Now must be set.
func AcquireSlot(tx LimiterTx, p *store.AcquireSlotParams) (*limit.Decision, error) {
	c, st, err := lockLimiter(tx, p.Limiter)
	if err != nil {
		return nil, err
	}
	d, st := limit.Acquire(c, st, p.Request, p.Now)
	return &d, saveLimiter(tx, c, st)
}

// ReleaseSlot applies a ReleaseSlot call (limit.Release), and hands what
// it frees to the line (limit.HandOff): it returns the holders handed a
// slot, for the store to wake once committed. p.Now must be set.
func ReleaseSlot(tx LimiterTx, p *store.ReleaseSlotParams) (bool, []string, error) {
	c, st, err := lockLimiter(tx, p.Limiter)
	if err != nil {
		return false, nil, err
	}
	st, ok, err := limit.Release(c, st, p.Holder, p.Cost, p.Now)
	if err != nil {
		return false, nil, fmt.Errorf("%w: %w", store.ErrInvalid, err)
	}
	st, handed := limit.HandOff(c, st, p.Now)
	return ok, handed, saveLimiter(tx, c, st)
}

// RenewSlot applies a RenewSlot call (limit.Renew). p.Now must be set.
func RenewSlot(tx LimiterTx, p *store.RenewSlotParams) (bool, error) {
	c, st, err := lockLimiter(tx, p.Limiter)
	if err != nil {
		return false, err
	}
	st, ok := limit.Renew(st, p.Holder, p.Now.Add(p.Lease), p.Now)
	if !ok {
		return false, nil
	}
	return true, saveLimiter(tx, c, st)
}

// EncodeLimiterConfig is how a limiter's configuration is kept.
func EncodeLimiterConfig(c *limit.Config) ([]byte, error) { return json.Marshal(c) }

// DecodeLimiterConfig reads a kept configuration.
func DecodeLimiterConfig(b []byte) (*limit.Config, error) {
	var c limit.Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("limiter config: %w", err)
	}
	return &c, nil
}

// LimiterView is what a limiter kept as (config, state) holds at now: its
// live holds (a run's while inFlight says it has not ended), its uses in
// the window, its line, and queued, its queued runs.
func LimiterView(config, state []byte, now time.Time, inFlight func(ids []string) (map[string]bool, error), queued int) (*limit.State, error) {
	c, err := DecodeLimiterConfig(config)
	if err != nil {
		return nil, err
	}
	st, err := DecodeLimiterState(state)
	if err != nil {
		return nil, err
	}
	if holds := limit.RunHolds(st); len(holds) > 0 {
		ids := make([]string, len(holds))
		for i, h := range holds {
			ids[i] = strings.TrimPrefix(h, "run:")
		}
		live, err := inFlight(ids)
		if err != nil {
			return nil, err
		}
		st.Holds = slices.DeleteFunc(st.Holds, func(h limit.Hold) bool { return h.Run && !live[strings.TrimPrefix(h.Holder, "run:")] })
	}
	st = limit.Prune(c, st, now)
	st.Queued = queued
	return &st, nil
}

// SlotHeld decides a store.SlotHeld call from a limiter's kept state.
func SlotHeld(state []byte, holder string, now time.Time) (time.Time, bool, error) {
	st, err := DecodeLimiterState(state)
	if err != nil {
		return time.Time{}, false, err
	}
	until, held := limit.HeldFor(st, holder, now)
	return until, held, nil
}
