package compat

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestVersionsCompareAsPythonPackages(t *testing.T) {
	// Each version is below the next.
	order := []string{"0.5.9", "0.5.10.dev3", "0.5.10rc1", "0.5.10", "v0.5.10.post1", "0.5.10.post2.dev2009+g5fe238c43",
		"0.5.10.post2", "0.5.11a1", "0.5.11b2", "0.5.11rc1", "0.5.11", "0.5.18", "0.6"}
	for i := 1; i < len(order); i++ {
		a, err := ParseVersion(order[i-1])
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseVersion(order[i])
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Compare(b); got != -1 {
			t.Errorf("compare(%s, %s) = %d, want -1", order[i-1], order[i], got)
		}
		if got := b.Compare(a); got != 1 {
			t.Errorf("compare(%s, %s) = %d, want 1", order[i], order[i-1], got)
		}
	}
	a, err := ParseVersion("0.5.18")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseVersion("0.5.18.0")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Compare(b); got != 0 {
		t.Errorf("compare(0.5.18, 0.5.18.0) = %d, want 0", got)
	}
	for _, bad := range []string{"", "x", "0.5.x", "..", "0.5.18.bogus", "0.5.-1", "0.5..1", "post1"} {
		if _, err := ParseVersion(bad); !errors.Is(err, ErrVersion) {
			t.Errorf("ParseVersion(%q) = %v, want ErrVersion", bad, err)
		}
	}
}

func TestRulesOfEachRelease(t *testing.T) {
	all := Rules{EvictShortfall: true, AbortPendingChunk: true, GenerateCacheSalt: true, BatchRemovedPages: true,
		CoalesceKVEvents: true, SpecOverlap: true, LoadSnapshot: true, PrefetchTimeout: true, HostKVEvents: true}
	allBut31479 := all
	allBut31479.CoalesceKVEvents = false
	only22894 := Rules{HostKVEvents: true}
	only22894and23309 := Rules{HostKVEvents: true, PrefetchTimeout: true}
	for _, tc := range []struct {
		release string
		want    Rules
	}{
		{"0.5.10", Rules{}},
		{"0.5.10.post1", Rules{}},
		{"0.5.11", only22894},
		{"0.5.12", only22894and23309},
		{"v0.5.12", only22894and23309},
		{"0.5.17", allBut31479},
		{"0.5.18", all},
		{"", all}, // the default
		{"0.5.19", all},
	} {
		got, err := For(tc.release)
		if err != nil {
			t.Fatalf("For(%q): %v", tc.release, err)
		}
		if got != tc.want {
			t.Errorf("For(%q) = %+v, want %+v", tc.release, got, tc.want)
		}
	}
}

func TestUnknownReleaseIsRefusedWithTheKnownOnes(t *testing.T) {
	for _, v := range []string{"0.5.15", "0.5.23", "0.5.18.dev1", "0.5.18+local", "latest", "0.5.10.post2.dev2009"} {
		_, err := For(v)
		if !errors.Is(err, ErrUnknownRelease) {
			t.Fatalf("For(%q) = %v, want ErrUnknownRelease", v, err)
		}
		want := `"` + v + `": not a release sglmock follows: it follows SGLang 0.5.10, 0.5.10.post1, 0.5.11, 0.5.12, 0.5.17, 0.5.18, 0.5.19 (default 0.5.18); ` +
			"a release between two of these may hold some of the rules that changed between them, so it is not guessed"
		if err.Error() != want {
			t.Errorf("got %q\nwant %q", err, want)
		}
	}
}

func TestHasAReportedVersionTheRule(t *testing.T) {
	salt := func(r Rules) bool { return r.GenerateCacheSalt }
	coalesce := func(r Rules) bool { return r.CoalesceKVEvents }
	prefetch := func(r Rules) bool { return r.PrefetchTimeout }
	host := func(r Rules) bool { return r.HostKVEvents }
	for _, tc := range []struct {
		version string
		on      func(Rules) bool
		want    Presence
	}{
		{"0.5.12", salt, No},
		{"0.5.10.post2.dev2009+g5fe238c43", salt, No}, // the May 2026 source
		{"0.5.9", salt, No},
		{"0.5.13", salt, Unknown},
		{"0.5.17.dev40", salt, Unknown},
		{"0.5.17", salt, Yes},
		{"0.5.23", salt, Yes},
		{"0.5.17", coalesce, No},
		{"0.5.17.post1", coalesce, Unknown},
		{"0.5.18", coalesce, Yes},
		{"0.5.11", prefetch, No},
		{"0.5.11.post1", prefetch, Unknown},
		{"0.5.12", prefetch, Yes},
		{"0.5.10.post1", host, No},
		{"0.5.10.post2.dev2009+g5fe238c43", host, Unknown}, // between 0.5.10.post1 and 0.5.11
		{"0.5.11", host, Yes},
		{"not-a-version", salt, Unknown},
	} {
		if got := Has(tc.version, tc.on); got != tc.want {
			t.Errorf("Has(%q) = %v, want %v", tc.version, got, tc.want)
		}
	}
	if got := FirstWith(salt); got != "0.5.17" {
		t.Errorf("FirstWith(salt) = %q, want 0.5.17", got)
	}
	if got := FirstWith(host); got != "0.5.11" {
		t.Errorf("FirstWith(host) = %q, want 0.5.11", got)
	}
}

// TestEveryFieldHasOneRow keeps Rules and the table in step: a new rule
// is a field and its row.
func TestEveryFieldHasOneRow(t *testing.T) {
	typ := reflect.TypeFor[Rules]()
	rows := Table()
	if len(rows) != typ.NumField() {
		t.Fatalf("%d rows for %d fields", len(rows), typ.NumField())
	}
	for i, r := range rows {
		if f := typ.Field(i); f.Name != r.Field {
			t.Errorf("row %d is %s, field %d is %s", i, r.Field, i, f.Name)
		}
		var rs Rules
		*r.field(&rs) = true
		if reflect.ValueOf(rs).Field(i).Bool() != true || !r.In(rs) {
			t.Errorf("row %s sets another field", r.Name)
		}
		if !slices.Contains(Known(), r.Since) {
			t.Errorf("row %s: since %s is no known release", r.Name, r.Since)
		}
		if len(r.PRs) == 0 || r.Title == "" || r.Old == "" || r.New == "" || r.Function == "" {
			t.Errorf("row %s is incomplete", r.Name)
		}
	}
}
