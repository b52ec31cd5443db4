package limit

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func req(holder, key string) Request {
	return Request{Holder: holder, Key: key, Lease: 10 * time.Second}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Name: "openai", Concurrency: 4}, true},
		{Config{Name: "openai", Rate: 60, Period: time.Minute}, true},
		{Config{Name: "openai", Budget: 100_000, Period: time.Minute}, true},
		{Config{Name: "openai"}, false},
		{Config{Name: "", Concurrency: 1}, false},
		{Config{Name: "x", Concurrency: -1}, false},
		{Config{Name: "x", Rate: 5}, false},
		{Config{Name: "x", Budget: 5, Period: time.Microsecond}, false},
		{Config{Name: "x", Rate: -5, Period: time.Second}, false},
		{Config{Name: "x", Budget: 100, Period: MaxPeriod}, true},
		{Config{Name: "x", Rate: 1, Period: MaxPeriod + time.Hour}, false},
		{Config{Name: "x", Rate: 1, Period: 2562047 * time.Hour}, false},
		{Config{Name: string([]byte{0xff}), Concurrency: 1}, false},
		{Config{Name: string(make([]byte, MaxNameLen+1)), Concurrency: 1}, false},
	} {
		err := c.cfg.Check()
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", c.cfg, err)
		}
	}
	for _, r := range []Request{{Holder: "", Lease: time.Second}, {Holder: "h"}, {Holder: "h", Key: string([]byte{0xfe}), Lease: time.Second}, {Holder: "h", Lease: MaxPeriod + 1}} {
		if err := r.Check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("request %+v: %v", r, err)
		}
	}
}

func TestConcurrency(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 2}
	var st State
	var d Decision
	for i, h := range []string{"a", "b"} {
		if d, st = Acquire(c, st, req(h, ""), at(i)); !d.Granted {
			t.Fatalf("%s: %+v", h, d)
		}
	}
	d, st = Acquire(c, st, req("c", ""), at(5))
	if d.Granted || d.Reason != Concurrency || d.Ahead != 0 || d.RetryAt != at(10_000) {
		t.Fatalf("c with both slots held: %+v", d)
	}
	// Asking again while holding is the same slot (a lost reply).
	if d, st = Acquire(c, st, req("a", ""), at(6)); !d.Granted || len(st.Holds) != 2 {
		t.Fatalf("a again: %+v, %d holds", d, len(st.Holds))
	}
	st, ok, err := Release(c, st, "b", 0, at(7))
	if !ok || err != nil {
		t.Fatal("b released nothing")
	}
	// A newcomer does not take the slot c waits for: its ask hands it to
	// c (HandOff; a store's release would have).
	if d, st = Acquire(c, st, req("d", ""), at(8)); d.Granted || d.Reason != Concurrency || d.Ahead != 0 || !slices.Equal(d.Handed, []string{"c"}) {
		t.Fatalf("d jumped the line: %+v", d)
	}
	if d, st = Acquire(c, st, req("c", ""), at(9)); !d.Granted {
		t.Fatalf("c after b's release: %+v", d)
	}
	// A holder whose worker died: its slot comes back with its lease.
	if d, _ = Acquire(c, st, req("d", ""), at(10_007)); !d.Granted {
		t.Fatalf("d after a's lease ran out: %+v", d)
	}
}

func TestRate(t *testing.T) {
	c := &Config{Name: "l", Rate: 3, Period: time.Second}
	var st State
	var d Decision
	for i := range 3 {
		h := fmt.Sprint("h", i)
		if d, st = Acquire(c, st, req(h, ""), at(100*i)); !d.Granted {
			t.Fatalf("%s: %+v", h, d)
		}
		st, _, _ = Release(c, st, h, 0, at(100*i+1))
	}
	d, st = Acquire(c, st, req("x", ""), at(500))
	if d.Granted || d.Reason != Rate || d.RetryAt != at(1000) {
		t.Fatalf("a fourth in the window: %+v", d)
	}
	if d, st = Acquire(c, st, req("x", ""), at(999)); d.Granted {
		t.Fatal("granted before the first use aged out")
	}
	if d, _ = Acquire(c, st, req("x", ""), at(1000)); !d.Granted {
		t.Fatalf("at the retry time: %+v", d)
	}
}

func TestBudgetIsChargedAfter(t *testing.T) {
	c := &Config{Name: "tokens", Budget: 1000, Period: time.Minute}
	var st State
	var d Decision
	// Two calls in flight at once: the budget is charged when they report.
	d, st = Acquire(c, st, req("a", ""), at(0))
	d2, st2 := Acquire(c, st, req("b", ""), at(1))
	if !d.Granted || !d2.Granted {
		t.Fatal("nothing spent yet, and refused")
	}
	st = st2
	st, _, _ = Release(c, st, "a", 700, at(10))
	if d, st = Acquire(c, st, req("c", ""), at(11)); !d.Granted {
		t.Fatalf("700 of 1000 spent: %+v", d)
	}
	st, _, _ = Release(c, st, "b", 500, at(20)) // overspent: 1200
	st, _, _ = Release(c, st, "b", 500, at(20)) // sent again: charged once
	st, _, _ = Release(c, st, "c", 100, at(21))
	d, st = Acquire(c, st, req("d", ""), at(30))
	if d.Granted || d.Reason != Budget {
		t.Fatalf("1300 of 1000 spent: %+v", d)
	}
	// a's 700 ages out at 60 s: 600 left spent, under the budget.
	if d.RetryAt != at(60_000) {
		t.Fatalf("retry at %v, want when a's cost ages out", d.RetryAt)
	}
	if _, _, err := Release(c, st, "d", -1, at(31)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a negative cost: %v", err)
	}
	if d, _ = Acquire(c, st, req("d", ""), at(60_000)); !d.Granted {
		t.Fatalf("after the window: %+v", d)
	}
}

