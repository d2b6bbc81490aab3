package harness

import (
	"strings"
	"testing"
)

func verdict(causes ...Cause) Verdict { return Verdict{Causes: causes} }

// Notes are numbered in the order causes first appear, the worst of a
// row first; a cause is one note on both legs and, in the compact table,
// on every row whatever its figures; in the wide table each set of figures
// is its own note.
func TestNotes(t *testing.T) {
	refused := func(leg string) Cause {
		return Cause{Level: Suspect, Text: `flush before leg ` + leg + ` refused (1 try): HTTP 400 "Flush cache failed."`}
	}
	reused := func(n, of string) Cause {
		return Cause{Level: Poisoned, Text: "leg b reused " + n + " of " + of + " prompt tokens (cached_tokens)"}
	}
	undefined := Cause{Level: Poisoned, Text: "t_b < t_a, so decode is undefined"}
	undefinedSuspect := Cause{Level: Suspect, Text: "t_b < t_a, so decode is undefined"}
	retried := Cause{Level: OK, Text: "2 of 2 flushes were refused at first and accepted on a retry, after at most 2 tries"}
	rows := []struct {
		ctx int
		v   Verdict
	}{
		{1024, verdict(refused("a"), refused("b"), reused("1406", "1407"), undefined)},
		{8192, verdict(reused("11381", "11382"), refused("b"))},
		{32768, verdict()},
		{65536, verdict(retried, undefinedSuspect)},
	}
	for _, tt := range []struct {
		wide  bool
		refs  []string
		notes []string
	}{
		{false, []string{"[1,2,3]", "[1,3]", "", "[4,5]"}, []string{
			"POISONED: leg b reused 1406 of 1407 prompt tokens (cached_tokens) (these figures are ctx 1024's; --wide gives each row's)",
			"POISONED: t_b < t_a, so decode is undefined",
			`SUSPECT: flush before legs a and b refused (1 try): HTTP 400 "Flush cache failed."`,
			"SUSPECT: t_b < t_a, so decode is undefined",
			"2 of 2 flushes were refused at first and accepted on a retry, after at most 2 tries",
		}},
		{true, []string{"[1,2,3]", "[3,4]", "", "[5,6]"}, []string{
			"POISONED: leg b reused 1406 of 1407 prompt tokens (cached_tokens)",
			"POISONED: t_b < t_a, so decode is undefined",
			`SUSPECT: flush before legs a and b refused (1 try): HTTP 400 "Flush cache failed."`,
			"POISONED: leg b reused 11381 of 11382 prompt tokens (cached_tokens)",
			"SUSPECT: t_b < t_a, so decode is undefined",
			"2 of 2 flushes were refused at first and accepted on a retry, after at most 2 tries",
		}},
	} {
		var ns notes
		for i, row := range rows {
			if got := ns.refs(row.v, row.ctx, tt.wide); got != tt.refs[i] {
				t.Errorf("wide %v, ctx %d: refs %q, want %q", tt.wide, row.ctx, got, tt.refs[i])
			}
		}
		var got []string
		for _, n := range ns.list {
			got = append(got, n.text(tt.wide))
		}
		if strings.Join(got, "\n") != strings.Join(tt.notes, "\n") {
			t.Errorf("wide %v: notes\n%s\nwant\n%s", tt.wide, strings.Join(got, "\n"), strings.Join(tt.notes, "\n"))
		}
	}
}

// A long note wraps into lines of at most the width, indented under its
// text.
func TestWrapNote(t *testing.T) {
	got := wrapNote("[12] ", strings.Repeat("word ", 9)+"end", 30)
	want := " [12] word word word word word\n      word word word word end\n"
	if got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
