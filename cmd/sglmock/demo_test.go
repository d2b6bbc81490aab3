package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/internal/norace"
)

// demoTolerance is what the demo's test asks of the fixed method over
// loopback: decode and TTFT within 2 % of the truth of the requests it
// sent (the rows' own verdict allows harness.Tolerance).
const demoTolerance = 0.02

// The demo over real loopback: the naive table reproduces the original
// failure and names it, the flush+nonce table is within 2 % of the truth
// for decode and TTFT, each row saying how far its decode scatters, and
// nothing else is said of it but that (its only SUSPECT cause).
//
// It runs the demo's contexts with b = 193 (some 44 DDTREE rounds, enough
// for the rounds check, too few for the scatter check: ±10 % at 95 %, which
// the demo's own b = 1025 narrows to ±4.4 % at twice the wall time) at x1,
// x10 and x20: each TTFT is then at least 190 ms of wall clock, which a
// host stall must reach 4 ms to move by 2 %. Under the race detector the
// mock's own host time per request grows about fivefold and varies as
// much from leg to leg, so the test runs without it.
func TestDemoOverLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("runs about 12 s of wall time")
	}
	norace.Skip(t, "checks the demo's figures against the truth over loopback")
	set := demoSettings{b: 193, points: []demoPoint{
		{demoPoints[0].Point, 1},
		{demoPoints[1].Point, 10},
		{demoPoints[2].Point, 20},
	}}
	// A shared host can stall this process for tens of milliseconds (the
	// CPU pressure of other jobs), which no speedup survives: a stalled
	// attempt gets another, up to three. A wrong figure is wrong every time.
	for attempt := 1; ; attempt++ {
		misses := demoAttempt(t, set, demoTolerance)
		if len(misses) == 0 {
			return
		}
		if attempt == 3 {
			t.Fatalf("flush+nonce off the truth in three attempts; the third:\n%s", strings.Join(misses, "\n"))
		}
		t.Logf("attempt %d off the truth (a host stall?), trying again:\n%s", attempt, strings.Join(misses, "\n"))
	}
}

// scatterCause is the acceptance-scatter SUSPECT of b = 193: its rounds
// are the run's own draw.
var scatterCause = regexp.MustCompile(`^b-a = 192 spans about \d+(\.\d)? speculative rounds of `)

// demoAttempt runs the demo, fails the test on anything but the precision,
// and returns the rows off the truth by more than tol.
func demoAttempt(t *testing.T, set demoSettings, tol float64) []string {
	t.Helper()
	points := set.points
	var stdout, stderr bytes.Buffer
	rep, code := demo(context.Background(), set, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"method naive", "method flush+nonce", "What happened:", "sglmock bench twopoint --url http://gpu-host:30000"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	// Each context says on stderr what it runs and how long it took.
	progress := regexp.MustCompile(`(?m)^\[(\d)/3\] ctx (\d+) \((\d+) prompt tokens\) at x(\d+): naive, then flush\+nonce \.\.\. \d+\.\d s$`)
	lines := progress.FindAllStringSubmatch(stderr.String(), -1)
	if len(lines) != len(points) {
		t.Errorf("the demo's progress on stderr: %q, want one line per context", stderr.String())
	}
	for i, m := range lines {
		if want := []string{strconv.Itoa(i + 1), strconv.Itoa(points[i].CtxReq), strconv.Itoa(points[i].Tokens), fmt.Sprint(points[i].speedup)}; !slices.Equal(m[1:], want) {
			t.Errorf("progress line %d: %q, want step, ctx, tokens, speedup %q", i, m[0], want)
		}
	}
	var misses []string
	for i, row := range rep.Rows {
		p := points[i%3]
		if row.PromptTokens != p.Tokens || row.CtxReq != p.CtxReq || row.Speedup != p.speedup {
			t.Errorf("row %d: ctx %d, %d tokens, x%g; want %d, %d, x%g", i, row.CtxReq, row.PromptTokens, row.Speedup, p.CtxReq, p.Tokens, p.speedup)
		}
		if i < 3 {
			if !strings.HasPrefix(row.Verdict.String(), "POISONED: leg b reused") || !strings.Contains(row.Verdict.String(), "t_b < t_a") {
				t.Errorf("naive at %d: verdict %q", row.PromptTokens, row.Verdict)
			}
			continue
		}
		tr := row.Truth
		// The demo's note on the rounds, unless the harness found them too
		// few for this run's acceptance, or the errors added up too large,
		// and said so.
		scattered := slices.ContainsFunc(row.Verdict.Causes, func(c harness.Cause) bool {
			return c.Level == harness.Suspect && (scatterCause.MatchString(c.Text) || strings.Contains(c.Text, "decode is known to ±"))
		})
		if note := "b-a = 192: about 44 rounds, so one run's decode is known to ±10.3 % (95 %) despite the tokens a round accepts"; strings.Contains(row.Verdict.String(), note) == scattered {
			t.Errorf("flush+nonce at %d: verdict %q; want %q only without the scatter's SUSPECT", row.PromptTokens, row.Verdict, note)
		}
		// kimi refuses a flush for 50 ms after a response (SGLang's flush
		// race): the demo's retries make the row ok, with a note saying so.
		// The scatter of 44 rounds is a SUSPECT cause b = 193 has, and at
		// 1407 tokens so is the context leg b grows through (decode slows
		// steeply there).
		var rest harness.Verdict
		growth := row.PromptTokens == 1407
		for _, c := range row.Verdict.Causes {
			switch {
			case c.Level == harness.Suspect && scatterCause.MatchString(c.Text):
			case c.Level == harness.Suspect && strings.HasPrefix(c.Text, "decode_bias is ") && strings.Contains(c.Text, " (-9.1 % by construction, sglmock's model): leg b decodes from 1408 to 1600 tokens of context"):
				growth = !growth
			default:
				rest.Causes = append(rest.Causes, c)
			}
		}
		if growth {
			t.Errorf("flush+nonce at %d: verdict %q; want the growth cause at 1407 tokens only", row.PromptTokens, row.Verdict)
		}
		if rest.Level() != harness.OK || tr.DecodeErr == nil {
			// A stall longer than a leg's decode reverses t_a and t_b.
			misses = append(misses, fmt.Sprintf("flush+nonce at %d: verdict %q; want ok and a decode error", row.PromptTokens, row.Verdict))
			continue
		}
		line := fmt.Sprintf("flush+nonce at %d: TTFT error %+.3f %%, decode error %+.3f %%", row.PromptTokens, 100*tr.TTFTErr, 100**tr.DecodeErr)
		t.Log(line)
		if math.Abs(*tr.DecodeErr) > tol || math.Abs(tr.TTFTErr) > tol {
			misses = append(misses, line+fmt.Sprintf(" (bound %.0f %%)", 100*tol))
		}
	}
	return misses
}