func TestPriorityThenFairShareThenAge(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 1}
	var st State
	_, st = Acquire(c, st, req("busy", "a"), at(0))
	// Tenant a queues many, tenant b one, later; c a high priority one, last.
	for i := range 5 {
		_, st = Acquire(c, st, req(fmt.Sprint("a", i), "a"), at(1+i))
	}
	_, st = Acquire(c, st, req("b0", "b"), at(10))
	hi := req("c0", "c")
	hi.Priority = 10
	_, st = Acquire(c, st, hi, at(11))
	var got []string
	for _, w := range Order(st) {
		got = append(got, w.Holder)
	}
	// a holds the slot: b's one goes before a's older ones.
	if fmt.Sprint(got) != "[c0 b0 a0 a1 a2 a3 a4]" {
		t.Fatalf("order %v", got)
	}
	d, _ := Acquire(c, st, req("a0", "a"), at(12))
	if d.Granted || d.Ahead != 2 {
		t.Fatalf("a0: %+v", d)
	}
}

func TestAWaiterThatStopsAskingLosesItsPlace(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 1}
	var st State
	_, st = Acquire(c, st, req("holder", ""), at(0))
	_, st = Acquire(c, st, Request{Holder: "gone", Lease: time.Second}, at(1))
	st, _, _ = Release(c, st, "holder", 0, at(2))
	if d, _ := Acquire(c, st, req("next", ""), at(500)); d.Granted {
		t.Fatal("the slot went to a newcomer while the first waiter's place held")
	}
	if d, _ := Acquire(c, st, req("next", ""), at(1001)); !d.Granted {
		t.Fatalf("the gone waiter's place outlived its lease: %+v", d)
	}
}

func TestRenew(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 1}
	_, st := Acquire(c, State{}, req("a", ""), at(0))
	st, ok := Renew(st, "a", at(30_000), at(9_000))
	if !ok {
		t.Fatal("renew of a live hold failed")
	}
	if d, _ := Acquire(c, st, req("b", ""), at(20_000)); d.Granted {
		t.Fatal("a renewed hold was given away")
	}
	if _, ok := Renew(st, "a", at(60_000), at(30_001)); ok {
		t.Fatal("renewed a hold whose lease had run out")
	}
}

// TestLimitsHold plays random programs of acquires (holders that come
// back, give up, die holding), releases with costs, and time passing
// against a limiter with every bound, and checks after each step what the
// limiter promises: never more holds than its concurrency, never more
// grants in any window than its rate, a grant only while the budget's
// window is under budget, and a grant only to one of the first of the line
// that could go. (Mutating the rate's or the budget's comparison by one
// fails it.)
func TestLimitsHold(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		c := &Config{Name: "l", Concurrency: 1 + rng.IntN(3), Rate: 2 + rng.IntN(5), Budget: int64(50 + rng.IntN(200)), Period: time.Duration(200+rng.IntN(800)) * time.Millisecond}
		var st State
		now := t0
		var grants []time.Time
		type cost struct {
			at time.Time
			n  int64
		}
		var costs []cost
		holders := []string{"a", "b", "c", "d", "e", "f"}
		for step := range 400 {
			now = now.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
			h := holders[rng.IntN(len(holders))]
			switch rng.IntN(3) {
			case 0, 1:
				r := Request{Holder: h, Key: h[:1], Priority: rng.IntN(2), Lease: time.Duration(100+rng.IntN(400)) * time.Millisecond}
				before := Prune(c, st, now)
				held := false
				for _, x := range before.Holds {
					held = held || x.Holder == h
				}
				var d Decision
				d, st = Acquire(c, st, r, now)
				if !d.Granted || held {
					continue
				}
				// A new grant: was the asker first among those who could go?
				order := Order(withWaiter(before, r, now))
				free, _, _ := capacity(c, before, now)
				pos := -1
				for i, w := range order {
					if w.Holder == h {
						pos = i
					}
				}
				if pos >= free {
					t.Fatalf("seed %d step %d: %s granted at place %d with %d free", seed, step, h, pos, free)
				}
				grants = append(grants, now)
				var spent int64
				for _, x := range costs {
					if x.at.After(now.Add(-c.Period)) {
						spent += x.n
					}
				}
				if spent >= c.Budget {
					t.Fatalf("seed %d step %d: granted with %d of %d spent in the window", seed, step, spent, c.Budget)
				}
			case 2:
				n := int64(rng.IntN(80))
				// The charge falls on the use of the holder's last grant,
				// once.
				var charged *Use
				for i := len(st.Uses) - 1; i >= 0; i-- {
					if st.Uses[i].Holder == h {
						charged = &st.Uses[i]
						break
					}
				}
				if charged != nil && !charged.Charged && n > 0 && charged.At.After(now.Add(-c.Period)) {
					costs = append(costs, cost{charged.At, n})
				}
				st, _, _ = Release(c, st, h, n, now)
			}
			live := Prune(c, st, now)
			if len(live.Holds) > c.Concurrency {
				t.Fatalf("seed %d step %d: %d holds, concurrency %d", seed, step, len(live.Holds), c.Concurrency)
			}
			in := 0
			for _, g := range grants {
				if g.After(now.Add(-c.Period)) {
					in++
				}
			}
			if in > c.Rate {
				t.Fatalf("seed %d step %d: %d grants in the last %v, rate %d", seed, step, in, c.Period, c.Rate)
			}
		}
	}
}

