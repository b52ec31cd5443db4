package limit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func cand(id, key string, prio, sinceMS int) Candidate {
	return Candidate{Holder: RunHolder(id), Key: key, Priority: prio, Since: at(sinceMS)}
}

func holders(a Admitted) []string {
	var out []string
	for _, x := range a.Runs {
		out = append(out, x.Holder)
	}
	return out
}

func all(string) bool { return true }

func TestAdmitOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     Config
		st    State
		cands []Candidate
		max   int
		want  []string
		why   Reason
	}{
		{"priority first", Config{Name: "q", Concurrency: 2}, State{},
			[]Candidate{cand("a", "", 0, 0), cand("b", "", 5, 10), cand("c", "", 1, 5)}, 10,
			[]string{"run:b", "run:c"}, Concurrency},
		{"then age", Config{Name: "q", Concurrency: 3}, State{},
			[]Candidate{cand("a", "", 0, 30), cand("b", "", 0, 10), cand("c", "", 0, 20)}, 10,
			[]string{"run:b", "run:c", "run:a"}, ""},
		{"keys take turns", Config{Name: "q", Concurrency: 4}, State{},
			[]Candidate{cand("a1", "a", 0, 0), cand("a2", "a", 0, 1), cand("a3", "a", 0, 2), cand("b1", "b", 0, 50)}, 10,
			[]string{"run:a1", "run:b1", "run:a2", "run:a3"}, ""},
		{"per key", Config{Name: "q", PerKey: 1}, State{},
			[]Candidate{cand("a1", "a", 0, 0), cand("a2", "a", 0, 1), cand("b1", "b", 0, 50)}, 10,
			[]string{"run:a1", "run:b1"}, Key},
		{"a key served longest ago goes first", Config{Name: "q", Concurrency: 1},
			State{Served: map[string]time.Time{"a": at(100), "b": at(50)}},
			[]Candidate{cand("a1", "a", 0, 0), cand("b1", "b", 0, 10)}, 10,
			[]string{"run:b1"}, Concurrency},
		{"rate", Config{Name: "q", Rate: 2, Period: time.Second},
			State{Uses: []Use{{Holder: "run:x", At: at(-500)}}},
			[]Candidate{cand("a", "", 0, 0), cand("b", "", 0, 1)}, 10,
			[]string{"run:a"}, Rate},
		{"max", Config{Name: "q", Concurrency: 10}, State{},
			[]Candidate{cand("a", "", 0, 0), cand("b", "", 0, 1)}, 1,
			[]string{"run:a"}, Queue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := Admit(&tc.c, tc.st, tc.cands, all, at(0), tc.max)
			if got := holders(a); !slices.Equal(got, tc.want) || a.Reason != tc.why {
				t.Fatalf("admitted %v (%q), want %v (%q)", got, a.Reason, tc.want, tc.why)
			}
		})
	}
}

// A run's slot is held until it ends, lease or not; then it comes back.
func TestAdmittedRunsHoldUntilTheyEnd(t *testing.T) {
	c := &Config{Name: "q", Concurrency: 1}
	a, st := Admit(c, State{}, []Candidate{cand("a", "", 0, 0)}, all, at(0), 5)
	if len(a.Runs) != 1 {
		t.Fatalf("first: %+v", a)
	}
	// Hours later, still in flight (parked, or on another worker): held.
	if a, _ = Admit(c, st, []Candidate{cand("b", "", 0, 1)}, all, at(3_600_000), 5); len(a.Runs) != 0 || a.Reason != Concurrency {
		t.Fatalf("b while a runs: %+v", a)
	}
	if !slices.Equal(RunHolds(st), []string{"run:a"}) {
		t.Fatalf("run holds %v", RunHolds(st))
	}
	ended := func(h string) bool { return h != "run:a" }
	if a, st = Admit(c, st, []Candidate{cand("b", "", 0, 1)}, ended, at(3_600_001), 5); !slices.Equal(holders(a), []string{"run:b"}) {
		t.Fatalf("b after a ended: %+v", a)
	}
	// A step of the same limiter sees the run's hold.
	if d, _ := Acquire(c, st, req("step", ""), at(3_600_002)); d.Granted || d.Reason != Concurrency {
		t.Fatalf("a step beside a run: %+v", d)
	}
}

