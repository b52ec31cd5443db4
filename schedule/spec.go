// Package schedule holds the rules of weir's schedules, once, as pure
// functions: what a schedule expression means (Parse, Spec.Next), and which
// of a schedule's ticks start a run now, which wait and which are passed
// over (Decide). Nothing here does I/O or reads a clock: a store keeps a
// schedule's State, and the engine that holds the schedule's lease asks
// Decide and starts each tick's run under the tick's own run id (RunID),
// so that a tick starts one run however many processes evaluate it and
// whichever of them dies.
package schedule

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
	// Schedules name IANA time zones: the database ships in the binary, so
	// that a machine without /usr/share/zoneinfo reads them alike.
	_ "time/tzdata"
)

// ErrInvalid is an expression, a time zone or a policy the rules refuse.
var ErrInvalid = errors.New("schedule: invalid")

// MinEvery bounds an interval schedule (@every): shorter ones would make
// every poll start a run.
const MinEvery = 100 * time.Millisecond

// Spec is a parsed schedule expression: a cron expression in a time zone,
// or an interval.
type Spec struct {
	expr  string
	loc   *time.Location
	every time.Duration

	minute, hour, dom, month, dow uint64 // bit i: value i matches
	domStar, dowStar              bool   // the field was * (or ?)
}

// String is the expression the Spec was parsed from.
func (s *Spec) String() string { return s.expr }

// Location is the time zone a cron Spec's fields are read in.
func (s *Spec) Location() *time.Location { return s.loc }

// Every is an interval Spec's period; 0 for a cron one.
func (s *Spec) Every() time.Duration { return s.every }

var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Parse reads expr in time zone tz (an IANA name such as "Europe/Paris";
// "" is UTC):
//
//   - a cron expression of five fields, minute (0-59), hour (0-23), day of
//     month (1-31), month (1-12 or JAN-DEC) and day of week (0-7 or
//     SUN-SAT, 0 and 7 both Sunday), each "*", "?" (as "*"), a value, a
//     range "a-b", a step "*/s", "a-b/s" or "a/s", or a list of those
//     joined by commas. As in cron, when both day fields are restricted a
//     day matching either one matches;
//   - a macro: @yearly (@annually), @monthly, @weekly, @daily (@midnight),
//     @hourly;
//   - an interval, "@every D" with D a Go duration (90s, 15m, 1h30m) of at
//     least MinEvery in whole milliseconds: ticks at the multiples of D
//     since the Unix epoch, the same in every process and every time zone.
func Parse(expr, tz string) (*Spec, error) {
	loc, err := LoadLocation(tz)
	if err != nil {
		return nil, err
	}
	s := &Spec{expr: expr, loc: loc}
	e := strings.TrimSpace(expr)
	if d, ok := strings.CutPrefix(e, "@every"); ok {
		d = strings.TrimSpace(d)
		every, err := time.ParseDuration(d)
		switch {
		case err != nil || d == "":
			return nil, fmt.Errorf("%w: %q: @every wants a duration (90s, 15m, 1h30m)", ErrInvalid, expr)
		case every < MinEvery:
			return nil, fmt.Errorf("%w: %q: an interval of at least %v", ErrInvalid, expr, MinEvery)
		case every%time.Millisecond != 0:
			return nil, fmt.Errorf("%w: %q: an interval of whole milliseconds", ErrInvalid, expr)
		}
		s.every = every
		return s, nil
	}
	if m, ok := macros[strings.ToLower(e)]; ok {
		e = m
	} else if strings.HasPrefix(e, "@") {
		return nil, fmt.Errorf("%w: %q: want @yearly, @monthly, @weekly, @daily, @hourly or @every D", ErrInvalid, expr)
	}
	f := strings.Fields(e)
	if len(f) != 5 {
		return nil, fmt.Errorf("%w: %q: a cron expression has 5 fields (minute hour day-of-month month day-of-week), this has %d", ErrInvalid, expr, len(f))
	}
	fields := []struct {
		name     string
		min, max int
		names    []string
		bits     *uint64
		star     *bool
	}{
		{"minute", 0, 59, nil, &s.minute, nil},
		{"hour", 0, 23, nil, &s.hour, nil},
		{"day of month", 1, 31, nil, &s.dom, &s.domStar},
		{"month", 1, 12, monthNames, &s.month, nil},
		{"day of week", 0, 7, dayNames, &s.dow, &s.dowStar},
	}
	for i, fd := range fields {
		b, star, err := parseField(f[i], fd.min, fd.max, fd.names)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: the %s field %q: %v", ErrInvalid, expr, fd.name, f[i], err)
		}
		*fd.bits = b
		if fd.star != nil {
			*fd.star = star
		}
	}
	if s.dow&(1<<7) != 0 { // 7 is Sunday too
		s.dow |= 1
	}
	return s, nil
}