// TestHandOffKeepsTheLine plays random programs against limiters of
// concurrency and per-key bounds (those that hand off) as a store applies
// them, a release followed by HandOff, and checks after each step: the
// bounds hold, no slot is free while someone who could take it waits
// (the line never stalls on a waiter that does not ask), and each slot
// handed went to the first of the line who could take it.
func TestHandOffKeepsTheLine(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 17))
		c := &Config{Name: "l", Concurrency: 1 + rng.IntN(4)}
		if rng.IntN(2) == 0 {
			c.PerKey = 1 + rng.IntN(2)
		}
		var st State
		now := t0
		holders := []string{"a1", "a2", "a3", "b1", "b2", "c1", "c2", "d1"}
		canGo := func(st State, w Waiter) bool { return c.PerKey == 0 || heldBy(st, w.Key) < c.PerKey }
		for step := range 300 {
			now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
			h := holders[rng.IntN(len(holders))]
			before := Prune(c, st, now)
			var handed []string
			switch rng.IntN(3) {
			case 0, 1:
				r := Request{Holder: h, Key: h[:1], Priority: rng.IntN(2), Lease: time.Duration(200+rng.IntN(400)) * time.Millisecond}
				if !slices.ContainsFunc(before.Holds, func(x Hold) bool { return x.Holder == h }) {
					before = withWaiter(before, r, now)
				}
				var d Decision
				d, st = Acquire(c, st, r, now)
				handed = d.Handed
				if d.Granted && slices.ContainsFunc(before.Waiters, func(w Waiter) bool { return w.Holder == h }) {
					handed = append(handed, h) // its own turn, among them
				}
				if d.Granted && d.HandsOff {
					t.Fatalf("seed %d step %d: granted and told it waits: %+v", seed, step, d)
				}
			case 2:
				st, _, _ = Release(c, st, h, 0, now)
				st, handed = HandOff(c, st, now)
				before = Prune(c, before, now)
				before.Holds = slices.DeleteFunc(slices.Clone(before.Holds), func(x Hold) bool { return x.Holder == h })
				before.Waiters = slices.DeleteFunc(slices.Clone(before.Waiters), func(x Waiter) bool { return x.Holder == h })
			}
			// The slots went to the first who could go, in turn.
			sim := before
			var want []string
			for range handed {
				order := slices.DeleteFunc(Order(sim), func(w Waiter) bool { return !canGo(sim, w) })
				if len(order) == 0 {
					t.Fatalf("seed %d step %d: %v handed slots; no one could go", seed, step, handed)
				}
				w := order[0]
				got := w.Holder
				want = append(want, got)
				sim.Waiters = slices.DeleteFunc(slices.Clone(sim.Waiters), func(x Waiter) bool { return x.Holder == got })
				sim.Holds = append(slices.Clone(sim.Holds), Hold{Holder: got, Key: w.Key, Until: now.Add(time.Hour)})
				if sim.Served == nil {
					sim.Served = map[string]time.Time{}
				}
				sim.Served = maps.Clone(sim.Served)
				sim.Served[w.Key] = now
			}
			slices.Sort(want)
			if got := slices.Sorted(slices.Values(handed)); !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: slots went to %v; the line's first who could go: %v", seed, step, got, want)
			}
			live := Prune(c, st, now)
			if Held(live) > c.Concurrency {
				t.Fatalf("seed %d step %d: %d held, concurrency %d", seed, step, Held(live), c.Concurrency)
			}
			for _, k := range []string{"a", "b", "c", "d"} {
				if c.PerKey > 0 && heldBy(live, k) > c.PerKey {
					t.Fatalf("seed %d step %d: key %s holds %d, per key %d", seed, step, k, heldBy(live, k), c.PerKey)
				}
			}
			if Held(st) < c.Concurrency && slices.ContainsFunc(st.Waiters, func(w Waiter) bool { return canGo(st, w) }) {
				t.Fatalf("seed %d step %d: %d of %d slots held while %+v wait", seed, step, Held(st), c.Concurrency, st.Waiters)
			}
		}
	}
}

// A waiter that gives up (Release while in line) leaves the line: the slot
// goes to the next, not to it.
func TestReleaseEndsAPlaceInLine(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 1}
	var st State
	_, st = Acquire(c, st, req("a", ""), at(0))
	_, st = Acquire(c, st, req("ghost", ""), at(1))
	_, st = Acquire(c, st, req("b", ""), at(2))
	st, held, _ := Release(c, st, "ghost", 0, at(3))
	if held || len(st.Waiters) != 1 || st.Waiters[0].Holder != "b" {
		t.Fatalf("ghost gave up: held %v, line %+v", held, st.Waiters)
	}
	st, _, _ = Release(c, st, "a", 0, at(4))
	if st, handed := HandOff(c, st, at(4)); !slices.Equal(handed, []string{"b"}) || len(st.Holds) != 1 {
		t.Fatalf("a's slot went to %v: %+v", handed, st)
	}
}

