// Package limit holds the rules of weir's limiters, written once for every
// store: a named limiter bounds how many slots are held at once
// (concurrency), how many are taken per period (rate), and how much cost
// is charged per period (a budget: tokens, dollars), and it decides who of
// those waiting goes next (priority, then a fair share between keys, then
// age).
//
// A store keeps a limiter's State (its holds, its recent uses, its
// waiters) and, under its own lock, passes it here with a request and the
// time; it saves the State that comes back. Nothing here does I/O or reads
// a clock, so the rules are tested alone (table and property tests) and
// hold alike on every backend: on PostgreSQL across every process on the
// database, on SQLite within its one process.
//
// Crash safety comes from leases: a hold lasts until its Until unless it
// is renewed, and a waiter stays in line only while it asks again within
// its lease, so the slots and places of a killed worker come back within
// one lease.
package limit

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/weirhq/weir/names"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is a configuration or request the rules refuse.
var ErrInvalid = errors.New("limit: invalid")

// MaxNameLen bounds a limiter's name and a request's key and holder, in
// bytes.
const MaxNameLen = 256

// Config is one limiter. Zero fields are no bound; at least one bound is
// required.
type Config struct {
	Name string
	// Concurrency bounds the slots held at once.
	Concurrency int
	// PerKey bounds the slots one key (a tenant) holds at once: a tenant's
	// steps or runs share their own limit inside the limiter's.
	PerKey int
	// Rate bounds the slots taken per Period.
	Rate int
	// Budget bounds the cost charged per Period. A slot's cost is charged
	// when it is released (a step reports the tokens it used), so the
	// slots in flight can overspend it; the next ones then wait until
	// enough of it ages out of the window.
	Budget int64
	// Period is the sliding window of Rate and Budget; required with
	// either, at least a millisecond.
	Period time.Duration
}

// Check refuses a config that bounds nothing or bounds by a negative.
// OpensWindows reports whether new lets through sooner than old what a
// rate's or a budget's window holds back: a rate or a budget taken off or
// raised, or its period shortened. Only then can a run parked for such a
// window go before its wake time, so only then is it woken (a change that
// does not loosen a window replays nothing: red team, round twelve, one
// PUT of the same bounds replayed a thousand parked runs). A nil old (a
// new limiter) opens nothing.
func OpensWindows(old, new *Config) bool {
	if old == nil {
		return false
	}
	looser := func(oldN, newN int64) bool {
		return oldN > 0 && (newN == 0 || newN > oldN || new.Period < old.Period)
	}
	return looser(int64(old.Rate), int64(new.Rate)) || looser(old.Budget, new.Budget)
}

