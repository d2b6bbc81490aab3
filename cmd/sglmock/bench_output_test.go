package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// Outputs that could not be written at the end of a sweep are refused
// before the first request: the server here counts what it gets.
func TestBenchChecksOutputsFirst(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer srv.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--plot", filepath.Join(dir, "sweep.gif")}, "--plot " + filepath.Join(dir, "sweep.gif") + ": cannot draw .gif: use one of .png, .svg, .pdf, .jpg, .jpeg, .tif, .tiff, .eps"},
		{[]string{"--plot", filepath.Join(dir, "sweep")}, "no extension to pick the format by"},
		{[]string{"--plot", "-"}, "--plot needs a file name"},
		{[]string{"--csv", filepath.Join(dir, "no", "sweep.csv")}, "no directory " + filepath.Join(dir, "no")},
		{[]string{"--csv", filepath.Join(file, "sweep.csv")}, file + " is not a directory"},
		{[]string{"--json", dir}, "--json " + dir + ": is a directory"},
		{[]string{"--csv", "-", "--json", "-"}, "would both write to standard output"},
		{[]string{"--csv", filepath.Join(dir, "x"), "--json", filepath.Join(dir, "x")}, "--csv and --json both write"},
		{[]string{"--dry-run", "--profile", "default", "--csv", filepath.Join(dir, "x.csv")}, "--dry-run sends nothing"},
	} {
		var stderr bytes.Buffer
		args := append([]string{"bench", "twopoint", "--url", srv.URL}, tt.args...)
		if code := run(args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line with %q", tt.args, code, stderr.String(), tt.want)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the refused runs sent %d requests, want none", n)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the checks left files behind: %v", entries)
	}
}

// watch calls on before each two-point leg's /generate (1 for the first
// leg) and then sends it.
type watch struct {
	next http.RoundTripper
	legs int
	on   func(leg int, req *http.Request)
}