// A limiter with a rate does not hand off: its waiters take their slots
// by asking (a slot counted while its waiter is parked would bunch calls
// past the rate).
func TestRateLimitersDoNotHandOff(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 1, Rate: 100, Period: time.Second}
	var st State
	_, st = Acquire(c, st, req("a", ""), at(0))
	d, st := Acquire(c, st, req("b", ""), at(1))
	if d.Granted || d.HandsOff {
		t.Fatalf("b: %+v", d)
	}
	st, _, _ = Release(c, st, "a", 0, at(2))
	if st, handed := HandOff(c, st, at(2)); len(handed) != 0 || len(st.Holds) != 0 {
		t.Fatalf("handed %v: %+v", handed, st)
	}
	if d, _ = Acquire(c, st, req("b", ""), at(3)); !d.Granted {
		t.Fatalf("b after the release: %+v", d)
	}
}

// A waiter that asked while its limiter counted a rate does not wait to be
// handed a slot (its run may be parked for the window): once the rate is
// taken away, HandOff passes it by for a waiter that listens, and leaves
// a slot free rather than hand it to it; it takes its slot by asking.
// (Red team, round ten: a slot handed to a parked waiter sat idle for a
// lease.)
func TestHandOffPassesWaitersThatDoNotListen(t *testing.T) {
	rated := &Config{Name: "l", Concurrency: 1, Rate: 100, Period: time.Second}
	plain := &Config{Name: "l", Concurrency: 1}
	var st State
	_, st = Acquire(rated, st, req("a", ""), at(0))
	d, st := Acquire(rated, st, req("b", ""), at(1))
	if d.Granted || d.HandsOff {
		t.Fatalf("b, at a rate: %+v", d)
	}
	d, st = Acquire(plain, st, req("c", ""), at(2))
	if d.Granted || !d.HandsOff {
		t.Fatalf("c, once the rate is gone: %+v", d)
	}
	st, _, _ = Release(plain, st, "a", 0, at(3))
	st, handed := HandOff(plain, st, at(3))
	if !slices.Equal(handed, []string{"c"}) {
		t.Fatalf("a's slot handed to %v, want c (b does not listen)", handed)
	}
	st, _, _ = Release(plain, st, "c", 0, at(4))
	if st, handed = HandOff(plain, st, at(4)); len(handed) != 0 || len(st.Holds) != 0 {
		t.Fatalf("c's slot handed to %v: %+v", handed, st)
	}
	if d, _ = Acquire(plain, st, req("b", ""), at(5)); !d.Granted {
		t.Fatalf("b asking for the free slot: %+v", d)
	}
}

// withWaiter is st with r in line as Acquire puts it.
func withWaiter(st State, r Request, now time.Time) State {
	for i, w := range st.Waiters {
		if w.Holder == r.Holder {
			st.Waiters = append([]Waiter(nil), st.Waiters...)
			st.Waiters[i] = Waiter{Holder: r.Holder, Key: r.Key, Priority: r.Priority, Since: w.Since, Until: now.Add(r.Lease), Lease: r.Lease}
			return st
		}
	}
	st.Waiters = append(append([]Waiter(nil), st.Waiters...), Waiter{Holder: r.Holder, Key: r.Key, Priority: r.Priority, Since: now, Until: now.Add(r.Lease), Lease: r.Lease})
	return st
}

// With every slot given back, the keys take turns: the one served longest
// ago (or never) goes first, however many the other has in line.
func TestKeysTakeTurns(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 1}
	var st State
	var d Decision
	for i := range 4 {
		_, st = Acquire(c, st, req(fmt.Sprint("a", i), "a"), at(i))
	}
	// a0 holds; a1..a3 wait; b0 comes last.
	_, st = Acquire(c, st, req("b0", "b"), at(10))
	st, _, _ = Release(c, st, "a0", 0, at(20))
	// a1 asks first, but b has never been served.
	if d, st = Acquire(c, st, req("a1", "a"), at(21)); d.Granted || d.Ahead != 0 || !slices.Equal(d.Handed, []string{"b0"}) {
		t.Fatalf("a1 went before b0: %+v", d)
	}
	if d, st = Acquire(c, st, req("b0", "b"), at(22)); !d.Granted {
		t.Fatalf("b0: %+v", d)
	}
	st, _, _ = Release(c, st, "b0", 0, at(30))
	if d, _ = Acquire(c, st, req("a1", "a"), at(31)); !d.Granted {
		t.Fatalf("a's turn after b's: %+v", d)
	}
}

func grantReq(holder, key string, n int) Request {
	return Request{Holder: holder, Key: key, Lease: 10 * time.Second, Grant: n}
}

