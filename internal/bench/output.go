package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes one JSON object per result, one per line.
func WriteJSON(w io.Writer, rs []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// WriteTable writes the results as a table, then each result's baseline,
// extra figures and notes.
func WriteTable(w io.Writer, rs []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tops/s\tunit\tbaseline ops/s\tratio\tp50 ms\tp99 ms\tp99.9 ms\ttarget\t")
	for _, r := range rs {
		met := ""
		if r.TargetMet != nil {
			met = "missed"
			if *r.TargetMet {
				met = "met"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Workload, num(r.OpsPerSec), r.Unit,
			num(r.BaselineOpsPerSec), num(r.Ratio), num(r.P50Ms), num(r.P99Ms), num(r.P999Ms), met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		fmt.Fprintf(w, "\n%s", r.Workload)
		if r.Store != "" {
			fmt.Fprintf(w, " (%s)", r.Store)
		}
		fmt.Fprintln(w)
		if r.Baseline != "" {
			fmt.Fprintf(w, "  baseline: %s", r.Baseline)
			if r.BaselineP50Ms != 0 {
				fmt.Fprintf(w, "; p50 %s ms", num(r.BaselineP50Ms))
			}
			if r.BaselineP99Ms != 0 {
				fmt.Fprintf(w, ", p99 %s ms", num(r.BaselineP99Ms))
			}
			fmt.Fprintln(w)
		}
		if r.RatioOf != "" {
			fmt.Fprintf(w, "  ratio: %s = %s\n", r.RatioOf, num(r.Ratio))
		}
		if r.Target != "" {
			met := "missed"
			if r.TargetMet != nil && *r.TargetMet {
				met = "met"
			}
			fmt.Fprintf(w, "  target: %s — %s\n", r.Target, met)
		}
		keys := make([]string, 0, len(r.Extra))
		for k := range r.Extra {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+"="+num(r.Extra[k]))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "  %s\n", strings.Join(parts, " "))
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	return nil
}

// num formats a figure: blank for zero, thousands separators for large
// values, four significant digits for small ones.
func num(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 10_000 || v <= -10_000:
		s := strconv.FormatInt(int64(v+0.5), 10)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	default:
		return strconv.FormatFloat(round(v), 'f', -1, 64)
	}
}