func (c *Config) Check() error {
	if err := names.Limiter(c.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkName("limiter name", c.Name); err != nil {
		return err
	}
	switch {
	case c.Concurrency < 0 || c.PerKey < 0 || c.Rate < 0 || c.Budget < 0:
		return fmt.Errorf("%w: limiter %q: a negative limit", ErrInvalid, c.Name)
	case c.Concurrency == 0 && c.PerKey == 0 && c.Rate == 0 && c.Budget == 0:
		return fmt.Errorf("%w: limiter %q limits nothing: set a concurrency, a per-key concurrency, a rate or a budget", ErrInvalid, c.Name)
	case (c.Rate > 0 || c.Budget > 0) && c.Period < time.Millisecond:
		return fmt.Errorf("%w: limiter %q: a rate or a budget needs a period of at least 1ms", ErrInvalid, c.Name)
	case c.Period < 0:
		return fmt.Errorf("%w: limiter %q: a negative period", ErrInvalid, c.Name)
	case c.Period > MaxPeriod:
		return fmt.Errorf("%w: limiter %q: a period of %v, the longest is %v", ErrInvalid, c.Name, c.Period, MaxPeriod)
	}
	return nil
}

// MaxPeriod bounds a limiter's period, and a request's lease: a time a
// decision reaches by one of them (a retry's, a hold's) stays far inside
// what a store keeps as nanoseconds since 1970 (to 2262). Red team, round
// eleven: a period of 2,562,047 hours put a parked run's wake time past
// it, wrapped negative, and the run was claimed again in a loop.
const MaxPeriod = 10 * 366 * 24 * time.Hour

// CheckKey refuses a key (a tenant's, a dedupe key): empty, or printable
// text of at most MaxNameLen bytes (names.Text).
func CheckKey(what, k string) error {
	if k == "" {
		return nil
	}
	return checkName(what, k)
}

func checkName(what, s string) error {
	if err := names.Text(what, s, MaxNameLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Hold is a slot held by Holder (a step attempt) until Until, or, for a
// run admitted from a queue (Admit), until the run ends.
type Hold struct {
	Holder, Key string
	At, Until   time.Time
	// Run: held by a run until it ends, not by a lease (Admit gives it
	// back when its run is no longer in flight).
	Run bool `json:",omitempty"`
	// Count is the slots of a grant (Request.Grant), which its holder
	// hands out itself; 0 is one slot.
	Count int `json:",omitempty"`
}

// Slots is how many slots h holds.
func (h Hold) Slots() int { return max(1, h.Count) }

// Held is how many slots st's holds hold.
func Held(st State) int {
	n := 0
	for _, h := range st.Holds {
		n += h.Slots()
	}
	return n
}

// Use is one slot taken at At, and the cost charged for it (0 until it is
// released with one).
type Use struct {
	Holder string
	At     time.Time
	Cost   int64
	// Charged: a release charged its cost (once: a release sent again,
	// after a reply was lost, charges nothing more).
	Charged bool
	// Count is how many uses the entry stands for (0: one). Uses that
	// nothing will charge any more are merged once a window holds more
	// than maxUses entries (compactUses), so that a limiter's state stays
	// bounded whatever its rate and period.
	Count int `json:",omitempty"`
}

// N is how many uses u stands for.
func (u Use) N() int {
	if u.Count > 0 {
		return u.Count
	}
	return 1
}

// maxUses bounds the entries a window keeps before its settled uses are
// merged (compactUses): a rate of a billion a year, or a daily budget of
// many calls, kept one entry a use, made every decision decode, sort and
// write back a row of a hundred thousand entries (red team, round
// twelve: 23 ms of CPU a start on SQLite at 5,500 uses, growing).
const maxUses = 512

// compactUses merges, when uses (oldest first) hold more than maxUses
// entries, the settled ones — charged, or a run's (a queue's, never
// charged) — into one entry per maxUses/2-th of the period, at the latest
// time among them: a merged use leaves the window no earlier than the
// uses it stands for, so the bounds hold; a window may let its next use
// go up to period/256 late. A use a release may still charge keeps its
// own entry.
func compactUses(c *Config, uses []Use) []Use {
	if len(uses) <= maxUses {
		return uses
	}
	width := max(c.Period/(maxUses/2), time.Microsecond)
	buckets := map[time.Time]*Use{}
	out := make([]Use, 0, maxUses)
	for _, u := range uses {
		if !u.Charged && !strings.HasPrefix(u.Holder, runHolderPrefix) {
			out = append(out, u)
			continue
		}
		k := u.At.Truncate(width)
		m := buckets[k]
		if m == nil {
			m = &Use{At: u.At, Charged: true}
			buckets[k] = m
		}
		if u.At.After(m.At) {
			m.At = u.At
		}
		m.Count += u.N()
		m.Cost += u.Cost
	}
	for _, m := range buckets {
		out = append(out, *m)
	}
	slices.SortStableFunc(out, func(a, b Use) int { return a.At.Compare(b.At) })
	return out
}

// Waiter is a holder in line since Since, there until Until unless it asks
// again.
type Waiter struct {
	Holder, Key  string
	Priority     int
	Since, Until time.Time
	// Lease is the lease its request asked for: the hold it is handed
	// (HandOff) lasts that long from the hand-off. 0 (a place saved before
	// hand-offs) is never handed a slot: it takes one by asking.
	Lease time.Duration `json:",omitempty"`
	// Deaf: it asked while its limiter did not hand off (a rate's or a
	// budget's window): it does not wait to be handed a slot — its run
	// may be parked until its window — so HandOff passes it by, and it
	// takes its slot by asking. (A slot handed to it when a change made
	// the limiter hand off sat idle for a lease: red team, round ten.)
	Deaf bool `json:",omitempty"`
}

// State is what a store keeps of one limiter.
type State struct {
	Holds   []Hold
	Uses    []Use
	Waiters []Waiter
	// Served is when each key in line or holding was last granted a
	// slot: of keys holding as many slots, the one served longest ago goes
	// first (round robin between tenants).
	Served map[string]time.Time `json:",omitempty"`
	// Queued is how many runs wait in the limiter as a queue: not kept
	// here (a store counts its queued runs), filled in by a store's view.
	Queued int `json:"-"`
	// Last is the time of the latest decision (Latest): none is made at
	// an earlier one.
	Last time.Time `json:",omitzero"`
}

// Request asks for a slot.
type Request struct {
	// Holder names the asker, the same every time it asks (a step
	// attempt: "<run>/<op>/<attempt>"): asking again while holding is
	// granted again, and keeps its place while waiting.
	Holder string
	// Key is the fair-share group (a tenant): of waiters of one priority,
	// those whose key holds fewer slots go first.
	Key string
	// Priority: higher goes first.
	Priority int
	// Lease is how long a granted slot is held without a Renew, and how
	// long a waiter keeps its place without asking again.
	Lease time.Duration
	// Grant, if > 0, asks for a block of slots under one hold, which the
	// holder (an engine) hands out to its own callers without asking the
	// store each time: the hold becomes Grant slots if it held more (a
	// shrink, always granted), or grows towards Grant by what is free, and
	// only while no one waits in line, so a grant never jumps the line.
	// Only a limiter whose bounds are concurrency and per-key takes grants
	// (Grantable); any other answers Reason NoGrant. Asking again renews
	// the hold's lease. It never puts the holder in line.
	Grant int `json:",omitempty"`
	// InUse, with Grant, is how many of the grant's slots its holder has
	// handed out and not taken back: a renewal keeps them whatever the
	// bounds are now (a lowered bound applies to new takes, as it does to
	// single holds), and gives back only idle ones.
	InUse int `json:",omitempty"`
}

// Check refuses a request without a holder or a lease.
func (r *Request) Check() error {
	if err := checkName("holder", r.Holder); err != nil {
		return err
	}
	if err := CheckKey("key", r.Key); err != nil {
		return err
	}
	if r.Lease <= 0 {
		return fmt.Errorf("%w: a request needs a positive lease", ErrInvalid)
	}
	if r.Lease > MaxPeriod {
		return fmt.Errorf("%w: a lease of %v, the longest is %v", ErrInvalid, r.Lease, MaxPeriod)
	}
	if r.Grant < 0 || r.Grant > MaxGrant {
		return fmt.Errorf("%w: a grant of %d slots (0 to %d)", ErrInvalid, r.Grant, MaxGrant)
	}
	if r.InUse < 0 || r.InUse > MaxGrant {
		return fmt.Errorf("%w: %d of a grant's slots in use (0 to %d)", ErrInvalid, r.InUse, MaxGrant)
	}
	return nil
}

// MaxGrant bounds a grant's slots.
const MaxGrant = 1 << 20

// Grantable reports whether c takes grants (Request.Grant): its only
// bounds are concurrency and per-key, slots that come back when released.
// A rate's or a budget's window counts each slot taken, when it is taken,
// which a holder handing out slots itself could not keep to.
func Grantable(c *Config) bool { return c.Rate == 0 && c.Budget == 0 }

// StepHolder is how the engine names an attempt of a step in a limiter
// (weir.WithLimiter), as one execution of its run runs it: epoch is the
// run's lease epoch, which each claim of the run moves on. Asked again in
// the same execution (a lost reply, a wake) it is the same holder, with
// its place and its slot. Another execution of the run is another holder:
// an execution that lost its lease and does not know it yet (a frozen or
// partitioned worker, whose body may still run) can neither take the
// live execution's slot as its own nor give it back, and the live one
// does not take over a slot the stale one's body may still be using: that
// slot comes back with its lease (torture, seed 7103: a stale execution's
// release freed the slot the run's live execution was using, and a third
// body started under a limit of two).
func StepHolder(run string, op, attempt, epoch int64) string {
	return run + "/" + strconv.FormatInt(op, 10) + "/" + strconv.FormatInt(attempt, 10) + "/" + strconv.FormatInt(epoch, 10)
}

// HolderStep is the run, step and attempt a StepHolder names, whichever
// execution's; false for a holder of another form (an engine's grant).
// A holder of the form before executions were named (run/op/attempt) is
// read too: such places lapse with their leases after an upgrade.
func HolderStep(holder string) (run string, op, attempt int64, ok bool) {
	parts := strings.Split(holder, "/")
	if n := len(parts); n == 4 || n == 3 {
		nums := make([]int64, 0, 3)
		for _, p := range parts[1:] {
			v, err := strconv.ParseInt(p, 10, 64)
			if err != nil {
				return "", 0, 0, false
			}
			nums = append(nums, v)
		}
		if parts[0] == "" {
			return "", 0, 0, false
		}
		return parts[0], nums[0], nums[1], true
	}
	return "", 0, 0, false
}

// HolderRun is the run of a StepHolder; false for a holder of another
// form (an engine's grant).
func HolderRun(holder string) (string, bool) {
	run, _, _, ok := HolderStep(holder)
	return run, ok
}

// Reason says which bound keeps a request waiting.
type Reason string

// The reasons.
const (
	Concurrency Reason = "concurrency" // every slot is held
	Key         Reason = "key"         // the request's key holds its PerKey slots
	Rate        Reason = "rate"        // Rate slots were taken in the last Period
	Budget      Reason = "budget"      // the Budget of the last Period is spent
	Queue       Reason = "queue"       // others go first (priority, fair share, age)
	NoGrant     Reason = "no-grant"    // a grant asked of a limiter that takes none (Grantable)
)

// Decision is what Acquire decided.
type Decision struct {
	Granted bool
	// Until is when the granted slot's hold ends without a Renew.
	Until time.Time
	// Reason is why the request waits; "" when granted.
	Reason Reason
	// Ahead is how many waiters go before this one.
	Ahead int
	// RetryAt is the soonest the bound that holds it back can let it go:
	// when a rate or budget window frees enough, when a hold's lease ends
	// (a release comes sooner). A store wakes waiters on releases too.
	RetryAt time.Time
	// Count is a grant's slots now (Request.Grant); 0 for other requests.
	Count int `json:",omitempty"`
	// Waiting is how many wait in line, for a grant's holder: while any
	// do, it gives back the slots it does not use.
	Waiting int `json:",omitempty"`
	// Joined: the request waits, and joined the line with this ask (it
	// was not in it): a grant's holder that hears of it gives back what it
	// does not use.
	Joined bool `json:",omitempty"`
	// Freed is the slots a grant gave back with this ask (it shrank): the
	// line may go on.
	Freed int `json:",omitempty"`
	// Over is how many of a grant's Count slots it keeps past the bounds,
	// for the attempts it has in use (Request.InUse): its holder hands out
	// no slot until that many have ended.
	Over int `json:",omitempty"`
	// Handed is the other waiters this decision handed a slot (HandOff):
	// a store wakes each, for it holds a slot it does not know of yet.
	Handed []string `json:",omitempty"`
	// HandsOff: the request waits, and the limiter hands its freed slots
	// to its line (HandOff): the waiter is woken when handed one, and
	// need not ask at every change of the limiter.
	HandsOff bool `json:",omitempty"`
}

// Acquire decides req at now against st, and returns the decision and the
// state after it: a grant adds a hold and a use and takes the holder out of
// line; a wait puts it in line, or refreshes its place.
func Acquire(c *Config, st State, req Request, now time.Time) (Decision, State) {
	now = Latest(st, now)
	st = Prune(c, st, now)
	if req.Grant > 0 {
		// What a grant gives back goes to the line at once.
		d, st := grant(c, st, req, now)
		st, d.Handed = HandOff(c, st, now)
		return d, st
	}
	for i, h := range st.Holds {
		if h.Holder == req.Holder {
			// Asked again while holding (a lost reply, a slot handed to
			// it): the same slot, its lease renewed. What the pruning
			// freed goes to the line.
			st.Holds[i].Until = now.Add(req.Lease)
			d := Decision{Granted: true, Until: st.Holds[i].Until}
			st, d.Handed = HandOff(c, st, now)
			return d, st
		}
	}
	// req in line, its place kept.
	w := Waiter{Holder: req.Holder, Key: req.Key, Priority: req.Priority, Since: now, Until: now.Add(req.Lease), Lease: req.Lease, Deaf: !Grantable(c)}
	joined := false
	st.Waiters = slices.Clone(st.Waiters)
	if i := slices.IndexFunc(st.Waiters, func(x Waiter) bool { return x.Holder == req.Holder }); i >= 0 {
		w.Since = st.Waiters[i].Since
		st.Waiters[i] = w
	} else {
		st.Waiters = append(st.Waiters, w)
		joined = true
	}
	// The free slots go to the line's first, req among them or not.
	st, handed := HandOff(c, st, now)
	if i := slices.IndexFunc(st.Holds, func(h Hold) bool { return h.Holder == req.Holder }); i >= 0 {
		handed = slices.DeleteFunc(handed, func(h string) bool { return h == req.Holder })
		return Decision{Granted: true, Until: st.Holds[i].Until, Handed: handed}, st
	}
	if c.PerKey > 0 && heldBy(st, req.Key) >= c.PerKey {
		d := Decision{Reason: Key, RetryAt: keyRetry(st, req.Key), Joined: joined, Handed: handed, HandsOff: Grantable(c)}
		return d, st
	}
	// Waiters whose key holds its share take no free slot.
	order := slices.DeleteFunc(Order(st), func(x Waiter) bool { return c.PerKey > 0 && heldBy(st, x.Key) >= c.PerKey })
	pos := slices.IndexFunc(order, func(x Waiter) bool { return x.Holder == req.Holder })
	free, reason, retry := capacity(c, st, now)
	if pos >= free {
		d := Decision{Reason: reason, Ahead: pos, RetryAt: retry, Joined: joined, Handed: handed, HandsOff: Grantable(c)}
		if free > 0 {
			d.Reason = Queue // the free slots are the ones ahead's
		}
		return d, st
	}
	// Its turn, at a limiter that does not hand off (or behind a place
	// saved before hand-offs).
	st.Waiters = slices.DeleteFunc(st.Waiters, func(x Waiter) bool { return x.Holder == req.Holder })
	served := make(map[string]time.Time, len(st.Served)+1)
	maps.Copy(served, st.Served)
	served[req.Key] = now
	st.Served = served
	until := now.Add(req.Lease)
	st.Holds = append(slices.Clone(st.Holds), Hold{Holder: req.Holder, Key: req.Key, At: now, Until: until})
	if c.Rate > 0 || c.Budget > 0 {
		st.Uses = append(slices.Clone(st.Uses), Use{Holder: req.Holder, At: now})
	}
	return Decision{Granted: true, Until: until, Handed: handed}, st
}

// HandOff gives st's free slots to the first of its line, in line order
// (Order; a waiter whose key holds its PerKey share is passed over), each
// held for its waiter's lease from now, and returns the state and the
// holders it handed a slot. A slot freed by one process's release so goes
// to the waiter the line says, at once, whether or not that waiter (in
// another process) is listening: it learns of it when woken, or at its
// next ask, which finds the slot its own (Acquire). No slot stays free
// while someone waits for it, and no one's ask can take a slot out of
// turn. A waiter of a place saved before hand-offs (Lease 0) stops them
// at its place: it takes its slot by asking, as it would have.
//
// Only a limiter of concurrency and per-key bounds hands off (Grantable):
// a rate's or a budget's window counts a slot when it is taken, and a
// waiter handed one while parked for its window would call its provider
// later than its slot was counted, bunching calls past the rate. Those
// waiters take their slot by asking.
func HandOff(c *Config, st State, now time.Time) (State, []string) {
	if len(st.Waiters) == 0 || !Grantable(c) {
		return st, nil
	}
	var handed []string
	for {
		free, _, _ := capacity(c, st, now)
		if free <= 0 {
			return st, handed
		}
		order := Order(st)
		i := slices.IndexFunc(order, func(x Waiter) bool { return !x.Deaf && (c.PerKey == 0 || heldBy(st, x.Key) < c.PerKey) })
		if i < 0 {
			return st, handed
		}
		w := order[i]
		if w.Lease <= 0 {
			return st, handed
		}
		st.Waiters = slices.DeleteFunc(slices.Clone(st.Waiters), func(x Waiter) bool { return x.Holder == w.Holder })
		served := make(map[string]time.Time, len(st.Served)+1)
		maps.Copy(served, st.Served)
		served[w.Key] = now
		st.Served = served
		st.Holds = append(slices.Clone(st.Holds), Hold{Holder: w.Holder, Key: w.Key, At: now, Until: now.Add(w.Lease)})
		handed = append(handed, w.Holder)
	}
}

// grant decides a grant request (Request.Grant) against a pruned st.
func grant(c *Config, st State, req Request, now time.Time) (Decision, State) {
	if !Grantable(c) {
		return Decision{Reason: NoGrant}, st
	}
	st.Holds = slices.Clone(st.Holds)
	i := slices.IndexFunc(st.Holds, func(h Hold) bool { return h.Holder == req.Holder && !h.Run })
	have := 0
	if i >= 0 {
		have = st.Holds[i].Slots()
	}
	n := min(have, req.Grant) // a shrink, or what it keeps
	if req.Grant > have && len(st.Waiters) == 0 {
		free, _, _ := capacity(c, st, now)
		if c.PerKey > 0 {
			free = min(free, c.PerKey-heldBy(st, req.Key))
		}
		n = have + max(0, min(req.Grant-have, free))
	}
	// A lowered bound applies to a grant's next renewal too: it keeps no
	// more than the bounds leave it beside the others' holds.
	if c.Concurrency > 0 {
		n = min(n, max(0, c.Concurrency-(Held(st)-have)))
	}
	if c.PerKey > 0 {
		n = min(n, max(0, c.PerKey-(heldBy(st, req.Key)-have)))
	}
	// ... but what its holder has handed out stays held: the attempts on
	// those slots go on, and no new one is handed out until the grant is
	// under the bound (red team, round eleven: a bound lowered from 10 to
	// 9 stopped all ten steps on a grant, and each ran again).
	capped := n
	n = max(n, min(have, req.InUse))
	d := Decision{Waiting: len(st.Waiters), Freed: max(0, have-n), Over: n - capped}
	if n == 0 {
		if i >= 0 {
			st.Holds = slices.Delete(st.Holds, i, i+1)
		}
		free, reason, retry := capacity(c, st, now)
		d.Reason, d.RetryAt = reason, retry
		if free > 0 || reason == "" {
			d.Reason = Queue // the free slots are the line's
			if c.PerKey > 0 && heldBy(st, req.Key) >= c.PerKey {
				d.Reason, d.RetryAt = Key, keyRetry(st, req.Key)
			}
		}
		return d, st
	}
	until := now.Add(req.Lease)
	h := Hold{Holder: req.Holder, Key: req.Key, At: now, Until: until, Count: n}
	if i >= 0 {
		h.At = st.Holds[i].At
		st.Holds[i] = h
	} else {
		st.Holds = append(st.Holds, h)
	}
	if n > have {
		if st.Served == nil {
			st.Served = map[string]time.Time{}
		}
		st.Served[req.Key] = now
	}
	d.Granted, d.Until, d.Count = true, until, n
	return d, st
}

// Latest is now, or the latest time st was decided at if that is later.
// A store reads its clock before it takes the limiter's lock, so decisions
// can come in another order than their clocks: one decided at an earlier
// time than the last would measure its window from before uses that the
// last one's pruning already dropped, and let a rate through twice. Every
// decision is made no earlier than the one before it.
func Latest(st State, now time.Time) time.Time {
	if st.Last.After(now) {
		now = st.Last
	}
	for _, u := range st.Uses {
		if u.At.After(now) {
			now = u.At
		}
	}
	for _, h := range st.Holds {
		if h.At.After(now) {
			now = h.At
		}
	}
	for _, t := range st.Served {
		if t.After(now) {
			now = t
		}
	}
	return now
}

// HeldFor reports whether holder holds a slot of st past now, and until
// when by the clock now is read from: the hold's lease brought forward by
// as much as the limiter's decisions are ahead of now (Latest), since a
// decision made at that later time takes the hold back at its Until. A
// waiter handed a slot (HandOff) reads it so, without a decision of its
// own. A run's hold (Hold.Run) lasts no lease and is not a step's.
func HeldFor(st State, holder string, now time.Time) (time.Time, bool) {
	ahead := Latest(st, now).Sub(now)
	for _, h := range st.Holds {
		if h.Holder != holder || h.Run {
			continue
		}
		if until := h.Until.Add(-ahead); until.After(now) {
			return until, true
		}
		return time.Time{}, false
	}
	return time.Time{}, false
}

// heldBy is how many slots key holds.
func heldBy(st State, key string) int {
	n := 0
	for _, h := range st.Holds {
		if h.Key == key {
			n += h.Slots()
		}
	}
	return n
}

// keyRetry is when a lease of key's holds ends, the soonest (zero if
// only runs hold them: they end when the runs do).
func keyRetry(st State, key string) time.Time {
	var t time.Time
	for _, h := range st.Holds {
		if h.Key == key && !h.Run && (t.IsZero() || h.Until.Before(t)) {
			t = h.Until
		}
	}
	return t
}

// Order is the line: by priority (higher first), then the number of slots
// the waiter's key holds (fewer first: each key gets its share), then when
// the key was last served (longest ago first: keys take turns), then time
// in line.
func Order(st State) []Waiter {
	held := map[string]int{}
	for _, h := range st.Holds {
		held[h.Key] += h.Slots()
	}
	out := slices.Clone(st.Waiters)
	slices.SortStableFunc(out, func(a, b Waiter) int {
		switch {
		case a.Priority != b.Priority:
			return b.Priority - a.Priority
		case held[a.Key] != held[b.Key]:
			return held[a.Key] - held[b.Key]
		}
		if c := st.Served[a.Key].Compare(st.Served[b.Key]); c != 0 {
			return c
		}
		return a.Since.Compare(b.Since)
	})
	return out
}

// capacity is how many slots can be granted now, and, when none, which
// bound holds them back and when it can let one go.
func capacity(c *Config, st State, now time.Time) (int, Reason, time.Time) {
	free := int(^uint(0) >> 1)
	var reason Reason
	var retry time.Time
	if c.Concurrency > 0 {
		if n := c.Concurrency - Held(st); n < free {
			free = max(0, n)
			if free == 0 {
				reason = Concurrency
				for _, h := range st.Holds {
					if !h.Run && (retry.IsZero() || h.Until.Before(retry)) {
						retry = h.Until
					}
				}
			}
		}
	}
	uses := usesSince(st, now.Add(-c.Period))
	if c.Rate > 0 {
		taken := 0
		for _, u := range uses {
			taken += u.N()
		}
		if n := c.Rate - taken; n < free || n <= 0 {
			free = max(0, n)
			if free == 0 {
				// The use whose aging out leaves room for one more.
				reason = Rate
				over := taken - c.Rate + 1
				for _, u := range uses {
					if over -= u.N(); over <= 0 {
						retry = u.At.Add(c.Period)
						break
					}
				}
			}
		}
	}
	if c.Budget > 0 {
		var spent int64
		for _, u := range uses {
			spent += u.Cost
		}
		if spent >= c.Budget {
			free, reason = 0, Budget
			for _, u := range uses { // oldest first: spend left as each ages out
				spent -= u.Cost
				if spent < c.Budget {
					retry = u.At.Add(c.Period)
					break
				}
			}
		}
	}
	return free, reason, retry
}

// usesSince is st's uses after since, oldest first.
func usesSince(st State, since time.Time) []Use {
	out := make([]Use, 0, len(st.Uses))
	for _, u := range st.Uses {
		if u.At.After(since) {
			out = append(out, u)
		}
	}
	slices.SortStableFunc(out, func(a, b Use) int { return a.At.Compare(b.At) })
	return out
}

// Release ends holder's hold and charges cost to its use, once (a release
// sent again changes nothing), and its place in line if it waits (a
// waiter giving up); ok is false if it held nothing (its lease had run
// out: the slot was given back then, and its cost is still charged, for
// it was spent).
func Release(c *Config, st State, holder string, cost int64, now time.Time) (State, bool, error) {
	if cost < 0 {
		return st, false, fmt.Errorf("%w: a negative cost %d", ErrInvalid, cost)
	}
	ok := false
	st.Holds = slices.DeleteFunc(slices.Clone(st.Holds), func(h Hold) bool {
		if h.Holder == holder {
			ok = true
			return true
		}
		return false
	})
	// A waiter that gives up (its run cancelled) leaves the line too:
	// left in it, it would be handed a slot nobody uses until its lease
	// ran out (red team, round nine: 22 s of a one-slot limiter idle).
	st.Waiters = slices.DeleteFunc(slices.Clone(st.Waiters), func(w Waiter) bool { return w.Holder == holder })
	st.Uses = slices.Clone(st.Uses)
	for i := len(st.Uses) - 1; i >= 0; i-- {
		if st.Uses[i].Holder == holder {
			if !st.Uses[i].Charged {
				st.Uses[i].Cost, st.Uses[i].Charged = cost, true
			}
			break
		}
	}
	return Prune(c, st, now), ok, nil
}

// Renew extends holder's hold to until; false if it holds nothing (its
// lease ran out).
func Renew(st State, holder string, until time.Time, now time.Time) (State, bool) {
	st.Holds = slices.Clone(st.Holds)
	for i, h := range st.Holds {
		if h.Holder == holder && !h.Run && h.Until.After(now) {
			st.Holds[i].Until = until
			return st, true
		}
	}
	return st, false
}

// Prune drops what no decision needs: holds and waiters whose lease has
// run out, uses older than the window.
func Prune(c *Config, st State, now time.Time) State { return prune(c, st, now, nil) }

// prune is Prune keeping the turns of the keys in line too (a queue's
// waiting runs, which are not Waiters).
func prune(c *Config, st State, now time.Time, inLine map[string]bool) State {
	// What is pruned at now is gone for a decision at an earlier time
	// too: Last keeps every later one at now or after (Latest).
	out := State{
		Last:    Latest(State{Last: st.Last}, now),
		Holds:   slices.DeleteFunc(slices.Clone(st.Holds), func(h Hold) bool { return !h.Run && !h.Until.After(now) }),
		Waiters: slices.DeleteFunc(slices.Clone(st.Waiters), func(w Waiter) bool { return !w.Until.After(now) }),
	}
	if c.Rate > 0 || c.Budget > 0 {
		out.Uses = compactUses(c, usesSince(st, now.Add(-c.Period)))
	}
	// A key's turn is kept while it holds or waits; an idle key's is
	// forgotten (it comes back as one never served, first in its turn).
	for k, t := range st.Served {
		if inLine[k] || slices.ContainsFunc(out.Holds, func(h Hold) bool { return h.Key == k }) ||
			slices.ContainsFunc(out.Waiters, func(w Waiter) bool { return w.Key == k }) {
			if out.Served == nil {
				out.Served = map[string]time.Time{}
			}
			out.Served[k] = t
		}
	}
	return out
}