// LoadLocation reads a time zone's IANA name; "" and "UTC" are UTC.
func LoadLocation(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if tz == "Local" || len(tz) > 64 {
		return nil, fmt.Errorf("%w: time zone %q: name an IANA zone (Europe/Paris, America/New_York) or UTC", ErrInvalid, tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%w: time zone %q: not an IANA zone (Europe/Paris, America/New_York)", ErrInvalid, tz)
	}
	return loc, nil
}

var (
	monthNames = []string{"", "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	dayNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
)

// parseField reads one cron field into a bit set of its values.
func parseField(f string, lo, hi int, names []string) (uint64, bool, error) {
	if f == "*" || f == "?" {
		return span(lo, hi, 1), true, nil
	}
	var out uint64
	for _, item := range strings.Split(f, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > hi {
				return 0, false, fmt.Errorf("a step %q: want 1 to %d", stepText, hi)
			}
			step = n
		}
		a, b := lo, hi
		switch {
		case rng == "*" || rng == "?":
		default:
			first, last, isRange := strings.Cut(rng, "-")
			var err error
			if a, err = value(first, lo, hi, names); err != nil {
				return 0, false, err
			}
			b = a
			if isRange {
				if b, err = value(last, lo, hi, names); err != nil {
					return 0, false, err
				}
				if b < a {
					return 0, false, fmt.Errorf("a range %q that ends before it starts", rng)
				}
			} else if hasStep {
				b = hi // a/s: from a to the end
			}
		}
		out |= span(a, b, step)
	}
	return out, false, nil
}

// value reads one value of a field: a number, or a name.
func value(s string, lo, hi int, names []string) (int, error) {
	for i, n := range names {
		if n != "" && strings.EqualFold(s, n) {
			return i, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q: want %d to %d", s, lo, hi)
	}
	return n, nil
}

func span(a, b, step int) uint64 {
	var out uint64
	for i := a; i <= b; i += step {
		out |= 1 << i
	}
	return out
}

// Next returns the first tick strictly after t; zero if there is none in
// the next five years (the 30th of February).
//
// Cron ticks are read in the Spec's time zone, wall clock: a tick whose wall
// time a daylight-saving change skips does not happen that day (02:30 on the
// night clocks go from 02:00 to 03:00), and one whose wall time happens twice
// happens once, the first time (01:30 on the night clocks go back).
func (s *Spec) Next(t time.Time) time.Time {
	if s.every > 0 {
		e := int64(s.every)
		n := t.UnixNano()
		k := n / e
		if n < 0 && n%e != 0 {
			k-- // floor, before the epoch
		}
		return time.Unix(0, (k+1)*e).UTC()
	}
	c := t.Truncate(time.Minute).Add(time.Minute)
	end := c.AddDate(5, 0, 0)
	// advance moves c to next if that is later (wall-clock jumps across a
	// daylight-saving change can land earlier), else by a minute.
	advance := func(next time.Time) {
		if next.After(c) {
			c = next
		} else {
			c = c.Add(time.Minute)
		}
	}
	for c.Before(end) {
		l := c.In(s.loc)
		y, mo, d := l.Date()
		h, mi := l.Hour(), l.Minute()
		switch {
		case s.month&(1<<uint(mo)) == 0:
			advance(time.Date(y, mo+1, 1, 0, 0, 0, 0, s.loc))
		case !s.dayMatches(l):
			advance(time.Date(y, mo, d+1, 0, 0, 0, 0, s.loc))
		case s.hour&(1<<uint(h)) == 0:
			advance(time.Date(y, mo, d, h+1, 0, 0, 0, s.loc))
		case s.minute&(1<<uint(mi)) == 0:
			// The next minute of this hour that matches, or the next hour.
			rest := s.minute >> uint(mi+1) << uint(mi+1)
			if rest == 0 {
				advance(c.Add(time.Duration(60-mi) * time.Minute))
			} else {
				advance(c.Add(time.Duration(bits.TrailingZeros64(rest)-mi) * time.Minute))
			}
		case sameWall(c.Add(-time.Hour).In(s.loc), l):
			// The second time this wall time happens (the clocks went
			// back): it happened already.
			c = c.Add(time.Minute)
		default:
			return c
		}
	}
	return time.Time{}
}

func (s *Spec) dayMatches(l time.Time) bool {
	dom := s.dom&(1<<uint(l.Day())) != 0
	dow := s.dow&(1<<uint(l.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

func sameWall(a, b time.Time) bool {
	ya, ma, da := a.Date()
	yb, mb, db := b.Date()
	return ya == yb && ma == mb && da == db && a.Hour() == b.Hour() && a.Minute() == b.Minute()
}