// A per-key bound holds for steps too.
func TestPerKeyForSteps(t *testing.T) {
	c := &Config{Name: "l", PerKey: 1}
	var st State
	var d Decision
	if d, st = Acquire(c, st, req("a1", "a"), at(0)); !d.Granted {
		t.Fatal(d)
	}
	if d, st = Acquire(c, st, req("a2", "a"), at(1)); d.Granted || d.Reason != Key {
		t.Fatalf("a2: %+v", d)
	}
	// b is not held up by a's second, first in line.
	if d, st = Acquire(c, st, req("b1", "b"), at(2)); !d.Granted {
		t.Fatalf("b1: %+v", d)
	}
	st, _, _ = Release(c, st, "a1", 0, at(3))
	if d, _ = Acquire(c, st, req("a2", "a"), at(4)); !d.Granted {
		t.Fatalf("a2 after a1: %+v", d)
	}
}

// Whatever the queue, admissions keep every bound, and each admitted run
// was first among those that could go.
func TestAdmitKeepsBounds(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 11))
		c := &Config{Name: "q", Concurrency: rng.IntN(4), PerKey: rng.IntN(3), Rate: rng.IntN(6), Period: time.Duration(100+rng.IntN(900)) * time.Millisecond}
		if c.Concurrency == 0 && c.PerKey == 0 && c.Rate == 0 {
			c.Concurrency = 2
		}
		if c.Rate == 0 {
			c.Period = 0
		}
		var st State
		var line []Candidate
		running := map[string]string{} // holder -> key
		var starts []time.Time
		now := t0
		for step := range 300 {
			now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
			switch rng.IntN(3) {
			case 0:
				k := fmt.Sprint("k", rng.IntN(3))
				line = append(line, Candidate{Holder: RunHolder(fmt.Sprint(step)), Key: k, Priority: rng.IntN(2), Since: now})
			case 1:
				for h := range running {
					if rng.IntN(2) == 0 {
						delete(running, h)
					}
				}
			}
			a, next := Admit(c, st, line, func(h string) bool { _, ok := running[h]; return ok }, now, 1+rng.IntN(4))
			st = next
			for _, x := range a.Runs {
				running[x.Holder] = x.Key
				starts = append(starts, now)
				line = slices.DeleteFunc(line, func(y Candidate) bool { return y.Holder == x.Holder })
			}
			if c.Concurrency > 0 && len(running) > c.Concurrency {
				t.Fatalf("seed %d step %d: %d running, concurrency %d", seed, step, len(running), c.Concurrency)
			}
			if c.PerKey > 0 {
				per := map[string]int{}
				for _, k := range running {
					if per[k]++; per[k] > c.PerKey {
						t.Fatalf("seed %d step %d: key %s runs %d, per key %d", seed, step, k, per[k], c.PerKey)
					}
				}
			}
			if c.Rate > 0 {
				in := 0
				for _, s := range starts {
					if s.After(now.Add(-c.Period)) {
						in++
					}
				}
				if in > c.Rate {
					t.Fatalf("seed %d step %d: %d starts in %v, rate %d", seed, step, in, c.Period, c.Rate)
				}
			}
			// Nobody of a higher priority whose key had room was passed
			// over for a lower one.
			for _, x := range a.Runs {
				for _, y := range line {
					if y.Priority > x.Priority && (c.PerKey == 0 || countKey(running, y.Key) < c.PerKey) {
						t.Fatalf("seed %d step %d: %s (priority %d) admitted before %s (priority %d)", seed, step, x.Holder, x.Priority, y.Holder, y.Priority)
					}
				}
			}
		}
	}
}

func countKey(running map[string]string, key string) int {
	n := 0
	for _, k := range running {
		if k == key {
			n++
		}
	}
	return n
}
