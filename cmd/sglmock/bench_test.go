package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglmock/sglmock/harness"
	"github.com/sglmock/sglmock/internal/norace"
	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/mocktest"
)

func TestBenchUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "want a method: sglmock bench twopoint|stream"},
		{[]string{"bench", "sweep"}, "want a method"},
		{[]string{"bench", "twopoint", "--backend", "tgi"}, `--backend "tgi": must be sglang, vllm or openai`},
		{[]string{"bench", "twopoint", "--ctx", "1024,x"}, `"x" is not a positive whole number`},
		{[]string{"bench", "twopoint", "--ctx", "8"}, "a prompt needs 16..10000000 tokens"},
		{[]string{"bench", "twopoint", "--ctx", "1024:99999999999"}, "a prompt needs 16..10000000 tokens"},
		{[]string{"bench", "twopoint", "--repeat", "0", "--url", "http://127.0.0.1:1"}, "repeat 0: must be in 1..10000"},
		{[]string{"bench", "twopoint", "--method", "cold"}, `method "cold": must be one of`},
		{[]string{"bench", "twopoint", "--url", "localhost:30000"}, "must start with http://"},
		{[]string{"bench", "twopoint", "--profile", "default"}, "--profile only goes with --dry-run"},
		{[]string{"bench", "twopoint", "--dry-run"}, "--dry-run needs --profile"},
		{[]string{"bench", "twopoint", "--page-size", "16"}, "--page-size describes a profile: it only goes with --dry-run"},
		{[]string{"bench", "twopoint", "--a", "5", "--b", "5", "--url", "http://127.0.0.1:1"}, "need 1 <= a < b <= 10000000"},
		{[]string{"bench", "twopoint", "--backend", "openai", "--method", "flush", "--url", "http://127.0.0.1:1"},
			"the OpenAI API has no route to empty a server's prefix cache"},
		{[]string{"bench", "twopoint", "--url", "http://127.0.0.1:1"}, "cannot reach the server"},
		{[]string{"bench", "stream", "--max-new-tokens", "2", "--url", "http://127.0.0.1:1"}, "at least 3"},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		if code := run(tt.args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

func TestBenchHelp(t *testing.T) {
	for _, args := range [][]string{{"bench", "--help"}, {"bench", "twopoint", "--help"}, {"bench", "stream", "--help"}} {
		var stderr bytes.Buffer
		if code := run(args, io.Discard, &stderr); code != 0 || !strings.Contains(stderr.String(), "Exit status: 1 when any row is POISONED") {
			t.Errorf("%q: exit %d\n%s", args, code, stderr.String())
		}
	}
}

// The dry run prints each method's predicted time from the profile's
// evaluator, and sends nothing (there is no server at the URL).
func TestBenchDryRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"bench", "twopoint", "--dry-run", "--profile", "kimi-k2.6-rtx6000", "--url", "http://127.0.0.1:1",
		"--ctx", "1024:1407,8192:11382,32768:45507,196608", "--method", "naive,flush+nonce"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	mocktest.Golden(t, "dryrun.txt", stdout.Bytes())
}