// A grant is a block of slots under one hold: it grows by what is free,
// shrinks when asked, never grows past anyone in line, and is refused by a
// limiter with a window.
func TestGrants(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 5, PerKey: 4}
	var st State
	d, st := Acquire(c, st, grantReq("g1", "a", 3), at(0))
	if !d.Granted || d.Count != 3 || Held(st) != 3 {
		t.Fatalf("a grant of 3 of 5: %+v, held %d", d, Held(st))
	}
	// Growing past the key's bound: to 4, not 6.
	if d, st = Acquire(c, st, grantReq("g1", "a", 6), at(1)); d.Count != 4 {
		t.Fatalf("grown past per-key 4: %+v", d)
	}
	// One slot left: a single request takes it, a grant of another key
	// grows to nothing more.
	if d, st = Acquire(c, st, req("s", "b"), at(2)); !d.Granted {
		t.Fatalf("the fifth slot: %+v", d)
	}
	if d, st = Acquire(c, st, grantReq("g2", "b", 2), at(3)); d.Granted || d.Count != 0 || d.Reason != Concurrency {
		t.Fatalf("a grant with no slot free: %+v", d)
	}
	if len(st.Waiters) != 0 {
		t.Fatalf("a grant joined the line: %+v", st.Waiters)
	}
	// Someone waits: the grant does not grow, and shrinks when asked.
	d, st = Acquire(c, st, req("w", "b"), at(4))
	if d.Granted {
		t.Fatalf("w with every slot held: %+v", d)
	}
	if d, st = Acquire(c, st, grantReq("g1", "a", 4), at(5)); d.Count != 4 || d.Waiting != 1 {
		t.Fatalf("a renewed grant should say one waits: %+v", d)
	}
	// What it gives back goes to w at once.
	if d, st = Acquire(c, st, grantReq("g1", "a", 2), at(6)); !d.Granted || d.Count != 2 || Held(st) != 4 || !slices.Equal(d.Handed, []string{"w"}) {
		t.Fatalf("shrunk to 2: %+v, held %d", d, Held(st))
	}
	// w holds its slot, and asking finds it; with no one in line the
	// grant grows again by what is free.
	if d, st = Acquire(c, st, req("w", "b"), at(7)); !d.Granted || Held(st) != 4 {
		t.Fatalf("w after the shrink: %+v", d)
	}
	if d, st = Acquire(c, st, grantReq("g1", "a", 4), at(8)); d.Count != 3 {
		t.Fatalf("a grant with one slot free and no one in line: %+v", d)
	}
	// Released, the grant's slots all come back.
	st, ok, _ := Release(c, st, "g1", 0, at(9))
	if !ok || Held(st) != 2 {
		t.Fatalf("released: %v, held %d", ok, Held(st))
	}
	// A lowered bound shrinks a grant at its renewal.
	_, st = Acquire(c, st, grantReq("g4", "c", 3), at(9))
	if d, st = Acquire(&Config{Name: "l", Concurrency: 3}, st, grantReq("g4", "c", 3), at(9)); d.Count != 1 {
		t.Fatalf("a grant renewed under a concurrency lowered to 3 with 2 held by others: %+v", d)
	}
	st, _, _ = Release(c, st, "g4", 0, at(9))
	// Its lease runs out like a slot's.
	_, st = Acquire(c, st, grantReq("g3", "a", 3), at(10))
	if Held(Prune(c, st, at(10+10_000))) != 0 {
		t.Fatalf("a grant outlived its lease: %+v", Prune(c, st, at(10+10_000)).Holds)
	}
	// A window takes no grants.
	for _, rc := range []*Config{{Name: "r", Rate: 5, Period: time.Second}, {Name: "b", Concurrency: 3, Budget: 5, Period: time.Second}} {
		if d, _ := Acquire(rc, State{}, grantReq("g", "a", 2), at(0)); d.Granted || d.Reason != NoGrant {
			t.Errorf("%+v: a grant %+v", rc, d)
		}
	}
	if err := (&Request{Holder: "h", Lease: time.Second, Grant: -1}).Check(); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative grant: %v", err)
	}
}

// Grants mixed with single slots and releases never hold more than the
// limiter's concurrency, nor a key more than its per-key bound, and a
// grant never grows while someone is in line.
func TestGrantsKeepTheBounds(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 11))
		c := &Config{Name: "l", Concurrency: 1 + rng.IntN(6), PerKey: rng.IntN(4)}
		var st State
		now := t0
		holders := []string{"a1", "a2", "b1", "b2", "c1"}
		for step := range 400 {
			now = now.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
			h := holders[rng.IntN(len(holders))]
			r := Request{Holder: h, Key: h[:1], Priority: rng.IntN(2), Lease: time.Duration(100+rng.IntN(400)) * time.Millisecond}
			before := Prune(c, st, now)
			had := 0
			for _, x := range before.Holds {
				if x.Holder == h {
					had = x.Slots()
				}
			}
			switch rng.IntN(4) {
			case 0:
				_, st = Acquire(c, st, r, now)
			case 1, 2:
				r.Grant = 1 + rng.IntN(5)
				var d Decision
				d, st = Acquire(c, st, r, now)
				if d.Count > max(had, r.Grant) || d.Count > had && len(before.Waiters) > 0 {
					t.Fatalf("seed %d step %d: %s's grant went from %d to %d asking %d with %d in line", seed, step, h, had, d.Count, r.Grant, len(before.Waiters))
				}
			case 3:
				st, _, _ = Release(c, st, h, 0, now)
			}
			live := Prune(c, st, now)
			if Held(live) > c.Concurrency {
				t.Fatalf("seed %d step %d: %d slots held, concurrency %d", seed, step, Held(live), c.Concurrency)
			}
			if c.PerKey > 0 {
				for _, k := range []string{"a", "b", "c"} {
					if n := heldBy(live, k); n > c.PerKey {
						t.Fatalf("seed %d step %d: key %s holds %d, per-key %d", seed, step, k, n, c.PerKey)
					}
				}
			}
		}
	}
}