func (w *watch) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/generate" && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"rid":"twopoint-`)) {
			w.legs++
			w.on(w.legs, req)
		}
	}
	return w.next.RoundTrip(req)
}

var rowLine = regexp.MustCompile(`(?m)^ +\d+ +\d+ `)

// benchMock runs bench twopoint with args against a kimi mock whose
// client calls on before each leg.
func benchMock(t *testing.T, ctx context.Context, args []string, on func(int, *http.Request), stdout, stderr io.Writer) int {
	t.Helper()
	m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
	hc := *m.Client
	hc.Transport = &watch{next: m.Client.Transport, on: on}
	c := &harness.Client{HTTP: &hc, BaseURL: m.URL, Backend: harness.SGLang}
	o, err := parseBenchFlags(append([]string{"twopoint"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return bench(ctx, c, o, nil, stdout, stderr)
}

// Each row is printed as its context finishes: the first is out before
// the second context's first leg is sent.
func TestBenchStreamsRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stdout bytes.Buffer
		seen := map[int]int{}
		code := benchMock(t, context.Background(), []string{"--ctx", "1024:1407,8192:11382", "--method", "flush+nonce"},
			func(leg int, _ *http.Request) { seen[leg] = len(rowLine.FindAllString(stdout.String(), -1)) }, &stdout, io.Discard)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stdout.String())
		}
		if want := map[int]int{1: 0, 2: 0, 3: 1, 4: 1}; !equalMaps(seen, want) {
			t.Errorf("rows printed before each leg: got %v, want %v", seen, want)
		}
		if got := len(rowLine.FindAllString(stdout.String(), -1)); got != 2 {
			t.Errorf("%d rows in the end, want 2:\n%s", got, stdout.String())
		}
	})
}

func equalMaps(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Ctrl-C (the context cancelled) during the second context: the run says it
// was interrupted, what was complete and what was written, prints and
// writes the first row, and exits 130.
func TestBenchInterrupted(t *testing.T) {
	dir := t.TempDir()
	csvPath, plotPath := filepath.Join(dir, "sweep.csv"), filepath.Join(dir, "sweep.png")
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stdout, stderr bytes.Buffer
		code := benchMock(t, ctx, []string{"--ctx", "1024:1407,8192:11382", "--method", "naive,flush+nonce", "--csv", csvPath, "--plot", plotPath},
			func(leg int, _ *http.Request) {
				if leg == 3 {
					cancel()
				}
			}, &stdout, &stderr)
		if code != exitInterrupted {
			t.Fatalf("exit %d, want %d\n%s%s", code, exitInterrupted, stdout.String(), stderr.String())
		}
		want := "sglmock bench twopoint: interrupted: 1 of 4 rows complete, printed above; written to " + csvPath + ", " + plotPath + "\n"
		if stderr.String() != want {
			t.Errorf("stderr:\n%s\nwant\n%s", stderr.String(), want)
		}
		if got := len(rowLine.FindAllString(stdout.String(), -1)); got != 1 || !strings.Contains(stdout.String(), " [1] POISONED: leg b reused 1406 of 1407") {
			t.Errorf("stdout: %d rows, want the first with its notes:\n%s", got, stdout.String())
		}
	})
	if recs := readCSV(t, csvPath); len(recs) != 2 || recs[1][0] != "1024" {
		t.Errorf("the CSV: %q, want the header and the first row", recs)
	}
	if _, err := os.Stat(plotPath); err != nil {
		t.Errorf("the plot: %v", err)
	}
}

// Interrupted before any row: nothing is written, and it says so.
func TestBenchInterruptedBeforeAnyRow(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var stderr bytes.Buffer
		code := benchMock(t, ctx, []string{"--ctx", "1024:1407", "--csv", filepath.Join(dir, "sweep.csv")},
			func(int, *http.Request) { cancel() }, io.Discard, &stderr)
		if want := "sglmock bench twopoint: interrupted: no row of 1 was complete; nothing written\n"; code != exitInterrupted || stderr.String() != want {
			t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr.String(), exitInterrupted, want)
		}
	})
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files written: %v", entries)
	}
}

// --csv - and --json - write to standard output, as calibrate's -o -; the
// table then goes to standard error.
func TestBenchCSVAndJSONToStdout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := benchMock(t, context.Background(), []string{"--ctx", "1024:1407", "--csv", "-"}, func(int, *http.Request) {}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr.String())
		}
		recs, err := csv.NewReader(&stdout).ReadAll()
		if err != nil || len(recs) != 2 || strings.Join(recs[0][:7], ",") != "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached" {
			t.Errorf("stdout is not the CSV: %v %q", err, recs)
		}
		if !strings.Contains(stderr.String(), "method flush+nonce") || len(rowLine.FindAllString(stderr.String(), -1)) != 1 {
			t.Errorf("stderr lacks the table:\n%s", stderr.String())
		}
		stdout.Reset()
		stderr.Reset()
		if code := benchMock(t, context.Background(), []string{"--ctx", "1024:1407", "--json", "-"}, func(int, *http.Request) {}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr.String())
		}
		var rep harness.Report
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Rows) != 1 || rep.Rows[0].CtxReq != 1024 {
			t.Errorf("stdout is not the JSON report: %v\n%s", err, stdout.String())
		}
	})
}

// The status line: the legs done, the leg in flight, the time spent, and
// the ETA counted down from when it was predicted; fitted ones say so.
func TestStatusLine(t *testing.T) {
	for _, tt := range []struct {
		eta      harness.ETA
		sinceETA time.Duration
		want     string
	}{
		{harness.ETA{Left: 220 * time.Second, Source: harness.ETAModel}, 0, "legs 5/12: flush+nonce ctx 8192 leg b | 1m02s elapsed | ETA 3m40s"},
		{harness.ETA{Left: 220 * time.Second, Source: harness.ETAModel}, 20 * time.Second, "legs 5/12: flush+nonce ctx 8192 leg b | 1m02s elapsed | ETA 3m20s"},
		{harness.ETA{Left: 10 * time.Second, Source: harness.ETAModel}, time.Minute, "legs 5/12: flush+nonce ctx 8192 leg b | 1m02s elapsed | ETA 0s"},
		{harness.ETA{Left: 2 * time.Hour, Source: harness.ETAMeasured}, 0, "legs 5/12: flush+nonce ctx 8192 leg b | 1m02s elapsed | ETA ~2h00m00s (fitted to the legs so far)"},
		{harness.ETA{}, 0, "legs 5/12: flush+nonce ctx 8192 leg b | 1m02s elapsed"},
	} {
		if got := statusLine(5, 12, "flush+nonce ctx 8192 leg b", 62*time.Second, tt.eta, tt.sinceETA); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

// On a terminal the status line is cleared before a row is written and
// drawn again after it, so that the two never share a line.
func TestConsoleClearsStatusForRows(t *testing.T) {
	var out, status bytes.Buffer
	now := time.Unix(0, 0)
	c := &console{table: harness.NewTableWriter(&out, false), status: &status, width: func() int { return 60 }, now: func() time.Time { return now }}
	c.legs, c.start = 2, now // Start without its ticker
	c.Leg("flush+nonce ctx 1024 leg a", harness.ETA{Left: 3 * time.Second, Source: harness.ETAModel})
	c.Done()
	c.Row(&harness.Report{Method: "twopoint", Rows: []harness.Row{{Method: harness.FlushNonce, CtxReq: 1024, PromptTokens: 1407, A: 1, B: 17}}})
	if err := c.Close(nil); err != nil {
		t.Fatal(err)
	}
	line := func(done int) string {
		return "\r\033[Klegs " + string(rune('0'+done)) + "/2: flush+nonce ctx 1024 leg a | 0s elapsed | ETA 3s"
	}
	want := line(0) + line(1) + "\r\033[K" + line(1) + "\r\033[K"
	if status.String() != want {
		t.Errorf("status:\n%q\nwant\n%q", status.String(), want)
	}
	if !strings.Contains(out.String(), "    1024       1407") {
		t.Errorf("the row:\n%s", out.String())
	}
}

// The ETA's cost model is read from /sim/profile: for every built-in
// profile it predicts what the profile itself does.
func TestCostModelFromSimProfile(t *testing.T) {
	for _, b := range profile.Builtins() {
		t.Run(b.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mocktest.Profile(t, b.Name)
				m := mocktest.Start(t, api.Config{Profile: p})
				info, err := (&harness.Client{HTTP: m.Client, BaseURL: m.URL, Backend: harness.SGLang}).SimInfo(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				model, err := costModel(info)
				if err != nil {
					t.Fatalf("%s: %v", b.Name, err)
				}
				want := profilePredictor{p}
				for _, tokens := range []int{1024, 8192} {
					if got, w := model.Seconds(tokens, 0, 17), want.Seconds(tokens, 0, 17); got != w {
						t.Errorf("%s at %d: %g s, want %g", b.Name, tokens, got, w)
					}
					if got, w := model.CachedOnRepeat(tokens), want.CachedOnRepeat(tokens); got != w {
						t.Errorf("%s at %d: reuses %d on a repeat, want %d", b.Name, tokens, got, w)
					}
				}
			})
		})
	}
}

// The dry run refuses a context the profile's server would refuse, as the
// run itself would stop there: the longest prompt leaves room for leg b's
// tokens and stays under the longest input.
func TestBenchDryRunContextLength(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--ctx", "1024,32768"}, "sglmock bench: --ctx 32768: profile default takes prompts of at most 32751 tokens with b=17 (context_length 32768); the server would refuse this one\n"},
		{[]string{"--ctx", "32752"}, "sglmock bench: --ctx 32752: profile default takes prompts of at most 32751 tokens with b=17 (context_length 32768); the server would refuse this one\n"},
		{[]string{"--ctx", "32762", "--b", "2"}, "sglmock bench: --ctx 32762: profile default takes prompts of at most 32761 tokens with b=2 (context_length 32768); the server would refuse this one\n"},
		{[]string{"--ctx", "32751"}, ""},
		{[]string{"--ctx", "32761", "--b", "2"}, ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"bench", "twopoint", "--dry-run", "--profile", "default"}, tt.args...), &stdout, &stderr)
		if want := map[bool]int{true: 0, false: 2}[tt.want == ""]; code != want || stderr.String() != tt.want {
			t.Errorf("%q: exit %d, stderr %q; want %d, %q", tt.args, code, stderr.String(), want, tt.want)
		}
	}
}