// bench against an in-process mock: the exit status follows the verdicts,
// and --csv, --json and --plot are written.
func TestBenchAgainstMock(t *testing.T) {
	norace.Skip(t, "checks bench's rows and verdicts")
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{Profile: mocktest.Profile(t, "kimi-k2.6-rtx6000")})
		c := &harness.Client{HTTP: m.Client, BaseURL: m.URL, Backend: harness.SGLang}
		o, err := parseBenchFlags([]string{"twopoint", "--ctx", "1024:1407,8192:11382", "--method", "naive,flush+nonce",
			"--csv", filepath.Join(dir, "sweep.csv"), "--json", filepath.Join(dir, "sweep.json"), "--plot", filepath.Join(dir, "sweep.png")}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := bench(context.Background(), c, o, nil, &stdout, &stderr); code != 1 {
			t.Fatalf("naive and flush+nonce: exit %d, want 1 (a POISONED row)\n%s%s", code, stdout.String(), stderr.String())
		}
		if !strings.Contains(stderr.String(), "POISONED rows") || !strings.Contains(stdout.String(), "method flush+nonce") {
			t.Errorf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
		o.methods = []harness.Method{harness.FlushNonce}
		if code := bench(context.Background(), c, o, nil, io.Discard, &stderr); code != 0 {
			t.Fatalf("flush+nonce: exit %d, want 0\n%s", code, stderr.String())
		}
		recs := readCSV(t, filepath.Join(dir, "sweep.csv"))
		if len(recs) != 3 || strings.Join(recs[0][:7], ",") != "ctx_req,prompt_tok,t_a,t_b,a,b,b_cached" || recs[2][9] != "flush+nonce" {
			t.Fatalf("the CSV: %q", recs)
		}
		o.method, o.maxNewTokens = "stream", 32
		if code := bench(context.Background(), c, o, nil, io.Discard, &stderr); code != 0 {
			t.Fatalf("stream: exit %d, want 0\n%s", code, stderr.String())
		}
	})
	if recs := readCSV(t, filepath.Join(dir, "sweep.csv")); len(recs) != 3 || recs[0][6] != "events" {
		t.Fatalf("the stream run's CSV: %q", recs)
	}
	pf, err := os.Open(filepath.Join(dir, "sweep.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	cfg, err := png.DecodeConfig(pf)
	if err != nil || cfg.Width < 500 || cfg.Height < 500 {
		t.Fatalf("the plot: %v, %dx%d", err, cfg.Width, cfg.Height)
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// A context the server cannot take is refused before any request, with
// the longest prompt it takes.
func TestBenchContextTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mocktest.Start(t, api.Config{}) // the default profile's context is 32768 tokens
		c := &harness.Client{HTTP: m.Client, BaseURL: m.URL, Backend: harness.SGLang}
		o, err := parseBenchFlags([]string{"twopoint", "--ctx", "1024,32752", "--method", "flush+nonce"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := bench(context.Background(), c, o, nil, &stdout, &stderr); code != 2 {
			t.Fatalf("exit %d, want 2\n%s", code, stderr.String())
		}
		want := "context 32752 does not fit the server's context length: it is 32768, and with 17 new tokens the longest prompt it takes is 32751 tokens"
		if !strings.Contains(stderr.String(), want) || stdout.Len() != 0 {
			t.Errorf("stdout:\n%s\nstderr:\n%s\nwant nothing on stdout and %q", stdout.String(), stderr.String(), want)
		}
		if st := m.Server.Engine().Stats(); st.Counters.Requests != 0 {
			t.Errorf("%d requests reached the engine, want none", st.Counters.Requests)
		}
	})
}

// A request the server refuses ends the run with exit 2 and the server's
// message, after printing the rows measured before it.
func TestBenchRequestRefused(t *testing.T) {
	norace.Skip(t, "checks bench's rows and verdicts")
	synctest.Test(t, func(t *testing.T) {
		// A server that reports no context length: the refusal comes from
		// the request itself.
		m := mocktest.StartBehind(t, api.Config{}, mocktest.Without("/v1/models")) // the default profile's context is 32768 tokens
		c := &harness.Client{HTTP: m.Client, BaseURL: m.URL, Backend: harness.SGLang}
		o, err := parseBenchFlags([]string{"twopoint", "--ctx", "1024,40000", "--method", "flush+nonce"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := bench(context.Background(), c, o, nil, &stdout, &stderr); code != 2 {
			t.Fatalf("exit %d, want 2\n%s", code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "    1024       1024") || !strings.Contains(stderr.String(), "flush+nonce at ctx 40000: POST /generate: HTTP 400") {
			t.Errorf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	})
}
