package simulate

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Table writes the report for a person: the totals, a line per policy,
// the keys that change most and the first differing decisions.
func (r *Report) Table(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "%d decisions recorded from %s to %s", r.Entries, stamp(r.From), stamp(r.To))
	switch {
	case r.Sample > 1 && r.ByDecision:
		fmt.Fprintf(w, ", one decision in %d: the replay sees a part of each key's, a state that was never the real one", r.Sample)
	case r.Sample > 1:
		fmt.Fprintf(w, ", every decision of one key in %d: the counts are those keys'", r.Sample)
	}
	fmt.Fprintln(w)
	if r.Replayed > 0 {
		fmt.Fprintf(w, "replayed under their recorded limits: %d of %d reproduce the recorded decision\n", r.Reproduced, r.Replayed)
	}
	fmt.Fprintf(w, "decisions that differ: %d; admitted before, refused now: %d\n\n", r.Changed, r.NewlyRefused)

	fmt.Fprintln(w, "POLICY\tREQUESTS\tOLD ADMITTED\tOLD REFUSED\tNEW ADMITTED\tNEW REFUSED\tCHANGED\tFIRST NEWLY REFUSED")
	for _, p := range r.Policies {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%s\t%d\t%s\n", p.Name, p.New.Requests, p.Old.Admitted, refusals(p.Old),
			p.New.Admitted, refusals(p.New), p.Changed, stampOr(p.FirstNewlyRefused))
	}
	fmt.Fprintf(w, "all\t%d\t%d\t%s\t%d\t%s\t%d\n", r.New.Requests, r.Old.Admitted, refusals(r.Old), r.New.Admitted, refusals(r.New), r.Changed)
	for _, p := range r.Policies {
		if p.Error != "" {
			fmt.Fprintf(w, "\n%s: %s\n", p.Name, p.Error)
		}
	}
	if len(r.Keys) > 0 {
		fmt.Fprintln(w, "\nKEYS THAT CHANGE MOST\tREQUESTS\tOLD REFUSED\tNEW REFUSED\tFIRST NEWLY REFUSED")
		for _, k := range r.Keys {
			fmt.Fprintf(w, "%s %s\t%d\t%d\t%d\t%s\n", k.Policy, k.Key, k.Requests, k.OldRefused, k.NewRefused, stampOr(k.FirstNewlyRefused))
		}
	}
	if len(r.Differences) > 0 {
		fmt.Fprintf(w, "\nFIRST %d DECISIONS THAT DIFFER\tPOLICY\tKEY\tCOST\tOLD\tNEW\n", len(r.Differences))
		for _, d := range r.Differences {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", stamp(d.Time), d.Policy, d.Key, d.Cost, d.Old, d.New)
		}
	}
	return w.Flush()
}

// refusals is a count of refusals, with the shadowed among them.
func refusals(c Counts) string {
	s := fmt.Sprint(c.Refused)
	if c.Shadowed > 0 {
		s += fmt.Sprintf(" (%d shadow)", c.Shadowed)
	}
	if c.Errors > 0 {
		s += fmt.Sprintf(" +%d errors", c.Errors)
	}
	return s
}

func stamp(t time.Time) string { return t.Format("2006-01-02T15:04:05.000000Z") }

func stampOr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}