// Stores read their clock before they take a limiter's lock, so the
// requests they decide come with clocks out of order. The rate still holds
// in every window of the times the grants were made at (Latest): a request
// with an older clock than the last decision is decided at the last's.
// (Without Latest, a later decision's pruning lets an older one through.)
func TestRateHoldsWithClocksOutOfOrder(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 13))
		c := &Config{Name: "l", Rate: 1 + rng.IntN(5), Period: time.Duration(100+rng.IntN(400)) * time.Millisecond}
		var st State
		clock := t0
		var grants []time.Time
		var granted []string
		holders := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		for step := range 600 {
			clock = clock.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
			at := clock.Add(-time.Duration(rng.IntN(120)) * time.Millisecond) // read before the lock
			h := fmt.Sprintf("%s%d", holders[rng.IntN(len(holders))], step)
			r := Request{Holder: h, Key: h[:1], Lease: time.Duration(50+rng.IntN(200)) * time.Millisecond}
			if rng.IntN(3) == 0 && len(granted) > 0 {
				// A release, its clock out of order too: it prunes the
				// window at its own time.
				st, _, _ = Release(c, st, granted[rng.IntN(len(granted))], 0, at)
				continue
			}
			var d Decision
			d, st = Acquire(c, st, r, at)
			if d.Granted {
				grants = append(grants, d.Until.Add(-r.Lease))
				granted = append(granted, h)
			}
		}
		slices.SortFunc(grants, func(a, b time.Time) int { return a.Compare(b) })
		for i := range grants {
			j := i
			for j < len(grants) && grants[j].Sub(grants[i]) < c.Period {
				j++
			}
			if j-i > c.Rate {
				t.Fatalf("seed %d: %d grants within %v of %v; the rate is %d", seed, j-i, c.Period, grants[i], c.Rate)
			}
		}
	}
}

// A decision says when the line may move, for the stores to wake who waits
// (store.LimiterWatcher): a waiter joins the line once (asking again keeps
// its place and says nothing new), and a grant that shrinks says how many
// slots it gave back.
func TestJoinedAndFreed(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 2}
	var st State
	d, st := Acquire(c, st, grantReq("g", "a", 2), at(0))
	if !d.Granted || d.Count != 2 || d.Freed != 0 || d.Joined {
		t.Fatalf("a grant of 2: %+v", d)
	}
	if d, st = Acquire(c, st, req("w", "b"), at(1)); d.Granted || !d.Joined {
		t.Fatalf("w, new in line: %+v", d)
	}
	if d, st = Acquire(c, st, req("w", "b"), at(2)); d.Granted || d.Joined {
		t.Fatalf("w, asking again: %+v", d)
	}
	if d, st = Acquire(c, st, grantReq("g", "a", 1), at(3)); d.Count != 1 || d.Freed != 1 || d.Waiting != 1 {
		t.Fatalf("the grant shrunk to 1 while w waits: %+v", d)
	}
	if d, st = Acquire(c, st, grantReq("g", "a", 1), at(4)); d.Count != 1 || d.Freed != 0 {
		t.Fatalf("the grant renewed at 1: %+v", d)
	}
	if d, _ = Acquire(c, st, req("w", "b"), at(5)); !d.Granted || d.Joined {
		t.Fatalf("w, with a slot given back: %+v", d)
	}
}

// HolderRun is StepHolder's run, and nothing for another holder's form.
func TestHolderRun(t *testing.T) {
	for _, c := range []struct {
		holder, run string
		ok          bool
	}{
		{StepHolder("run_1", 3, 2, 1), "run_1", true},
		{StepHolder("sched:nightly:2026-12-07T00:00:00Z", 12, 1, 7), "sched:nightly:2026-12-07T00:00:00Z", true},
		{"run_1/3/2", "run_1", true}, // the form before executions were named
		{"r/1/2/x", "", false},
		{"a/1/2/3/4", "", false},
		{"engine-7f3a", "", false},
		{"a/b", "", false},
		{"/1/2", "", false},
		{"r/x/2", "", false},
		{"r/1/y", "", false},
	} {
		if run, ok := HolderRun(c.holder); run != c.run || ok != c.ok {
			t.Errorf("HolderRun(%q) = %q, %v; want %q, %v", c.holder, run, ok, c.run, c.ok)
		}
	}
}

// A lowered bound applies to a grant's new takes, not to the slots its
// holder has handed out: a renewal keeps those (Over says how many past
// the bound), and gives back only idle ones, down to the bound as they end.
// (Red team, round eleven: a bound lowered from 10 to 9 took the grant to
// 9 with 10 in use, and the engine stopped all ten.)
func TestALoweredBoundKeepsAGrantsSlotsInUse(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 10}
	var st State
	d, st := Acquire(c, st, grantReq("g", "", 10), at(0))
	if d.Count != 10 {
		t.Fatalf("a grant of 10: %+v", d)
	}
	lowered := &Config{Name: "l", Concurrency: 9}
	renew := func(inUse int, when int) Decision {
		r := grantReq("g", "", 10)
		r.InUse = inUse
		d, st = Acquire(lowered, st, r, at(when))
		return d
	}
	if d := renew(10, 1); d.Count != 10 || d.Over != 1 || Held(st) != 10 {
		t.Fatalf("renewed with 10 in use under a bound of 9: %+v, held %d", d, Held(st))
	}
	if d, _ := Acquire(lowered, st, req("s", ""), at(2)); d.Granted {
		t.Fatalf("a single ask past the lowered bound: %+v", d)
	}
	if d := renew(9, 3); d.Count != 9 || d.Over != 0 {
		t.Fatalf("one ended: %+v", d)
	}
	if d := renew(4, 4); d.Count != 9 || d.Over != 0 {
		t.Fatalf("idle slots are kept up to the bound: %+v", d)
	}
	// Without InUse, as before: the renewal keeps no more than the bound.
	if d := renew(0, 5); d.Count != 9 {
		t.Fatalf("a renewal that says nothing of its use: %+v", d)
	}
}

