package server

import (
	"errors"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/weirhq/weir/api"
	"github.com/weirhq/weir/store"
)

// Every integer in a query is ASCII digits alone, on every route that
// takes one, on both stores: a sign (but an index's '-'), a space, an
// underscore, a letter, another script's digits, a fraction or more than
// 19 digits is 400 bad_request, and the same number in plain digits is
// taken. (Red team, round fourteen: limit=+5 was a page of five.)
func TestIntegerQueryParametersAreDigitsAlone(t *testing.T) {
	onEveryStore(t, func(t *testing.T, d *dsServer) {
		ctx := t.Context()
		if _, _, err := d.st.CreateRun(ctx, &store.CreateRunParams{ID: "r", Workflow: "wf"}); err != nil {
			t.Fatal(err)
		}
		d.create("s", "text/plain").must(t, http.StatusCreated)
		// Each route with %s where the integer goes, and a good value.
		routes := []struct{ path, good string }{
			{"/v1/runs?limit=%s", "5"},
			{"/v1/runs/r/events?limit=%s", "5"},
			{"/v1/runs/r/events?after=%s", "5"},
			{"/v1/runs/r/events/k?wait=0s&after=%s", "5"},
			{"/v1/runs/r/state?limit=%s", "5"},
			{"/v1/streams?limit=%s", "5"},
			{"/v1/limiters?limit=%s", "5"},
			{"/v1/schedules?limit=%s", "5"},
			{"/v1/world/runs?limit=%s", "5"},
			{"/v1/world/runs/r/events?limit=%s", "5"},
			{"/v1/world/runs/r/steps?limit=%s", "5"},
			{"/v1/world/events?correlationId=c&limit=%s", "5"},
			{"/v1/world/hooks?limit=%s", "5"},
			{"/v1/world/queue?limit=%s", "5"},
			{"/v1/world/streams/w?index=%s", "-5"},
			{"/v1/world/streams/w/chunks?limit=%s", "5"},
			{"/v1/stream/s?offset=%s_0000000000000000", "0000000000000000"},
			{"/v1/stream/s?offset=0000000000000000_%s", "0000000000000000"},
		}
		bad := []string{
			"%2B5", "+5", "%2B0", "%2D%2D5", "5%20", "%205", "5%00", "1_0", "0x5", "5e0", "1.0", "%D9%A5", "%EF%BC%95",
			"a", "-", "--5", "5-", "00000000000000000005", strings.Repeat("9", 20), strconv.FormatUint(math.MaxInt64+1, 10),
		}
		for _, rt := range routes {
			if r := d.runsCall("GET", strings.Replace(rt.path, "%s", rt.good, 1)); r.status == http.StatusBadRequest {
				t.Errorf("GET %s: %d %s", strings.Replace(rt.path, "%s", rt.good, 1), r.status, r.body)
			}
			for _, v := range bad {
				p := strings.Replace(rt.path, "%s", v, 1)
				r := d.runsCall("GET", p)
				if r.status != http.StatusBadRequest || r.h.Get(api.ErrorHeader) != "bad_request" {
					t.Errorf("GET %s: %d %s %q, want 400 bad_request", p, r.status, r.h.Get(api.ErrorHeader), r.body)
				}
			}
		}
		// A '-' is an index's alone: elsewhere it is refused too.
		for _, p := range []string{"/v1/runs?limit=-5", "/v1/runs/r/events?after=-1", "/v1/world/queue?limit=-1", "/v1/runs/r/state?limit=-0"} {
			if r := d.runsCall("GET", p); r.status != http.StatusBadRequest || r.h.Get(api.ErrorHeader) != "bad_request" {
				t.Errorf("GET %s: %d %q, want 400 bad_request", p, r.status, r.body)
			}
		}
	})
}

// queryInt's table: what a number in a query may be.
func TestQueryInt(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	for _, c := range []struct {
		v      string
		lo, hi int64
		want   int64
		ok     bool
	}{
		{"5", 1, 1000, 5, true},
		{"1", 1, 1000, 1, true},
		{"1000", 1, 1000, 1000, true},
		{"0005", 1, 1000, 5, true}, // zeros in front, within the digits' bound
		{"0", 0, maxI, 0, true},
		{"9223372036854775807", 0, maxI, maxI, true},
		{"-5", minI, maxI, -5, true},
		{"-0", minI, maxI, 0, true},
		{"-9223372036854775808", minI, maxI, minI, true},
		{"0", 1, 1000, 0, false},
		{"1001", 1, 1000, 0, false},
		{"", 1, 1000, 0, false},
		{"+5", 1, 1000, 0, false},
		{"+5", minI, maxI, 0, false},
		{"-5", 1, 1000, 0, false}, // no '-' where none is negative
		{"-5", 0, maxI, 0, false},
		{"-", minI, maxI, 0, false},
		{"--5", minI, maxI, 0, false},
		{"5-", minI, maxI, 0, false},
		{" 5", 1, 1000, 0, false},
		{"5 ", 1, 1000, 0, false},
		{"5\x00", 1, 1000, 0, false},
		{"1_000", 1, 1000, 0, false},
		{"0x10", 1, 1000, 0, false},
		{"1e3", 1, 1000, 0, false},
		{"5.0", 1, 1000, 0, false},
		{"\u0665", 1, 1000, 0, false},               // ARABIC-INDIC DIGIT FIVE
		{"\uff15", 1, 1000, 0, false},               // FULLWIDTH DIGIT FIVE
		{"0000000000000000005", 1, 1000, 5, true},   // 19 digits
		{"00000000000000000005", 1, 1000, 0, false}, // 20
		{"9223372036854775808", 0, maxI, 0, false},
		{"-9223372036854775809", minI, maxI, 0, false},
		{"9999999999999999999", 0, maxI, 0, false},
		{strings.Repeat("1", 1<<10), 0, maxI, 0, false},
	} {
		got, err := queryInt("limit", c.v, c.lo, c.hi)
		if c.ok != (err == nil) || c.ok && got != c.want {
			t.Errorf("queryInt(%q, %d, %d) = %d, %v; want %d, ok %v", c.v, c.lo, c.hi, got, err, c.want, c.ok)
		}
		if err != nil && (!errors.Is(err, api.ErrBadRequest) || api.Status(err) != http.StatusBadRequest || len(err.Error()) > 200) {
			t.Errorf("queryInt(%q): error %v (%d)", c.v, err, api.Status(err))
		}
	}
}

// digitsRE is what parseDigits takes, in another form.
var digitsRE = regexp.MustCompile(`^-?[0-9]{1,19}$`)

// parseDigits agrees with a regular expression and strconv on any string.
func FuzzQueryInt(f *testing.F) {
	for _, s := range []string{"5", "+5", "-5", "-0", "0005", "", "-", " 5", "1_0", "0x5", "\u0665",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "00000000000000000005"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, signed bool) {
		n, ok := parseDigits(s, signed)
		want, err := strconv.ParseInt(s, 10, 64)
		wantOK := digitsRE.MatchString(s) && (signed || s[0] != '-') && err == nil
		if ok != wantOK || ok && n != want {
			t.Fatalf("parseDigits(%q, %v) = %d, %v; want %d, %v", s, signed, n, ok, want, wantOK)
		}
		lo := int64(0)
		if signed {
			lo = math.MinInt64
		}
		if m, err := queryInt("x", s, lo, math.MaxInt64); err != nil {
			badRequest(t, err)
		} else if !ok || m != n {
			t.Fatalf("queryInt(%q) = %d where parseDigits says %d, %v", s, m, n, ok)
		}
	})
}