// A window of many uses keeps a bounded state (compactUses), and its rate
// still holds: counted from the grants themselves, no window of the period
// ever holds more than the rate, and the limiter lets through nearly as
// many as it may. (Red team, round twelve: a rate of a billion kept one
// entry a use, and each decision cost more as the window filled.)
func TestAWindowOfManyUsesStaysBounded(t *testing.T) {
	c := &Config{Name: "l", Rate: 5000, Period: 10 * time.Second}
	rng := rand.New(rand.NewPCG(1, 2))
	var st State
	var grants []time.Time
	now := t0
	for i := range 25000 {
		now = now.Add(time.Duration(rng.IntN(1500)) * time.Microsecond)
		h := fmt.Sprint("h", i)
		var d Decision
		if d, st = Acquire(c, st, Request{Holder: h, Lease: time.Second}, now); d.Granted {
			grants = append(grants, now)
			st, _, _ = Release(c, st, h, 1, now)
		}
		if n := len(st.Uses); n > maxUses+1 {
			t.Fatalf("step %d: the window keeps %d entries, want at most %d", i, n, maxUses+1)
		}
	}
	// No window of the period holds more than the rate.
	lo := 0
	for hi, g := range grants {
		for !grants[lo].After(g.Add(-c.Period)) {
			lo++
		}
		if n := hi - lo + 1; n > c.Rate {
			t.Fatalf("%d grants in the window ending %v, the rate is %d", n, g.Sub(t0), c.Rate)
		}
	}
	// And it lets through nearly all it may: a merged use leaves the
	// window at most period/256 late.
	elapsed := now.Sub(t0)
	ideal := float64(c.Rate) * float64(elapsed) / float64(c.Period)
	if got := float64(len(grants)); got < 0.97*ideal {
		t.Fatalf("%d grants over %v, want about %.0f", len(grants), elapsed, ideal)
	}
	var taken int
	var spent int64
	for _, u := range Prune(c, st, now).Uses {
		taken += u.N()
		spent += u.Cost
	}
	if int64(taken) != spent || taken > c.Rate {
		t.Fatalf("the window says %d taken and %d spent (each use cost 1), rate %d", taken, spent, c.Rate)
	}
}

// A queue's uses (runs', which nothing charges) are merged too; a step's
// use a release may still charge keeps its entry, and is charged.
func TestCompactUsesKeepsWhatMayBeCharged(t *testing.T) {
	c := &Config{Name: "q", Rate: 1 << 30, Period: time.Hour}
	var uses []Use
	for i := range 2000 {
		uses = append(uses, Use{Holder: RunHolder(fmt.Sprint("r", i)), At: t0.Add(time.Duration(i) * time.Second)})
	}
	uses = append(uses, Use{Holder: "step-holder", At: t0.Add(time.Second)})
	slices.SortStableFunc(uses, func(a, b Use) int { return a.At.Compare(b.At) })
	out := compactUses(c, uses)
	taken := 0
	for _, u := range out {
		taken += u.N()
	}
	if len(out) > maxUses/2+2 || taken != 2001 {
		t.Fatalf("%d entries standing for %d uses, want at most %d for 2001", len(out), taken, maxUses/2+2)
	}
	if out[len(out)-1].At != t0.Add(1999*time.Second) {
		t.Fatalf("the latest use moved: %v", out[len(out)-1].At)
	}
	st, _, err := Release(c, State{Uses: out}, "step-holder", 7, t0.Add(2000*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var spent int64
	for _, u := range st.Uses {
		spent += u.Cost
	}
	if spent != 7 {
		t.Fatalf("the step's use charged %d, want 7", spent)
	}
}

// Only a change that lets a window's waiters through sooner wakes the runs
// parked for it (OpensWindows): a rate or a budget taken off or raised, a
// shorter period.
func TestOpensWindows(t *testing.T) {
	rate := Config{Name: "l", Concurrency: 2, Rate: 10, Period: time.Hour}
	budget := Config{Name: "l", Budget: 1000, Period: time.Hour}
	for _, c := range []struct {
		name     string
		old, new Config
		want     bool
	}{
		{"the same bounds", rate, rate, false},
		{"a rate taken off", rate, Config{Name: "l", Concurrency: 2}, true},
		{"a rate raised", rate, Config{Name: "l", Concurrency: 2, Rate: 11, Period: time.Hour}, true},
		{"a rate lowered", rate, Config{Name: "l", Concurrency: 2, Rate: 9, Period: time.Hour}, false},
		{"a shorter period", rate, Config{Name: "l", Concurrency: 2, Rate: 10, Period: time.Minute}, true},
		{"a longer period", rate, Config{Name: "l", Concurrency: 2, Rate: 10, Period: 2 * time.Hour}, false},
		{"concurrency raised", rate, Config{Name: "l", Concurrency: 3, Rate: 10, Period: time.Hour}, false},
		{"a rate added", Config{Name: "l", Concurrency: 2}, rate, false},
		{"a budget taken off", budget, Config{Name: "l", Concurrency: 1}, true},
		{"a budget raised", budget, Config{Name: "l", Budget: 2000, Period: time.Hour}, true},
		{"a budget lowered", budget, Config{Name: "l", Budget: 10, Period: time.Hour}, false},
	} {
		if got := OpensWindows(&c.old, &c.new); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if OpensWindows(nil, &rate) {
		t.Error("a new limiter opens a window")
	}
}

func TestHeldFor(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 1}
	var st State
	d, st := Acquire(c, st, Request{Holder: "a", Lease: time.Second}, t0)
	if !d.Granted {
		t.Fatal("a not granted")
	}
	_, st = Acquire(c, st, Request{Holder: "b", Lease: time.Second}, t0.Add(10*time.Millisecond))
	if _, ok := HeldFor(st, "b", t0.Add(10*time.Millisecond)); ok {
		t.Fatal("b, in line, read as holding")
	}
	// a gives its slot back at 100 ms: HandOff gives it to b, whose lease
	// starts then.
	st, _, _ = Release(c, st, "a", 0, t0.Add(100*time.Millisecond))
	st, handed := HandOff(c, st, t0.Add(100*time.Millisecond))
	if !slices.Equal(handed, []string{"b"}) {
		t.Fatalf("handed %v, want b", handed)
	}
	for _, tc := range []struct {
		name string
		now  time.Duration
		want time.Duration // 0: not held
	}{
		{"just handed", 100 * time.Millisecond, 1100 * time.Millisecond},
		{"later", 600 * time.Millisecond, 1100 * time.Millisecond},
		{"at its end", 1100 * time.Millisecond, 0},
		{"past it", 2 * time.Second, 0},
		// A reader whose clock is behind the decision that handed it
		// counts the lease from its own clock's view of that decision.
		{"a clock 50 ms behind", 50 * time.Millisecond, 1050 * time.Millisecond},
	} {
		until, ok := HeldFor(st, "b", t0.Add(tc.now))
		if ok != (tc.want != 0) || (ok && !until.Equal(t0.Add(tc.want))) {
			t.Errorf("%s: HeldFor = %v, %v; want %v", tc.name, until.Sub(t0), ok, tc.want)
		}
	}
	if _, ok := HeldFor(st, "a", t0.Add(100*time.Millisecond)); ok {
		t.Error("a read as holding what it gave back")
	}
}

// TestHeldForHoldsUntilItSays: whatever a reader of a limiter's state is
// told by HeldFor, no decision of anyone else's, at any clock before the
// time it was told, takes the slot from it. This is what lets a waiter
// handed a slot start its step on a read, without a decision of its own.
func TestHeldForHoldsUntilItSays(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 23))
		c := &Config{Name: "l", Concurrency: 1 + rng.IntN(3)}
		if rng.IntN(2) == 0 {
			c.PerKey = 1
		}
		var st State
		now := t0
		holders := []string{"a1", "a2", "b1", "b2", "c1", "d1"}
		for step := range 200 {
			now = now.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
			// Each decision on a clock up to 100 ms off.
			at := now.Add(time.Duration(rng.IntN(200)-100) * time.Millisecond)
			h := holders[rng.IntN(len(holders))]
			if rng.IntN(3) < 2 {
				_, st = Acquire(c, st, Request{Holder: h, Key: h[:1], Priority: rng.IntN(2), Lease: time.Duration(200+rng.IntN(400)) * time.Millisecond}, at)
			} else {
				st, _, _ = Release(c, st, h, 0, at)
				st, _ = HandOff(c, st, at)
			}
			// A reader, on a clock up to 100 ms off too, told it holds.
			read := now.Add(time.Duration(rng.IntN(200)-100) * time.Millisecond)
			for _, r := range holders {
				until, ok := HeldFor(st, r, read)
				if !ok {
					continue
				}
				// Anyone else's decision at any time before until keeps r's hold.
				other := holders[rng.IntN(len(holders))]
				if other == r {
					continue
				}
				when := read.Add(time.Duration(rng.Int64N(int64(until.Sub(read)))))
				_, after := Acquire(c, st, Request{Holder: other, Key: other[:1], Lease: 300 * time.Millisecond}, when)
				if !slices.ContainsFunc(after.Holds, func(x Hold) bool { return x.Holder == r }) {
					t.Fatalf("seed %d step %d: %s read as held until %v (read at %v), taken back by %s at %v", seed, step, r, until.Sub(t0), read.Sub(t0), other, when.Sub(t0))
				}
			}
		}
	}
}

// Two executions of a run name its attempt apart: a stale one cannot
// take or give back the live one's slot.
func TestStepHolderNamesTheExecution(t *testing.T) {
	c := &Config{Name: "l", Concurrency: 1}
	live, stale := StepHolder("r", 1, 1, 3), StepHolder("r", 1, 1, 1)
	if live == stale {
		t.Fatal("two executions, one holder")
	}
	var st State
	d, st := Acquire(c, st, Request{Holder: live, Lease: time.Second}, t0)
	if !d.Granted {
		t.Fatal("the live execution was refused a free slot")
	}
	if d, _ := Acquire(c, st, Request{Holder: stale, Lease: time.Second}, t0.Add(time.Millisecond)); d.Granted {
		t.Fatal("the stale execution was granted the live one's slot")
	}
	st, released, _ := Release(c, st, stale, 0, t0.Add(2*time.Millisecond))
	if released || Held(st) != 1 {
		t.Fatalf("the stale execution's release freed the live one's slot: released %v, held %d", released, Held(st))
	}
	for _, h := range []string{live, stale} {
		if run, op, attempt, ok := HolderStep(h); !ok || run != "r" || op != 1 || attempt != 1 {
			t.Errorf("HolderStep(%q) = %q, %d, %d, %v", h, run, op, attempt, ok)
		}
	}
}
